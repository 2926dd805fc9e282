#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session): bf16 GPT-2 124M against PyTorch eager and torch.compile at
# B = 64 (T 1024, 12 steps, one round) on the final code. Outputs in one tar.
export OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
for b in 64; do
  mkdir -p $OUT/b$b
  OUT=$OUT/b$b NOBUILD=1 PRECS=bf16 B=$b ROUNDS=1 timeout 270 bash bench/gpu_session.sh bench > $OUT/b$b/session.txt 2>&1
  echo "B=$b: exit $?"; tail -8 $OUT/b$b/session.txt
done
cd $OUT && tar -cJf /tmp/s9g.tar.xz . && rm -rf $OUT/* && mv /tmp/s9g.tar.xz $OUT/
