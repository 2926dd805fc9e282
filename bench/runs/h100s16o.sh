#!/usr/bin/env bash
# H100 call O of session 16 (2026-11-24), the final build against base (build/v/base: 36ac268, the
# fixed order alone): three alternating rounds at B16 H12 D64 causal T 512 / 1024 / 2048 / 4096 (fwd,
# bwd us); T 1024 beside cuDNN in one process (three runs); default runs.
source bench/runs/prelude.sh
echo "rows: fwd, bwd at T512, T1024, T2048, T4096 (us)"
for r in 1 2 3; do for v in build/v/base build/bench_kernels; do echo "r$r $v: $(att_row BT_BENCH_SWEEP=0,1,2,3 timeout 60 $v)"; done; done; el
for r in 1 2 3; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
  echo "with torch r$r:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt
done; el
for r in 1 2; do
  timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default$r.txt 2>&1
  echo "default run r$r: $(med < $OUT/default$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default$r.txt | cut -c1-28)"
done; el
