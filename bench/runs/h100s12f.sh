#!/usr/bin/env bash
# H100 call F of session 12 (2026-11-24): the attention forward's loads by the tensor memory
# accelerator (build/v6: one producer thread issues a 4-d tensor-map box a tile; the maps a __grid_constant__
# parameter of the forward kernel alone, cp.async gone from it) against the code of 9ea9c87 (build/):
# then 3 alternating rounds of B16 H12 T512/1024/4096 D64 causal (forward, backward), cuDNN's rows in
# the process, the tests (the attention group, memcheck of it, the whole binary), the default run.
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3,8 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 D64 causal, T1024 D128 causal (us)"
for r in 1 2 3; do
  echo "r$r base: $(row timeout 60 build/bench_kernels)"
  echo "r$r v6:   $(row timeout 60 build/v6/bench_kernels)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/v6/bench_kernels > $OUT/torch_v6.txt 2>&1
echo "v6 with torch:"; grep -E "^\| T1024 D64 causal" $OUT/torch_v6.txt; el
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/v6/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1; echo "attention tests (v6): exit $?: $(tail -1 $OUT/test_att.txt)"
grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/v6/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention (v6): exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
timeout 200 build/v6/tests/test_kernels_gpu > $OUT/test_all.txt 2>&1; echo "test_kernels_gpu (v6) whole: exit $?: $(tail -1 $OUT/test_all.txt)"; el
for r in 1 2; do
  for v in v6 base; do
    b=./build/train_gpt2_cuda; [ $v = v6 ] && b=./build/v6/train_gpt2_cuda
    timeout 60 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-28)"
  done
done; el
cuobjdump -sass build/v6/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
echo "v6 fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, HGMMA $(grep -c HGMMA $OUT/sass.txt), UTMALDG $(grep -c UTMALDG $OUT/sass.txt), LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt)"
cd $OUT && tar -czf /tmp/h100s12f.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s12f.tgz $OUT/
