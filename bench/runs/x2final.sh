#!/usr/bin/env bash
# final x2 call of the session: tp/cp composition (checkpoints), TP stages with blocking comms, a TP fault,
# Run from the repository root on the GPU machine, carrying .carry/bins.tar.xz (bench/carry_bins.sh) and
# .carry/data (bench/carry_data.sh): a record of this session's calls (bench/RESULTS.md, 2026-11-23).
# the DDP bucket sweep and PyTorch DDP eager in the same call
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
B=./build/train_gpt2_cuda; T0=$(date +%s); OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
source bench/runs/med.sh

timeout 120 build/tests/test_parallel_gpu 2>&1 | grep -E "FAIL|MLP block|passed"
el; echo "== tpcomp"
NOBUILD=1 PSTEPS=6 CSTEPS=6 SKIP_SPEED=1 timeout 330 bash bench/tpcomp_gpu.sh 2>&1 | grep -E "PASS|FAIL|tpcomp_gpu:" | tail -24
el; echo "== TP stages, bf16 B8 T1024, 14 steps"
T="-e d12 -b 8 -t 1024 -d 8192 -x 14 -v 0 -g 0 --precision bf16"
{ for f in "" "--async-tp" "--sp" "--sp --async-tp"; do
    echo "== tp2 ${f:-sync}"; timeout 60 $B --nproc 2 --tp 2 $f $T 2>&1 | grep "^step"
  done
  for f in "" "--async-tp"; do
    echo "== tp2 ${f:-sync}, non-blocking comms"; BT_NCCL_BLOCKING=0 timeout 60 $B --nproc 2 --tp 2 $f $T 2>&1 | grep "^step"
  done; } > $OUT/tp_stages.txt
python3 bench/tp_stage_plot.py $OUT/tp_stages.png < $OUT/tp_stages.txt
el; echo "== fault: kill -9 one rank of a --tp 2 run (blocking comms)"
( $B --nproc 2 --tp 2 -e d12 -b 8 -t 1024 -d 8192 -x 100000 -v 0 -g 0 --nccl-timeout 30 > $OUT/fault_tp.txt 2>&1; echo "exit $?" >> $OUT/fault_tp.txt ) &
sleep 22; victim=$(pgrep -f "train_gpt2_cuda --nproc 2 --tp 2" | sort -n | tail -1)
t0=$(date +%s); kill -9 "$victim" 2>/dev/null; wait
echo "fault tp: the job ended $(( $(date +%s) - t0 )) s after the kill: $(tail -1 $OUT/fault_tp.txt); $(grep -m1 -E 'died|killed|failed' $OUT/fault_tp.txt)"
el; echo "== DDP bf16 B16 T1024: bucket sweep (default mode) and PyTorch DDP eager, 12 steps"
A="-e d12 -b 16 -t 1024 -x 12 -v 0 -g 0 --precision bf16"
echo "-- 1 GPU"; timeout 60 $B $A -d 16384 2>&1 | med
for mb in 10 25 50; do echo "-- 2 GPUs ddp --bucket-mb $mb"; timeout 60 $B --nproc 2 $A -d 32768 --bucket-mb $mb 2>&1 | med; done
echo "-- PyTorch eager 1 GPU"; timeout 90 python3 bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3 2>&1 | tail -1
echo "-- PyTorch DDP eager 2 GPUs"; timeout 100 torchrun --nproc_per_node 2 bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3 2>&1 | tail -1
el
