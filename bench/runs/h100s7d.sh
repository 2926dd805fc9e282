#!/usr/bin/env bash
# H100 call (2026-11-23, seventh session, fourth): the layernorm backward also sums the columns of
# the gx it writes, and the next linear layer's bias gradient takes those sums (attention and MLP
# projections: no pass of their own over the [rows, 768] gradient). Tests (layernorm kernel group,
# test_ops_gpu's residual case, GPT-2 parity), the layernorm bench rows, the default run against
# BT_LN_COLSUM=0 and the code before (build/old = ab6efee), and an ncu profile of one B=128 micro-step.
source bench/runs/prelude.sh
tar -xJf .carry/old.tar.xz
BT_TEST_ONLY=layernorm timeout 120 build/tests/test_kernels_gpu > $OUT/test_ln.txt 2>&1; echo "tests layernorm: exit $?: $(tail -1 $OUT/test_ln.txt)"
BT_TEST_VERBOSE=1 timeout 200 build/tests/test_ops_gpu > $OUT/test_ops.txt 2>&1; echo "test_ops_gpu: exit $?: $(tail -1 $OUT/test_ops.txt)"; grep "residual colsum" $OUT/test_ops.txt | head -8
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin > /dev/null 2>&1; echo "d12 reference: exit $?"
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 300 build/tests/test_gpt2_gpu > $OUT/test_gpt2.txt 2>&1; echo "test_gpt2_gpu: exit $?: $(tail -1 $OUT/test_gpt2.txt)"; grep -iE "parity" $OUT/test_gpt2.txt | head -8
BT_TEST_ONLY=layernorm timeout 200 compute-sanitizer --tool memcheck build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1; echo "memcheck layernorm: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
BT_BENCH_ONLY=layernorm timeout 60 build/bench_kernels > $OUT/ln.txt 2>&1; grep -E "^layernorm" $OUT/ln.txt | sed 's/  */ /g'; el
for r in 1 2 3; do
  for v in old off new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old/train_gpt2_cuda; e=(); [ $v = off ] && e=(BT_LN_COLSUM=0)
    env "${e[@]}" timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt) | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-40)"
  done
done; el
if command -v ncu > /dev/null; then
  timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
    ./build/train_gpt2_cuda -e d12 -b 128 -t 1024 -d 131072 -x 3 -v 0 -g 0 --precision bf16 --quiet 2>/dev/null > $OUT/ncu_b128.csv
  echo "ncu B=128: exit $?"
  python3 bench/fold_profile.py $OUT/ncu_b128.csv > $OUT/profile_b128.txt 2>&1; xz -T4 $OUT/ncu_b128.csv
  head -24 $OUT/profile_b128.txt
fi; el
