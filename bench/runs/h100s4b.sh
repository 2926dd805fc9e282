#!/usr/bin/env bash
# H100 call (2026-11-23, fourth session, second): train_gpt2 vs PyTorch eager and torch.compile at
# B=32 and 64 bf16 (the B=16 row came from bench/runs/h100s4.sh), then the kernels vs PyTorch table
# (build/bench_kernels, bench/bench_kernels_torch.py, bench/kernel_ratio.py).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
timeout 200 build/bench_kernels > $OUT/ours.txt 2>&1; echo "bench_kernels: exit $?"
timeout 200 python3 bench/bench_kernels_torch.py > $OUT/torch_k.txt 2>&1; echo "bench_kernels_torch: exit $?"
python3 bench/kernel_ratio.py $OUT/ours.txt $OUT/torch_k.txt > $OUT/ratio.md 2>&1; echo "kernel_ratio: exit $?"
el
for b in 32 64; do
  mkdir -p $OUT/b$b
  OUT=$OUT/b$b B=$b PRECS=bf16 STEPS=12 NOBUILD=1 timeout 200 bash bench/gpu_session.sh bench > $OUT/b$b.txt 2>&1
  echo "== B=$b"; tail -3 $OUT/b$b.txt
  el
done
echo "== kernels vs PyTorch"; cat $OUT/ratio.md
