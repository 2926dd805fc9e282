#!/usr/bin/env bash
# x2 call (2026-11-23, fourth session): the merged main on two H200s. The 2-GPU tests (test_dist_gpu,
# test_parallel_gpu, tests/dist_parity.py) and the single-GPU checks of the layernorm backward that
# adds into the residual gradient (test_kernels_gpu layernorm group, test_ops_gpu's op table, GPT-2
# d12 parity vs PyTorch); then DDP scaling, 1 vs 2 GPUs alternating for 3 rounds, a few NCCL CTA
# caps, and PyTorch DDP eager (and torch.compile with COMPILE=1) on 1 and 2 GPUs in the same call.
# Run from the repository root on the GPU machine with .carry/bins.tar.xz (bench/carry_bins.sh) and
# .carry/data (bench/carry_data.sh) carried.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
B=./build/train_gpt2_cuda; T0=$(date +%s); OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
source bench/runs/med.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
echo "== single-GPU tests"
BT_TEST_ONLY=layernorm timeout 120 build/tests/test_kernels_gpu 2>&1 | grep -E "FAIL|passed" | tail -3
timeout 200 build/tests/test_ops_gpu > $OUT/ops.txt 2>&1; grep -E "FAIL|info:|passed" $OUT/ops.txt | tail -8
timeout 120 python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin 2>&1 | tail -1
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 200 build/tests/test_gpt2_gpu 2>&1 | grep -E "parity|FAIL|passed" | tail -8
el; echo "== 2-GPU tests"
for t in test_dist_gpu test_parallel_gpu; do timeout 200 build/tests/$t > $OUT/$t.txt 2>&1; echo "$t: exit $? $(tail -1 $OUT/$t.txt)"; grep FAIL $OUT/$t.txt | head -5; done
timeout 300 python3 tests/dist_parity.py $B $OUT/parity --steps 10 > $OUT/parity.txt 2>&1; grep -E "PASS|FAIL|bound" $OUT/parity.txt | tail -14
el; echo "== DDP scaling, bf16 B16 T1024 per GPU, 14 steps, 3 rounds"
A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
for r in 1 2 3; do
  echo "-- round $r, 1 GPU"; timeout 60 $B $A -d 16384 2>&1 | med
  echo "-- round $r, 2 GPUs ddp"; timeout 60 $B --nproc 2 $A -d 32768 2>&1 | med
done
for c in 8 16; do echo "-- 2 GPUs ddp, NCCL_MAX_CTAS=$c"; NCCL_MAX_CTAS=$c timeout 60 $B --nproc 2 $A -d 32768 2>&1 | med; done
echo "-- 2 GPUs zero1"; timeout 60 $B --nproc 2 --dp zero1 $A -d 32768 2>&1 | med
el; echo "== PyTorch (bench_gpt2_torch.py, bf16 B16 T1024, 12 steps)"
P="bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3"
echo "-- eager 1 GPU: $(timeout 100 python3 $P 2>&1 | tail -1)"
echo "-- DDP eager 2 GPUs: $(timeout 120 torchrun --nproc_per_node 2 $P 2>&1 | tail -1)"
[ -n "${COMPILE:-}" ] && echo "-- compile 1 GPU: $(timeout 200 python3 $P --compile 2>&1 | tail -1)"
[ -n "${COMPILE:-}" ] && echo "-- DDP compile 2 GPUs: $(timeout 220 torchrun --nproc_per_node 2 $P --compile 2>&1 | tail -1)"
el
