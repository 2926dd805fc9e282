#!/usr/bin/env bash
# one-off x2 call: where the 2-GPU bf16 step loses time (DDP bucket timeline), TP sync vs async medians
# Run from the repository root on the GPU machine, carrying .carry/bins.tar.xz (bench/carry_bins.sh) and
# .carry/data (bench/carry_data.sh): a record of this session's calls (bench/RESULTS.md, 2026-11-23).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
B=./build/train_gpt2_cuda; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
source bench/runs/med.sh
A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
el; echo "== bf16 B16: 1 GPU"; timeout 60 $B $A -d 16384 2>&1 | med
echo "== 2 GPUs ddp (trace)"; BT_DDP_TRACE=1 timeout 80 $B --nproc 2 $A -d 32768 2>&1 | med
echo "== 1 GPU again"; timeout 60 $B $A -d 16384 2>&1 | med
echo "== 2 GPUs ddp NCCL_COMM_BLOCKING=1"; NCCL_COMM_BLOCKING=1 timeout 80 $B --nproc 2 $A -d 32768 2>&1 | med
echo "== 2 GPUs ddp --comm-dtype bf16 (trace)"; BT_DDP_TRACE=1 timeout 80 $B --nproc 2 $A -d 32768 --comm-dtype bf16 2>&1 | med
echo "== 2 GPUs ddp NCCL_MAX_NCHANNELS=8 (trace)"; NCCL_MAX_NCHANNELS=8 BT_DDP_TRACE=1 timeout 80 $B --nproc 2 $A -d 32768 2>&1 | med
echo "== 2 GPUs ddp --bucket-mb 100 (trace)"; BT_DDP_TRACE=1 timeout 80 $B --nproc 2 $A -d 32768 --bucket-mb 100 2>&1 | med
echo "== 2 GPUs ddp NCCL_PROTO=Simple"; NCCL_PROTO=Simple timeout 80 $B --nproc 2 $A -d 32768 2>&1 | med
el; echo "== TP bf16 B8 T1024, 20 steps"
T="-e d12 -b 8 -t 1024 -d 8192 -x 20 -v 0 -g 0 --precision bf16"
for r in 1 2; do for f in "" "--async-tp"; do
  echo "-- tp2 $f (round $r)"; timeout 80 $B --nproc 2 --tp 2 $f $T 2>&1 | med
  echo "-- NCCL_COMM_BLOCKING=1 tp2 $f (round $r)"; NCCL_COMM_BLOCKING=1 timeout 80 $B --nproc 2 --tp 2 $f $T 2>&1 | med
done; done
el
