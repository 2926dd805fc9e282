#!/usr/bin/env bash
# x2 call A (2026-11-23, fourth session): the DDP micro-step in a CUDA graph (bench/ddpgraph_gpu.sh:
# its tests, graph vs eager bit for bit, 1 -> 2 GPU scaling rounds, NCCL CTA caps), then the other
# 2-GPU tests on the merged main (test_dist_gpu whole, test_parallel_gpu, tests/dist_parity.py: 2 GPUs
# vs 1 in ddp/zero1/zero2) and PyTorch DDP eager on 1 and 2 GPUs in the same call.
# Run from the repository root with .carry/bins.tar.xz and .carry/data carried.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
T0=$(date +%s); OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
NOBUILD=1 OUT=$OUT/ddpgraph timeout 300 bash bench/ddpgraph_gpu.sh > $OUT/ddpgraph.txt 2>&1; echo "ddpgraph_gpu.sh: exit $?"
el; echo "== 2-GPU tests on the merged main"
timeout 120 build/tests/test_dist_gpu > $OUT/dist.txt 2>&1; echo "test_dist_gpu: exit $? $(tail -1 $OUT/dist.txt)"; grep FAIL $OUT/dist.txt | head -5
timeout 100 build/tests/test_parallel_gpu > $OUT/par.txt 2>&1; echo "test_parallel_gpu: exit $? $(tail -1 $OUT/par.txt)"; grep FAIL $OUT/par.txt | head -5
timeout 150 python3 tests/dist_parity.py ./build/train_gpt2_cuda $OUT/parity --steps 10 > $OUT/parity.txt 2>&1; echo "dist_parity: exit $?"; grep -E "PASS|FAIL|bound" $OUT/parity.txt | tail -12
el; echo "== PyTorch DDP eager (bench_gpt2_torch.py bf16 B16 T1024, 12 steps)"
P="bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3"
echo "-- eager 1 GPU: $(timeout 90 python3 $P 2>&1 | tail -1)"
echo "-- DDP eager 2 GPUs: $(timeout 100 torchrun --nproc_per_node 2 $P 2>&1 | tail -1)"
el; echo "== ddpgraph_gpu.sh output (tail)"; tail -45 $OUT/ddpgraph.txt
