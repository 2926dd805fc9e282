#!/usr/bin/env bash
# H100 call I of session 13 (2026-11-24): turns at the tensor cores that do not hold an item's start
# (warpgroup 0 takes an item's first turn without waiting for the last warpgroup to end the item
# before; turn barriers 1-3 / 7-9 for even / odd items) against aa084d3's binary (build/k7); tests of
# the attention group, memcheck, then K = 7 (default), 4, 1 and the build before in 3 alternating
# rounds, B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us), cuDNN in the process.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r aa084d3: $(row timeout 60 build/k7/bench_kernels)"
  for k in 7 4 1; do echo "r$r K=$k:    $(row BT_ATT_FWD_TURNS=$k timeout 60 build/bench_kernels)"; done
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
echo "with torch:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt; el
cd $OUT && tar -czf /tmp/h100s13i.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13i.tgz $OUT/
