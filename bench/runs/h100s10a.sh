#!/usr/bin/env bash
# H100 call (2026-11-24, tenth session, first): the forward's joined item boundary (BT__K_FWD_XI: an
# item's last P V and the next item's first S = Q K^T in one step): the attention tests with it (the
# default) and without (BT_ATT_FWD_XI=0), memcheck (quick), where the kernel spills (SASS), the
# T 512 / 1024 / 4096 causal rows of XI=1, XI=0 and the build before (build/old10, HEAD 6bf5417) in
# alternating processes, the default run against the build before, and an ncu source profile of
# the new forward at the GPT-2 shape. Outputs in one tar.
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5
BT_ATT_FWD_XI=0 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_attention_xi0.txt 2>&1; echo "attention tests XI=0: exit $?: $(tail -1 $OUT/test_attention_xi0.txt)"
grep -E "FAIL" $OUT/test_attention_xi0.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1
echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"; el
cuobjdump -sass -fun '_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi440EEv10bt__k_attp' build/bench_kernels > $OUT/sass440.txt 2>&1
echo "sass 440: $(wc -l < $OUT/sass440.txt) lines, STL $(grep -c STL $OUT/sass440.txt), LDL $(grep -c LDL $OUT/sass440.txt)"
row() { env $2 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 90 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r xi1: $(row build/bench_kernels BT_ATT_FWD_XI=1) | xi0: $(row build/bench_kernels BT_ATT_FWD_XI=0) | old: $(row build/old10/bench_kernels X=1)"
done; el
for r in 1 2; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old10/train_gpt2_cuda
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
export BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 BT_BENCH_TORCH=0
timeout 150 ncu --set full --import-source no -k regex:bt__k_att_fwd_wg -s 3 -c 1 -o $OUT/fwd build/bench_kernels > $OUT/ncu_fwd.log 2>&1
ncu -i $OUT/fwd.ncu-rep --page source --csv --print-source sass > $OUT/src_fwd.csv 2>/dev/null
ncu -i $OUT/fwd.ncu-rep --page details > $OUT/det_fwd.txt 2>&1
grep -E "Duration|Issue Slots Busy|No Eligible|Executed Ipc A" $OUT/det_fwd.txt | head -4; el
cd $OUT && tar -cJf /tmp/s10a.tar.xz *.txt *.csv *.log && rm -rf $OUT/* && mv /tmp/s10a.tar.xz $OUT/
