#!/usr/bin/env bash
# H100 call B of session 13 (2026-11-24): three changes to the attention forward's item loop, each behind
# bit of BT_ATT_FWD_EXP in one build (build/): 1 the warpgroups' 64-row blocks rotate from item to item
# (the block with the most key tiles, the last, is each warpgroup's in turn: their waits through the K/V
# ring even out), 2 a warpgroup with fewer key tiles writes its output before its idle steps, 4 O leaves
# by a TMA store a warp (the Q tile's staged rows; qempty once read, at the next item's start); against
# build/base13 (11aa457). Tests of the attention group with the bits on, memcheck, 3 alternating rounds
# of B16 H12 D64 causal T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
for e in 7 1 4; do
  BT_ATT_FWD_EXP=$e BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_att$e.txt 2>&1
  echo "attention tests EXP=$e: exit $?: $(tail -1 $OUT/test_att$e.txt)"; grep -E "FAIL" $OUT/test_att$e.txt | head -5
done; el
BT_ATT_FWD_EXP=7 BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention EXP=7: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r base13: $(row timeout 60 build/base13/bench_kernels)"
  for e in 0 1 2 3 4 5 7; do echo "r$r exp$e:   $(row BT_ATT_FWD_EXP=$e timeout 60 build/bench_kernels)"; done
done; el
cuobjdump -sass build/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
echo "fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt), UTMASTG $(grep -c UTMASTG $OUT/sass.txt)"
cd $OUT && tar -czf /tmp/h100s13b.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13b.tgz $OUT/
