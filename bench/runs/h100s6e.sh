#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session): what this session's attention changes move end to end at
# B=16 (where the forward's heads were one L2 section): train_gpt2 bf16 B=16 T=1024, new defaults
# against BT_ATT_L2_ONE_MB=48 BT_ATT_FWD_QEND=0 (the code before), two alternating rounds.
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
source bench/runs/med.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date -u
for r in 1 2; do
  for v in new old; do
    e=(); [ $v = old ] && e=(BT_ATT_L2_ONE_MB=48 BT_ATT_FWD_QEND=0)
    env "${e[@]}" timeout 60 ./build/train_gpt2_cuda -e d12 -b 16 -t 1024 -d 16384 -x 16 -v 0 -g 0 --precision bf16 > $OUT/$v$r.txt 2>&1
    echo "r$r $v: $(med < $OUT/$v$r.txt) | $(grep -E '^step +16/' $OUT/$v$r.txt | cut -c1-60)"
  done
done
