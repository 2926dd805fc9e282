#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session): what the bias gradients' column sums cost the fused
# attention backward (bt_k_attention_backward_colsum against bt_k_attention_backward_strided) at the
# GPT-2 shape (B 16, H 12, T 1024, D 64, causal), three processes. Outputs in one tar.
source bench/runs/prelude.sh
for r in 1 2 3; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 120 build/bench_kernels > $OUT/att_$r.txt 2>&1
  grep -E "^attention sweep" $OUT/att_$r.txt | cut -c1-110
done; el
cd $OUT && tar -cJf /tmp/s8i.tar.xz . && rm -rf $OUT/* && mv /tmp/s8i.tar.xz $OUT/
