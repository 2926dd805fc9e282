#!/usr/bin/env bash
# H100 call (2026-11-23, seventh session, fifth): the fused attention backward also sums the columns
# of the dq, dk, dv it writes (per warp, 16 rows; then one column-sum pass over those partials), and
# the qkv projection's bias gradient takes them; the layernorm's sums now tested in a graph where the
# residual gradient is the graph's own. Tests (attention, layernorm, test_ops_gpu, GPT-2 parity),
# memcheck on the attention group, the default run against BT_LN_COLSUM=0 (both sums off) and the
# code before (build/old = ab6efee), and an ncu profile of one B=128 micro-step. Outputs in one tar.
source bench/runs/prelude.sh
tar -xJf .carry/old.tar.xz
cuobjdump -sass build/train_gpt2_cuda 2>/dev/null | awk '/Function :/ {f=$3} /HGMMA/ {h[f]++} /WARPGROUP.DEPBAR/ {d[f]++} /STL|LDL/ {l[f]++} END {for (k in h) if (k ~ /att_bwd_wg/) print "SASS", substr(k, 1, 40), "HGMMA", h[k], "DEPBAR", d[k], "local", l[k] + 0}'
for g in attention layernorm; do
  BT_TEST_ONLY=$g timeout 200 build/tests/test_kernels_gpu > $OUT/test_$g.txt 2>&1; echo "tests $g: exit $?: $(tail -1 $OUT/test_$g.txt)"; grep -E "FAIL|colsum" $OUT/test_$g.txt | head -6
done
BT_TEST_VERBOSE=1 timeout 200 build/tests/test_ops_gpu > $OUT/test_ops.txt 2>&1; echo "test_ops_gpu: exit $?: $(tail -1 $OUT/test_ops.txt)"; grep -E "FAIL|residual colsum" $OUT/test_ops.txt | head -10
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin > /dev/null 2>&1; echo "d12 reference: exit $?"
BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin timeout 300 build/tests/test_gpt2_gpu > $OUT/test_gpt2.txt 2>&1; echo "test_gpt2_gpu: exit $?: $(tail -1 $OUT/test_gpt2.txt)"; grep -E "FAIL|parity (tiny|d12) gpu" $OUT/test_gpt2.txt | head -8
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 300 compute-sanitizer --tool memcheck build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1; echo "memcheck attention (quick): $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
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
  python3 bench/fold_profile.py $OUT/ncu_b128.csv > $OUT/profile_b128.txt 2>&1; rm -f $OUT/ncu_b128.csv
  head -30 $OUT/profile_b128.txt | cut -c1-100
fi; el
cd $OUT && tar -cJf /tmp/s7e.tar.xz . && rm -rf $OUT/* && mv /tmp/s7e.tar.xz $OUT/
