#!/usr/bin/env bash
# x2 call B of session 11 (2026-11-24): the 2-GPU step's tail and NCCL settings. GPT-2 124M bf16, B 16,
# T 1024 per GPU, 14 steps, medians of steps 4-14 (BT_STEP_TIMES=1). Eager (--cuda-graph off) runs with
# BT_DDP_TRACE=1 print the last step's bucket timeline and the exposed wait; BT_DDP_DEFER=1 (with
# BT_DDP_ROWS=0, which it needs) sends every bucket after the backward: fwd+bwd without any overlap.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source bench/runs/prelude.sh
B=./build/train_gpt2_cuda; A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
one() { echo "-- $1"; shift; timeout 60 "$@" 2>&1 | med; }
one "1 GPU (gpu0)" $B $A -d 16384
one "1 GPU (gpu0) eager" $B --cuda-graph off $A -d 16384
echo "-- 2 GPUs eager, trace"; BT_DDP_TRACE=1 timeout 60 $B --nproc 2 --cuda-graph off $A -d 32768 2>&1 | tee $OUT/trace.txt | med
one "2 GPUs eager BT_DDP_ROWS=0" env BT_DDP_ROWS=0 $B --nproc 2 --cuda-graph off $A -d 32768
one "2 GPUs eager BT_DDP_ROWS=0 BT_DDP_DEFER=1" env BT_DDP_ROWS=0 BT_DDP_DEFER=1 $B --nproc 2 --cuda-graph off $A -d 32768
one "2 GPUs graph BT_DDP_ROWS=0" env BT_DDP_ROWS=0 $B --nproc 2 $A -d 32768
one "2 GPUs graph BT_DDP_ROWS=0 BT_DDP_DEFER=1" env BT_DDP_ROWS=0 BT_DDP_DEFER=1 $B --nproc 2 $A -d 32768
one "2 GPUs default" $B --nproc 2 $A -d 32768
for e in NCCL_PROTO=Simple NCCL_PROTO=LL128 NCCL_MAX_CTAS=12 NCCL_MAX_CTAS=32 NCCL_MIN_CTAS=32 NCCL_NTHREADS=256 NCCL_BUFFSIZE=16777216 BT_DDP_PRIORITY=0; do
  one "2 GPUs $e" env $e $B --nproc 2 $A -d 32768
done
for mb in 10 50; do one "2 GPUs --bucket-mb $mb" $B --nproc 2 --bucket-mb $mb $A -d 32768; done
one "1 GPU (gpu0) again" $B $A -d 16384
one "2 GPUs default again" $B --nproc 2 $A -d 32768
el; cd $OUT && tar -czf /tmp/x2s11b.tgz *.txt && rm -rf $OUT/* && mv /tmp/x2s11b.tgz $OUT/
