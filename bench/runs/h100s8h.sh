#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session, last): where a B=128 micro-step goes on the final code (ncu,
# kernels serialised, the third step of -x 3), for the next session's table. Outputs in one tar.
source bench/runs/prelude.sh
timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
  ./build/train_gpt2_cuda -e d12 -b 128 -t 1024 -d 131072 -x 3 -v 0 -g 0 --precision bf16 --quiet 2>/dev/null > $OUT/ncu_b128.csv
echo "ncu B=128: exit $?"
python3 bench/fold_profile.py $OUT/ncu_b128.csv > $OUT/profile_b128.txt 2>&1; rm -f $OUT/ncu_b128.csv
head -34 $OUT/profile_b128.txt | cut -c1-110; el
cd $OUT && tar -cJf /tmp/s8h.tar.xz . && rm -rf $OUT/* && mv /tmp/s8h.tar.xz $OUT/
