#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session): a trial, not kept (notes_attention.md): the backward's Dvec
# pre-pass in memory order (BT_ATT_DVEC_MO=1, a time step's heads in consecutive rows of the model's
# [B, T, H, D] views), built on the dev machine and carried: attention tests, memcheck (quick), the
# causal T 1024 / 4096 rows with it on and off in alternating processes.
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1
echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"; el
for r in 1 2 3; do
  for m in 1 0; do
    BT_ATT_DVEC_MO=$m BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 timeout 90 build/bench_kernels > $OUT/v.txt 2>&1
    printf "r%d DVEC_MO=%d causal T 1024, 4096 fwd, bwd: %s\n" $r $m "$(grep -E '^attention sweep' $OUT/v.txt | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}')"
  done
done; el
