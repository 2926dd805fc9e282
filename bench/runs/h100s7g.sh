#!/usr/bin/env bash
# H100 call (2026-11-23, seventh session, after review): the fused cross-entropy simplified to a block
# a row (no persistent blocks, no next-row loads; h100s7c.sh measured that form as fast), tests and
# sanitizers on it, its timing against the code before the session (build/old = ab6efee), test_ops_gpu
# and GPT-2 parity, and the default run in alternating processes. Outputs in one tar.
source bench/runs/prelude.sh
tar -xJf .carry/old.tar.xz
BT_TEST_ONLY=cross_entropy timeout 120 build/tests/test_kernels_gpu > $OUT/test_xent.txt 2>&1; echo "tests cross_entropy: exit $?: $(tail -1 $OUT/test_xent.txt)"
for tool in memcheck racecheck synccheck; do
  BT_TEST_ONLY=cross_entropy timeout 200 compute-sanitizer --tool $tool build/tests/test_kernels_gpu > $OUT/$tool.txt 2>&1
  echo "$tool xent: exit $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/$tool.txt | tail -1)"
done; el
timeout 200 build/tests/test_ops_gpu > $OUT/test_ops.txt 2>&1; echo "test_ops_gpu: exit $?: $(tail -1 $OUT/test_ops.txt)"
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin > /dev/null 2>&1
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 300 build/tests/test_gpt2_gpu > $OUT/test_gpt2.txt 2>&1; echo "test_gpt2_gpu: exit $?: $(tail -1 $OUT/test_gpt2.txt)"; grep -E "parity d12 gpu" $OUT/test_gpt2.txt; el
for r in 1 2 3; do
  for v in old new; do
    b=build/bench_kernels; [ $v = old ] && b=build/old/bench_kernels
    BT_BENCH_ONLY=cross_entropy timeout 60 $b > $OUT/xent_$v$r.txt 2>&1
    echo "r$r $v: $(grep -E '^cross_entropy_fused' $OUT/xent_$v$r.txt | sed 's/  */ /g' | cut -d' ' -f9-13)"
  done
done; el
for r in 1 2 3; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old/train_gpt2_cuda
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -cJf /tmp/s7g.tar.xz . && rm -rf $OUT/* && mv /tmp/s7g.tar.xz $OUT/
