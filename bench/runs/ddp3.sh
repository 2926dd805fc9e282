#!/usr/bin/env bash
# one-off x2 call: DDP launch thread + rows exchange of the tied embedding (tests, parity, resume, timings)
# Run from the repository root on the GPU machine, carrying .carry/bins.tar.xz (bench/carry_bins.sh) and
# .carry/data (bench/carry_data.sh): a record of this session's calls (bench/RESULTS.md, 2026-11-23).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
B=./build/train_gpt2_cuda; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
source bench/runs/med.sh
timeout 120 build/tests/test_dist_gpu > /tmp/td.txt 2>&1; echo "test_dist_gpu exit $?: $(tail -1 /tmp/td.txt)"; grep -E "FAIL" /tmp/td.txt | head
[ -x build/tests/test_kernels_gpu ] && BT_TEST_ONLY=embedding timeout 120 build/tests/test_kernels_gpu 2>&1 | grep -E "FAIL|passed" | head -5
el
A="-e d12 -b 16 -t 1024 -x 16 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
for r in 1 2; do
  echo "== round $r: 1 GPU"; timeout 60 $B $A -d 16384 2>&1 | med
  echo "== 2 GPUs ddp (default: thread + rows; trace)"; BT_DDP_TRACE=1 timeout 80 $B --nproc 2 $A -d 32768 2>&1 | med
  echo "== 2 GPUs ddp BT_DDP_ROWS=0"; BT_DDP_ROWS=0 timeout 80 $B --nproc 2 $A -d 32768 2>&1 | med
done
echo "== 2 GPUs zero1"; timeout 80 $B --nproc 2 --dp zero1 $A -d 32768 2>&1 | med
echo "== 2 GPUs zero2"; timeout 80 $B --nproc 2 --dp zero2 $A -d 32768 2>&1 | med
echo "== 2 GPUs ddp --comm-dtype bf16"; timeout 80 $B --nproc 2 $A -d 32768 --comm-dtype bf16 2>&1 | med
F="-e d12 -b 16 -t 1024 -x 8 -v 0 -g 0 --precision fp32"
echo "== fp32 1 GPU"; timeout 80 $B $F -d 16384 2>&1 | med
echo "== fp32 2 GPUs ddp"; timeout 80 $B --nproc 2 $F -d 32768 2>&1 | med
el
timeout 400 python3 tests/dist_parity.py $B /tmp/parity --steps 10 2>&1 | grep -vE "^$" | tail -8
el
NOBUILD=1 SKIP="stall hf" timeout 300 bash bench/ckpt_gpu.sh 2>&1 | tail -16
el
