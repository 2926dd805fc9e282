#!/usr/bin/env bash
# H100 call C of session 16 (2026-11-24): the forward's output stored by the tensor memory accelerator
# from a warp of the producer's warpgroup (consumers stage it in the Q tile and go on): attention tests
# and memcheck of them (build/ = `make` of this tree), three alternating rounds against build/v/base
# (the item order change alone) at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us), T 1024 beside
# cuDNN.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do echo "r$r base: $(att_row timeout 60 build/v/base)"; echo "r$r tma: $(att_row timeout 60 build/bench_kernels)"; done; el
for r in 1 2; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
  echo "with torch r$r:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt
done; el
