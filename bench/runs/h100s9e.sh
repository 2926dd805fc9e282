#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session): every GPU test on the binaries of the final code (the
# attention changes of this session), memcheck (quick) on the GPT-2 tests, the attention group and
# sweep against PyTorch's SDPA in one process, and the default run three times. Outputs in one tar.
export OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
source bench/runs/med.sh
NOBUILD=1 SAN=0 bash bench/gpu_session.sh test > $OUT/session.txt 2>&1; echo "gpu_session test: exit $?"
sed -n '/=== summary/,$p' $OUT/session.txt | head -30
grep -E "FAIL" $OUT/test_gpu.txt | head -10
BT_TEST_QUICK=1 BT_PARITY_D12= timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_gpt2_gpu > $OUT/mc_gpt2.txt 2>&1
echo "memcheck test_gpt2_gpu: exit $? $(grep 'ERROR SUMMARY' $OUT/mc_gpt2.txt)"
BT_BENCH_ONLY=attention BT_BENCH_TORCH=1 timeout 300 build/bench_kernels > $OUT/attention.txt 2>&1; echo "attention bench: exit $?"
grep -E "^\| (T|attention|GPT)" $OUT/attention.txt | cut -c1-230 | head -20
for r in 1 2 3; do
  timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default_$r.txt 2>&1
  echo "default r$r: $(med < $OUT/default_$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$r.txt | cut -c1-28) | $(grep -o 'peak memory.*' $OUT/default_$r.txt)"
done
cd $OUT && tar -cJf /tmp/s9e.tar.xz . && rm -rf $OUT/* && mv /tmp/s9e.tar.xz $OUT/
