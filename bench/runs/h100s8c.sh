#!/usr/bin/env bash
# (The split and its variables BT_MATMUL_SPLIT / BT_MATMUL_LOG were removed after these calls: no gain.)
# H100 call (2026-11-23, eighth session): weight gradients with their rows in parts (bt_kernels.cuh,
# chosen by autotuning): the matmul tests (incl. test_matmul_split) and memcheck on them,
# test_ops_gpu, GPT-2 parity, which shapes split in the default run (BT_MATMUL_LOG=1), and the
# default run against the code before (build/old = 8a46f27) and with BT_MATMUL_SPLIT=1 (never split),
# alternating processes. Outputs in one tar.
source bench/runs/prelude.sh
tar -xJf .carry/old.tar.xz
BT_TEST_ONLY=matmul timeout 300 build/tests/test_kernels_gpu > $OUT/test_matmul.txt 2>&1; echo "tests matmul: exit $?: $(tail -1 $OUT/test_matmul.txt)"
grep -E "^(matmul) |FAIL|checks, " $OUT/test_matmul.txt | head; el
BT_TEST_ONLY=matmul_split BT_TEST_QUICK=1 timeout 300 compute-sanitizer --tool memcheck build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck matmul_split: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
timeout 200 build/tests/test_ops_gpu > $OUT/test_ops.txt 2>&1; echo "test_ops_gpu: exit $?: $(tail -1 $OUT/test_ops.txt)"
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin > /dev/null 2>&1
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 300 build/tests/test_gpt2_gpu > $OUT/test_gpt2.txt 2>&1; echo "test_gpt2_gpu: exit $?: $(tail -1 $OUT/test_gpt2.txt)"; grep -E "parity d12 gpu" $OUT/test_gpt2.txt; el
BT_MATMUL_LOG=1 timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default_log.txt 2>&1
grep -E "^bt_k_matmul" $OUT/default_log.txt; echo "logged run: $(med < $OUT/default_log.txt | sed 's/, fwd+bwd.*//')"; el
for r in 1 2 3; do
  for v in old new nosplit; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old/train_gpt2_cuda
    if [ $v = nosplit ]; then BT_MATMUL_SPLIT=1 timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    else timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1; fi
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28) | $(grep -o 'peak memory.*' $OUT/default_$v$r.txt)"
  done
done; el
cd $OUT && tar -cJf /tmp/s8c.tar.xz . && rm -rf $OUT/* && mv /tmp/s8c.tar.xz $OUT/
