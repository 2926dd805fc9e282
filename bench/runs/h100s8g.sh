#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session, last): a tensor times a one-element tensor (the classifier's
# dx times the upstream gradient, 1 launch of 401 us a B=128 micro-step on the general strided
# kernel) on a 16-byte-vector kernel: binary tests + memcheck, the bench row against the strided
# kernel, test_ops_gpu, GPT-2 parity, and the default run against the code before (build/old).
source bench/runs/prelude.sh
tar -xJf .carry/old.tar.xz
BT_TEST_ONLY=binary timeout 200 build/tests/test_kernels_gpu > $OUT/test_binary.txt 2>&1; echo "tests binary: exit $?: $(tail -1 $OUT/test_binary.txt)"
grep -E "^binary |FAIL" $OUT/test_binary.txt | head -5
BT_TEST_ONLY=binary BT_TEST_QUICK=1 timeout 300 compute-sanitizer --tool memcheck build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck binary: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
for r in 1 2; do BT_BENCH_ONLY=scalar_mul timeout 60 build/bench_kernels 2>&1 | grep -E "^binary mul"; done; el
timeout 200 build/tests/test_ops_gpu > $OUT/test_ops.txt 2>&1; echo "test_ops_gpu: exit $?: $(tail -1 $OUT/test_ops.txt)"
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin > /dev/null 2>&1
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 300 build/tests/test_gpt2_gpu > $OUT/test_gpt2.txt 2>&1; echo "test_gpt2_gpu: exit $?: $(tail -1 $OUT/test_gpt2.txt)"; grep -E "parity d12 gpu" $OUT/test_gpt2.txt; el
for r in 1 2; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old/train_gpt2_cuda
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -cJf /tmp/s8g.tar.xz . && rm -rf $OUT/* && mv /tmp/s8g.tar.xz $OUT/
