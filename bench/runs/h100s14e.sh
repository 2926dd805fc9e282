#!/usr/bin/env bash
# H100 call E of session 14 (2026-11-24): the candidate (build/cand): no proxy fence in the forward's
# step, and turns at MUFU in the items that take turns at the tensor cores (BT_ATT_FWD_MTURNS, default 1).
# Attention tests (build/cand/tests/test_kernels_gpu) with MTURNS 1 and 0, memcheck of the group, three
# alternating rounds against 44667e3 (build/base) at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us),
# and the T 1024 row beside PyTorch's SDPA (cuDNN) in one process.
source bench/runs/prelude.sh
for mt in 1 0; do
  BT_ATT_FWD_MTURNS=$mt BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/cand/tests/test_kernels_gpu > $OUT/test_att$mt.txt 2>&1
  echo "attention tests MTURNS=$mt: exit $?: $(tail -1 $OUT/test_att$mt.txt)"; grep -E "FAIL" $OUT/test_att$mt.txt | head -5
done; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/cand/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r base:          $(row timeout 60 build/base/bench_kernels)"
  echo "r$r cand:          $(row timeout 60 build/cand/bench_kernels)"
  echo "r$r cand MTURNS=0: $(row BT_ATT_FWD_MTURNS=0 timeout 60 build/cand/bench_kernels)"
done; el
for b in base cand; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/$b/bench_kernels > $OUT/torch_$b.txt 2>&1
  echo "with torch, $b:"; grep -E "^\| T1024 D64 causal" $OUT/torch_$b.txt
done; el
cd $OUT && tar -czf /tmp/h100s14e.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s14e.tgz $OUT/
