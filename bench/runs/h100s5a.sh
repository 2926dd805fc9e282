#!/usr/bin/env bash
# H100 call (2026-11-23, fifth session, first): llm.c (train_gpt2cu built from a fetched copy by
# bench/carry_llmc.sh, with and without cuDNN attention, -r 1 = its default GELU recompute and -r 0)
# next to train_gpt2 at B=16/32/64, bf16, T 1024, one micro-batch a step, every run under the same
# nvidia-smi memory poller (bench/llmc_gpu.sh WITH_OURS=1), then the no-argument default run.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
OUT=$OUT/llmc WITH_OURS=1 BS="16 32 64" VARIANTS="cudnn nocudnn" RECOMPUTE="1 0" STEPS=15 WARM=3 TIMEOUT=90 \
  timeout 420 bash bench/llmc_gpu.sh > $OUT/llmc.txt 2>&1; echo "llmc_gpu: exit $?"
el
source bench/runs/med.sh
timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | med
el
echo "== llm.c vs train_gpt2"; grep -E "^train_gpt2cu|LD_LIBRARY|rror" $OUT/llmc.txt | head -8; sed -n '/^| run |/,$p' $OUT/llmc.txt
