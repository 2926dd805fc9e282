#!/usr/bin/env bash
# H100 call G of session 13 (2026-11-24): the forward's three warpgroups take turns at the tensor cores
# only in items of at least K key tiles (BT_ATT_FWD_TURNS=K; call F: turns in every item were 4% faster
# at T 4096 and 2-8% slower at T 1024 / 512). Tests of the attention group (a variant with K = 4 added),
# memcheck, then K = 0 (the default: none), 1 (all items), 3, 5, 7, 9 in 3 alternating rounds, B16 H12
# D64 causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  for k in 0 1 3 5 7 9; do echo "r$r K=$k: $(row BT_ATT_FWD_TURNS=$k timeout 60 build/bench_kernels)"; done
done; el
cd $OUT && tar -czf /tmp/h100s13g.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13g.tgz $OUT/
