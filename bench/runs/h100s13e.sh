#!/usr/bin/env bash
# H100 call E of session 13 (2026-11-24): the attention forward's O by a TMA store a warp as the only
# path for 16-byte-aligned outputs (p.qoff now a multiple of 16, so no warp's box starts below row 0),
# the Q tile let go once the store has read it (at the next item's start); without call D's rotation
# code (its build spilled in the consumers: 91 us against 87). Tests, memcheck, per-item traces, 3
# alternating rounds against build/base13 (11aa457), cuDNN in the process.
source bench/runs/prelude.sh
for e in 0; do
  BT_ATT_FWD_EXP=$e BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_att$e.txt 2>&1
  echo "attention tests EXP=$e: exit $?: $(tail -1 $OUT/test_att$e.txt)"; grep -E "FAIL" $OUT/test_att$e.txt | head -5
done; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
BT_ATT_TRACE=1024 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1 timeout 60 build/bench_kernels > $OUT/trace.txt 2>&1
grep -E "att_fwd trace" $OUT/trace.txt | cut -c1-160; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r base13: $(row timeout 60 build/base13/bench_kernels)"
  echo "r$r tma:    $(row timeout 60 build/bench_kernels)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
echo "with torch:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt; el
cuobjdump -sass build/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
echo "fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt), UTMASTG $(grep -c UTMASTG $OUT/sass.txt)"
cuobjdump -sass build/base13/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass_base.txt
echo "base13 fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass_base.txt) instr, LDL/STL $(grep -cE 'LDL|STL' $OUT/sass_base.txt)"
cd $OUT && tar -czf /tmp/h100s13e.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13e.tgz $OUT/
