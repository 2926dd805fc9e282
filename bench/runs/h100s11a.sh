#!/usr/bin/env bash
# H100 call A of session 11 (2026-11-24; the change measured here was not kept): the attention work-item decode in 32 bits (build/new11: the
# item's head and tile, and each head's offsets, without 64-bit divisions) against the code of 94b4fbf
# (build/): forward and backward of B16 H12 T1024 / T2048 D64 causal, 3 alternating rounds, and one
# run with PyTorch's SDPA (cuDNN) rows; the new test_kernels_gpu whole (cases named); the no-argument
# default run, 2 alternating rounds.
source bench/runs/prelude.sh
row() { BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,2 timeout 60 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do echo "r$r new: $(row build/new11/bench_kernels) | old: $(row build/bench_kernels)"; done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 120 build/new11/bench_kernels > $OUT/torch_rows.txt 2>&1; grep -iE "sweep|cudnn|T1024" $OUT/torch_rows.txt | tail -8; el
BT_TEST_PROGRESS=1 timeout 240 build/new11/test_kernels_gpu > $OUT/test_kernels.txt 2>&1; echo "test_kernels_gpu (new): exit $?: $(tail -1 $OUT/test_kernels.txt)"
grep -E "FAIL" $OUT/test_kernels.txt | head -5; el
for r in 1 2; do
  for v in new old; do
    b=./build/train_gpt2_cuda; [ $v = new ] && b=./build/new11/train_gpt2_cuda
    timeout 60 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -czf /tmp/h100s11a.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s11a.tgz $OUT/
