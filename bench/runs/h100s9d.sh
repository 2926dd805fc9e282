#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session): the attention forward with 4 K/V stages at D 64 (stage and
# phase of a ring use as a mask and a shift) and the P V descriptors from the stage's base: attention
# tests and memcheck (quick), the T 1024 / 4096 causal rows against the build before
# (build/old9/bench_kernels_s9c) in alternating processes, and the default run against it.
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1
echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"; el
row() { BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 90 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r new: $(row build/bench_kernels) | s9c: $(row build/old9/bench_kernels_s9c)"
done; el
for r in 1 2; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old9/train_gpt2_cuda_s9c
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -cJf /tmp/s9d.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s9d.tar.xz $OUT/
