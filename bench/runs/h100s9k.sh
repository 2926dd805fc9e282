#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session, last): the forward's L2 sections of 24 MiB as the default:
# attention tests and memcheck (quick), the T 512 / 1024 / 4096 causal rows against the build before
# (build/old9/bench_kernels_s9h, sections of 16) in alternating processes, one process with SDPA,
# and the default run against the build before (build/old9/train_gpt2_cuda_s9h). Outputs in one tar.
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1
echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"; el
row() { BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 90 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r new: $(row build/bench_kernels) | s9h: $(row build/old9/bench_kernels_s9h)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 BT_BENCH_SWEEP=1 timeout 200 build/bench_kernels > $OUT/torch.txt 2>&1
grep -E "^\| T1024 D64 causal" $OUT/torch.txt | cut -d'|' -f2,3,6,9,10,11,12,13; el
for r in 1 2; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old9/train_gpt2_cuda_s9h
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -cJf /tmp/s9k.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s9k.tar.xz $OUT/
