#!/usr/bin/env bash
# H100 call S of session 16 (2026-11-24): bf16 GPT-2 124M against PyTorch eager and torch.compile at
# B = 64 (T 1024, 12 steps, one round each) on 007d4a8's build (the last end-to-end comparison
# was session 9's). Outputs in one tar.
export OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
for b in 64; do
  mkdir -p $OUT/b$b
  OUT=$OUT/b$b NOBUILD=1 PRECS=bf16 B=$b ROUNDS=1 timeout 275 bash bench/gpu_session.sh bench > $OUT/b$b/session.txt 2>&1
  echo "B=$b: exit $?"; tail -8 $OUT/b$b/session.txt
done
cd $OUT && tar -cJf /tmp/s16s.tar.xz . && rm -rf $OUT/* && mv /tmp/s16s.tar.xz $OUT/
