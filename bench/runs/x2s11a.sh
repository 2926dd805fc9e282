#!/usr/bin/env bash
# x2 call A of session 11 (2026-11-24): where the 2-GPU step's extra ~2 ms goes, then the 2-GPU tests
# at HEAD. GPT-2 124M bf16, B 16, T 1024 per GPU, 14 steps, medians of steps 4-14 (BT_STEP_TIMES=1).
# Variants: 1 GPU on each GPU alone and both at once (no communication: the machine's own share of the
# loss); 2 GPUs at the defaults; BT_DDP_DEFER=1 (every bucket after the backward: its fwd+bwd without
# overlap); BT_BWD_SM_MARGIN=k (the backward's GEMMs planned for k SMs fewer, on 1 and 2 GPUs);
# --comm-dtype bf16; BT_NCCL_CTA_POLICY=1 (NCCL's fewest-blocks policy); zero1; fp32 1 vs 2.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source bench/runs/prelude.sh
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
B=./build/train_gpt2_cuda; A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
one() { echo "-- $1"; shift; timeout 60 "$@" 2>&1 | med; }
NCCL_DEBUG=INFO timeout 60 $B --nproc 2 $A -x 3 -d 32768 > $OUT/nccl_info.txt 2>&1
echo "nccl: $(grep -m1 -o 'NCCL version [0-9.]*' $OUT/nccl_info.txt); $(grep -c 'Channel [0-9]*/[0-9]* :' $OUT/nccl_info.txt) channel lines; $(grep -m1 -oE '[0-9]+ coll channels[^\n]*' $OUT/nccl_info.txt)"
for r in 1 2; do
  one "r$r 1 GPU (gpu0)" $B $A -d 16384
  one "r$r 2 GPUs default" $B --nproc 2 $A -d 32768
done
one "1 GPU (gpu1)" env CUDA_VISIBLE_DEVICES=1 $B $A -d 16384
echo "-- both GPUs, a 1-GPU run on each at once"
( CUDA_VISIBLE_DEVICES=0 timeout 60 $B $A -d 16384 > $OUT/both0.txt 2>&1 ) & ( CUDA_VISIBLE_DEVICES=1 timeout 60 $B $A -d 16384 > $OUT/both1.txt 2>&1 ); wait
med < $OUT/both0.txt; med < $OUT/both1.txt
one "2 GPUs BT_DDP_DEFER=1 (no overlap)" env BT_DDP_DEFER=1 $B --nproc 2 $A -d 32768
for k in 8 16 32; do one "2 GPUs BT_BWD_SM_MARGIN=$k" env BT_BWD_SM_MARGIN=$k $B --nproc 2 $A -d 32768; done
one "1 GPU BT_BWD_SM_MARGIN=16" env BT_BWD_SM_MARGIN=16 $B $A -d 16384
one "2 GPUs --comm-dtype bf16" $B --nproc 2 --comm-dtype bf16 $A -d 32768
one "2 GPUs BT_NCCL_CTA_POLICY=1" env BT_NCCL_CTA_POLICY=1 $B --nproc 2 $A -d 32768
one "2 GPUs --bucket-mb 100" $B --nproc 2 --bucket-mb 100 $A -d 32768
one "2 GPUs --dp zero1" $B --nproc 2 --dp zero1 $A -d 32768
one "r3 1 GPU (gpu0)" $B $A -d 16384
one "r3 2 GPUs default" $B --nproc 2 $A -d 32768
F="-e d12 -b 16 -t 1024 -x 6 -v 0 -g 0 --precision fp32"
echo "-- fp32 (TF32 off) 1 GPU / 2 GPUs, 6 steps"; timeout 90 $B $F -d 16384 2>&1 | med; timeout 90 $B --nproc 2 $F -d 32768 2>&1 | med
el; unset BT_STEP_TIMES
echo "== test_dist_gpu"; timeout 180 build/tests/test_dist_gpu > $OUT/test_dist.txt 2>&1; echo "exit $?: $(tail -1 $OUT/test_dist.txt)"; grep -E "FAIL|fail" $OUT/test_dist.txt | head -5
el; echo "== fault: kill -9 one rank of a default 2-GPU run (graph on)"
( $B --nproc 2 -e d12 -b 8 -t 1024 -d 16384 -x 100000 -v 0 -g 0 --nccl-timeout 30 > $OUT/fault.txt 2>&1; echo "exit $?" >> $OUT/fault.txt ) &
sleep 22; victim=$(pgrep -f "train_gpt2_cuda --nproc 2" | sort -n | tail -1)
t0=$(date +%s); kill -9 "$victim" 2>/dev/null; wait
echo "fault: the job ended $(( $(date +%s) - t0 )) s after the kill: $(tail -1 $OUT/fault.txt); $(grep -m1 'cuda graph' $OUT/fault.txt); $(grep -m1 -E 'died|killed|failed' $OUT/fault.txt)"
el; echo "== dist_parity (defaults: graph on), 10 steps"
timeout 220 python3 tests/dist_parity.py $B $OUT/parity --steps 10 > $OUT/parity.txt 2>&1; echo "exit $?"; grep -E "PASS|FAIL" $OUT/parity.txt | tail -8
el; cd $OUT && tar -czf /tmp/x2s11a.tgz *.txt && rm -rf $OUT/* && mv /tmp/x2s11a.tgz $OUT/
