#!/usr/bin/env bash
# H100 call (2026-11-24, tenth session): the joined item boundary (BT__K_FWD_XI) after the fix of
# its hang (h100s10b: the next item was taken before the idle tiles went back): attention group
# with XI (default) and the XI=0 forward group (BT_TEST_ONLY=attention_hopper), SASS spill sites,
# then the T 512 / 1024 / 4096 causal rows of XI=1, XI=0 and the build before (build/old10, HEAD
# 6bf5417) in alternating processes, and the default run against the build before.
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5; el
BT_ATT_FWD_XI=0 BT_TEST_ONLY=attention_hopper timeout 120 build/tests/test_kernels_gpu > $OUT/test_xi0.txt 2>&1; echo "hopper tests XI=0: exit $?: $(tail -1 $OUT/test_xi0.txt)"
grep -E "FAIL" $OUT/test_xi0.txt | head -5; el
cuobjdump -sass -fun '_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi440EEv10bt__k_attp' build/bench_kernels > $OUT/sass440.txt 2>&1
echo "sass 440: $(wc -l < $OUT/sass440.txt) lines, STL $(grep -c STL $OUT/sass440.txt), LDL $(grep -c LDL $OUT/sass440.txt)"
row() { env $2 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 60 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r xi1: $(row build/bench_kernels BT_ATT_FWD_XI=1) | xi0: $(row build/bench_kernels BT_ATT_FWD_XI=0) | old: $(row build/old10/bench_kernels X=1)"
done; el
for r in 1 2; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old10/train_gpt2_cuda
    timeout 60 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -cJf /tmp/s10c.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s10c.tar.xz $OUT/
