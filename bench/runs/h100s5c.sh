#!/usr/bin/env bash
# H100 call (2026-11-23, fifth session, last): main after merging attnf3 (three consumer warpgroups,
# no turns, the D 64 forward default): the attention tests under the new default, memcheck (quick),
# GPT-2 parity, the default run, the T 1024 / 4096 forward vs cuDNN in the same process.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
source bench/runs/med.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
BT_TEST_ONLY=attention timeout 120 build/tests/test_kernels_gpu 2>&1 | tail -2
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1; echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin > /dev/null 2>&1
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 150 build/tests/test_gpt2_gpu 2>&1 | grep -E "parity|passed"
timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | med | sed "s/^/default: /"
for r in 1 2; do BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=$((r == 1)) BT_BENCH_SWEEP=1,3 timeout 90 build/bench_kernels 2>&1 | grep -E "^attention sweep  |^\| T(1024|4096) D64 causal" | sed "s/^/p$r: /"; done
