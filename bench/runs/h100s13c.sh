#!/usr/bin/env bash
# H100 call C of session 13 (2026-11-24): the attention forward's O by a TMA store a warp (BT_ATT_FWD_EXP
# bit 4; warps with rows below 0 keep the threads' stores: a negative row coordinate faulted in call B)
# with the rotation (1) and output-before-idle (2) bits beside it; tests, memcheck, per-item clock traces
# of the warpgroup with the most key tiles (BT_ATT_TRACE=1024), 3 alternating rounds against build/base13.
source bench/runs/prelude.sh
for e in 4 7; do
  BT_ATT_FWD_EXP=$e BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_att$e.txt 2>&1
  echo "attention tests EXP=$e: exit $?: $(tail -1 $OUT/test_att$e.txt)"; grep -E "FAIL" $OUT/test_att$e.txt | head -5
done; el
BT_ATT_FWD_EXP=7 BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention EXP=7: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
for e in 0 4; do
  BT_ATT_FWD_EXP=$e BT_ATT_TRACE=1024 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1 timeout 60 build/bench_kernels > $OUT/trace$e.txt 2>&1
  echo "trace EXP=$e:"; grep -E "att_fwd trace" $OUT/trace$e.txt | cut -c1-160
done; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r base13: $(row timeout 60 build/base13/bench_kernels)"
  for e in 0 4 5 6; do echo "r$r exp$e:   $(row BT_ATT_FWD_EXP=$e timeout 60 build/bench_kernels)"; done
done; el
cuobjdump -sass build/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
echo "fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt), UTMASTG $(grep -c UTMASTG $OUT/sass.txt)"
cd $OUT && tar -czf /tmp/h100s13c.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13c.tgz $OUT/
