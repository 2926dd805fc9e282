#!/usr/bin/env bash
# final H100 call of the session: every GPU test on the merged main, memcheck of the kernel tests,
# Run from the repository root on the GPU machine, carrying .carry/bins.tar.xz (bench/carry_bins.sh) and
# .carry/data (bench/carry_data.sh): a record of this session's calls (bench/RESULTS.md, 2026-11-23).
# the no-argument default run, the attention bench
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
NOBUILD=1 SAN=0 timeout 330 bash bench/gpu_session.sh test > $OUT/session.txt 2>&1; echo "gpu_session test: exit $?"
sed -n '/=== summary/,$p' $OUT/session.txt | head -30
el
BT_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/san_kernels.txt 2>&1
echo "memcheck test_kernels_gpu (quick): exit $? $(grep 'ERROR SUMMARY' $OUT/san_kernels.txt) $(tail -1 $OUT/san_kernels.txt)"
el
echo "== default run: ./build/train_gpt2_cuda -x 8 -v 0 -g 0"
timeout 150 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | grep -E "auto micro|cuda graph|recompute|^step|error" | tail -7
el
BT_BENCH_ONLY=attention BT_BENCH_TORCH=1 timeout 100 build/bench_kernels 2>&1 | grep -E "B16 H12 T1024 D64 bf16|sdpa" | head -8
el
