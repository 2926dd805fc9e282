#!/usr/bin/env bash
# H100 call E of session 12 (2026-11-24): the attention forward's loads by the tensor memory
# accelerator (build/v5: one producer thread issues a 4-d tensor-map box a tile, BT_ATT_FWD_TMA=1, the
# new default) against cp.async (BT_ATT_FWD_TMA=0, the same binary) and the code of 9ea9c87 (build/):
# tests first (the attention group with TMA and with cp.async, memcheck of it), then 3 alternating
# rounds of B16 H12 T512/1024/4096 D64 causal (forward, backward), then cuDNN's rows in the process.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/v5/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1; echo "attention tests (TMA): exit $?: $(tail -1 $OUT/test_att.txt)"
grep -E "FAIL" $OUT/test_att.txt | head -5
BT_ATT_FWD_TMA=0 BT_TEST_ONLY=attention timeout 200 build/v5/tests/test_kernels_gpu > $OUT/test_att0.txt 2>&1; echo "attention tests (cp.async): exit $?: $(tail -1 $OUT/test_att0.txt)"
grep -E "FAIL" $OUT/test_att0.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/v5/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention (TMA): exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3,8 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 D64 causal, T1024 D128 causal (us)"
for r in 1 2 3; do
  echo "r$r base:  $(row timeout 60 build/bench_kernels)"
  echo "r$r tma1:  $(row BT_ATT_FWD_TMA=1 timeout 60 build/v5/bench_kernels)"
  echo "r$r tma0:  $(row BT_ATT_FWD_TMA=0 timeout 60 build/v5/bench_kernels)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/v5/bench_kernels > $OUT/torch_v5.txt 2>&1
echo "v5 with torch:"; grep -E "^\| T1024 D64 causal" $OUT/torch_v5.txt; el
cuobjdump -sass build/v5/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
echo "v5 fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, HGMMA $(grep -c HGMMA $OUT/sass.txt), UTMALDG $(grep -c UTMALDG $OUT/sass.txt), LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt)"
cd $OUT && tar -czf /tmp/h100s12e.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s12e.tgz $OUT/
