#!/usr/bin/env bash
# (The split and its variables BT_MATMUL_SPLIT / BT_MATMUL_LOG were removed after these calls: no gain.)
# H100 call (2026-11-23, eighth session): the weight gradients' row split at other micro-batches and
# in tf32: what autotuning picks (BT_MATMUL_LOG=1) and new against BT_MATMUL_SPLIT=1 (never split),
# alternating processes, B = 16 and 64 (bf16) and B = 16 tf32. Outputs in one tar.
source bench/runs/prelude.sh
for cfg in "-b 16" "-b 64" "-b 16 --precision tf32"; do
  BT_MATMUL_LOG=1 timeout 120 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 $cfg > $OUT/log.txt 2>&1
  echo "[$cfg] $(grep -E '^bt_k_matmul' $OUT/log.txt | sed 's/bt_k_matmul: //' | tr '\n' ';')"
done; el
for r in 1 2; do
  for cfg in "-b 16" "-b 64" "-b 16 --precision tf32"; do
    for v in new nosplit; do
      f=$OUT/$(echo "$cfg" | tr -d ' -')_$v$r.txt
      if [ $v = nosplit ]; then BT_MATMUL_SPLIT=1 timeout 120 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 $cfg > $f 2>&1
      else timeout 120 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 $cfg > $f 2>&1; fi
      echo "[$cfg] r$r $v: $(med < $f | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $f | cut -c1-28)"
    done
  done
done; el
cd $OUT && tar -cJf /tmp/s8d.tar.xz . && rm -rf $OUT/* && mv /tmp/s8d.tar.xz $OUT/
