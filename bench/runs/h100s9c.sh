#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session): the attention backward's second round (the loader's copies
# with addresses stepped, -lse log2e from the Dvec pre-pass, the edge mask as one compare a score):
# attention tests and memcheck (quick), T 1024 / 4096 causal rows in alternating processes against
# the first round (build/old9/bench_kernels_s9b) and the code before (build/old9/bench_kernels), one
# process with SDPA (cuDNN), ncu source counts of the fused backward, and the default training run
# against the code before (build/old9/train_gpt2_cuda, HEAD e8562e9's build).
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1
echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"; el
row() { BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 timeout 90 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r new: $(row build/bench_kernels) | s9b: $(row build/old9/bench_kernels_s9b) | base: $(row build/old9/bench_kernels)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 BT_BENCH_SWEEP=1 timeout 200 build/bench_kernels > $OUT/torch.txt 2>&1
grep -E "^\| T1024 D64 causal" $OUT/torch.txt | cut -d'|' -f2,3,6,9,10,11,12,13; el
for r in 1 2; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old9/train_gpt2_cuda
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
export BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 BT_BENCH_TORCH=0
timeout 240 ncu --set full --import-source no -k regex:bt__k_att_bwd_wg -s 3 -c 1 -o $OUT/bwd build/bench_kernels > $OUT/ncu_bwd.log 2>&1
ncu -i $OUT/bwd.ncu-rep --page source --csv --print-source sass > $OUT/src_bwd.csv 2>/dev/null
ncu -i $OUT/bwd.ncu-rep --page details > $OUT/det_bwd.txt 2>&1
grep -E "Duration|Issue Slots Busy|No Eligible" $OUT/det_bwd.txt | head -4; el
cd $OUT && tar -cJf /tmp/s9c.tar.xz *.txt *.csv *.log && rm -rf $OUT/* && mv /tmp/s9c.tar.xz $OUT/
