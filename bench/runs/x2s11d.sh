#!/usr/bin/env bash
# x2 call D of session 11 (2026-11-24): the copy-engine buckets with the waits as stream memory
# operations (no SM spins), against NCCL; bucket sizes; the reduce kernel's grid (BT_CE_BLOCKS);
# PyTorch DDP eager in the same call; then test_dist_gpu, dist_parity (both modes) and a kill -9.
# GPT-2 124M bf16, B 16, T 1024 per GPU, 14 steps, medians of steps 4-14.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source bench/runs/prelude.sh
B=./build/train_gpt2_cuda; A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
one() { echo "-- $1"; shift; timeout 40 "$@" 2>&1 | tee $OUT/last.txt | med; grep -m1 "data parallel" $OUT/last.txt; grep -m2 -iE "error|trap" $OUT/last.txt; }
one "2 GPUs copy engines (first try)" $B --nproc 2 $A -d 32768
grep -q "copy engines" $OUT/last.txt && grep -q "^step" $OUT/last.txt || { echo "copy engines not working: stop"; tail -20 $OUT/last.txt; exit 0; }
for r in 1 2 3; do
  one "r$r 1 GPU" $B $A -d 16384
  one "r$r 2 GPUs copy engines (25 MB)" $B --nproc 2 $A -d 32768
  one "r$r 2 GPUs NCCL (BT_DDP_CE=0)" env BT_DDP_CE=0 $B --nproc 2 $A -d 32768
done
for mb in 10 50 100; do one "2 GPUs copy engines --bucket-mb $mb" $B --nproc 2 --bucket-mb $mb $A -d 32768; done
for nb in 132 264; do one "2 GPUs copy engines BT_CE_BLOCKS=$nb" env BT_CE_BLOCKS=$nb $B --nproc 2 $A -d 32768; done
echo "-- 2 GPUs copy engines, eager, trace"; BT_DDP_TRACE=1 timeout 40 $B --nproc 2 --cuda-graph off $A -d 32768 2>&1 | med
for z in zero1 zero2; do one "2 GPUs --dp $z (NCCL)" $B --nproc 2 --dp $z $A -d 32768; done
F="-e d12 -b 16 -t 1024 -x 6 -v 0 -g 0 --precision fp32"
echo "-- fp32 1 GPU / 2 GPUs, 6 steps"; timeout 60 $B $F -d 16384 2>&1 | med; timeout 60 $B --nproc 2 $F -d 32768 2>&1 | med
el; unset BT_STEP_TIMES
echo "-- PyTorch eager 1 GPU"; timeout 100 python3 bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3 2>&1 | tail -1
echo "-- PyTorch DDP eager 2 GPUs"; timeout 120 torchrun --nproc_per_node 2 bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3 2>&1 | tail -1
el; echo "== test_dist_gpu"; timeout 200 build/tests/test_dist_gpu > $OUT/test_dist.txt 2>&1; echo "exit $?: $(tail -1 $OUT/test_dist.txt)"; grep -E "FAIL|copy-engines" $OUT/test_dist.txt | head -8
el; echo "== dist_parity (defaults), 10 steps"; timeout 150 python3 tests/dist_parity.py $B $OUT/parity --steps 10 > $OUT/parity.txt 2>&1; echo "exit $?"; grep -E "PASS|FAIL" $OUT/parity.txt | tail -8
el; echo "== dist_parity --graph"; timeout 150 python3 tests/dist_parity.py $B $OUT/pg --graph > $OUT/parity_graph.txt 2>&1; echo "exit $?"; grep -E "PASS|FAIL" $OUT/parity_graph.txt | tail -12
el; echo "== fault: kill -9 one rank (copy engines, graph)"
( $B --nproc 2 -e d12 -b 8 -t 1024 -d 16384 -x 100000 -v 0 -g 0 --nccl-timeout 30 > $OUT/fault.txt 2>&1; echo "exit $?" >> $OUT/fault.txt ) &
sleep 20; victim=$(pgrep -f "train_gpt2_cuda --nproc 2" | sort -n | tail -1)
t0=$(date +%s); kill -9 "$victim" 2>/dev/null; wait
echo "fault: the job ended $(( $(date +%s) - t0 )) s after the kill: $(tail -1 $OUT/fault.txt); $(grep -m1 'data parallel' $OUT/fault.txt); $(grep -m1 -E 'died|killed|failed' $OUT/fault.txt)"
el; rm -rf $OUT/parity $OUT/pg; cd $OUT && tar -czf /tmp/x2s11d.tgz *.txt && rm -rf $OUT/* && mv /tmp/x2s11d.tgz $OUT/
