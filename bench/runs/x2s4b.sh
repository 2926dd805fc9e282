#!/usr/bin/env bash
# x2 call B (2026-11-23, fourth session): ZeRO composed with tp/cp (bench/zerotp_gpu.sh), the fault
# tests of test_dist_gpu again (the graph replay's watchdog abort now halts the main thread), and a
# few DDP graph variants for the scaling (bf16 on the wire, no rows exchange, bigger buckets).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
T0=$(date +%s); OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
source bench/runs/med.sh
BT_TEST_ONLY=fault timeout 150 build/tests/test_dist_gpu > $OUT/fault.txt 2>&1; echo "test_dist_gpu (fault tests): exit $? $(tail -1 $OUT/fault.txt)"; grep -E "FAIL|^ok" $OUT/fault.txt | head -8
el
NOBUILD=1 OUT=$OUT/zerotp timeout 330 bash bench/zerotp_gpu.sh > $OUT/zerotp.txt 2>&1; echo "zerotp_gpu.sh: exit $?"
el; echo "== DDP graph variants, bf16 B16 T1024 per GPU, 14 steps"
A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
echo "-- 1 GPU"; timeout 60 ./build/train_gpt2_cuda $A -d 16384 2>&1 | med
echo "-- 2 GPUs graph"; timeout 60 ./build/train_gpt2_cuda --nproc 2 --cuda-graph on $A -d 32768 2>&1 | med
echo "-- 2 GPUs graph --comm-dtype bf16"; timeout 60 ./build/train_gpt2_cuda --nproc 2 --cuda-graph on --comm-dtype bf16 $A -d 32768 2>&1 | med
echo "-- 2 GPUs graph BT_DDP_ROWS=0"; BT_DDP_ROWS=0 timeout 60 ./build/train_gpt2_cuda --nproc 2 --cuda-graph on $A -d 32768 2>&1 | med
echo "-- 2 GPUs graph --bucket-mb 100"; timeout 60 ./build/train_gpt2_cuda --nproc 2 --cuda-graph on --bucket-mb 100 $A -d 32768 2>&1 | med
echo "-- 1 GPU again"; timeout 60 ./build/train_gpt2_cuda $A -d 16384 2>&1 | med
el; echo "== zerotp_gpu.sh output (tail)"; tail -40 $OUT/zerotp.txt
