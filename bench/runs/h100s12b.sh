#!/usr/bin/env bash
# H100 call B of session 12 (2026-11-24): the attention forward with (v1, build/v1) the next item's Q
# loaded under the current item's steps (after its K(0), V(0)) instead of after its last V, and (v2,
# build/v2) v1 plus no products for a warpgroup with no row in 0 .. T - 1, against the code of 9ea9c87
# (build/): SASS of the default bf16 D 64 kernel, forward/backward at B16 H12 T512/1024/4096 D64 causal
# in 3 alternating rounds, both with cuDNN's rows in the process, v2's test_kernels_gpu (attention
# first, then whole) and memcheck of the attention group.
source bench/runs/prelude.sh
for b in build build/v1 build/v2; do
  cuobjdump -sass $b/bench_kernels 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
  echo "$b fwd SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, HGMMA $(grep -c HGMMA $OUT/sass.txt), DEPBAR $(grep -c 'WARPGROUP.DEPBAR' $OUT/sass.txt), LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt)"
done
row() { BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 60 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd T512, bwd T512, fwd T1024, bwd T1024, fwd T4096, bwd T4096 (us)"
for r in 1 2 3; do
  echo "r$r base: $(row build/bench_kernels)"; echo "r$r v1:   $(row build/v1/bench_kernels)"; echo "r$r v2:   $(row build/v2/bench_kernels)"
done; el
for b in build/v2 build; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 $b/bench_kernels > $OUT/torch_$(basename $b).txt 2>&1
  echo "$b with torch:"; grep -E "T1024 D64 (bf16 )?causal" $OUT/torch_$(basename $b).txt | grep -v colsums | tail -4
done; el
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/v2/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1; echo "attention tests (v2): exit $?: $(tail -1 $OUT/test_att.txt)"
grep -E "FAIL" $OUT/test_att.txt | head -5
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/v2/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention (v2): exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
timeout 240 build/v2/tests/test_kernels_gpu > $OUT/test_all.txt 2>&1; echo "test_kernels_gpu (v2) whole: exit $?: $(tail -1 $OUT/test_all.txt)"; el
cd $OUT && tar -czf /tmp/h100s12b.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s12b.tgz $OUT/
