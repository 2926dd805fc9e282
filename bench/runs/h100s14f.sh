#!/usr/bin/env bash
# H100 call F of session 14 (2026-11-24): the kept change (no proxy fence in the forward's step nor
# before its last P V; the output's fence before its global stores; build/ = `make` of this tree):
# attention tests, memcheck of the group, SASS fence count, three alternating rounds against 44667e3
# (build/base) at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us), T 1024 beside cuDNN in one process.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
for b in build/base/bench_kernels build/bench_kernels; do
  cuobjdump -sass $b 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi56E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
  echo "$b fwd (turns variant) SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, MEMBAR $(grep -c MEMBAR $OUT/sass.txt), LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt)"
done
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r base: $(row timeout 60 build/base/bench_kernels)"
  echo "r$r kept: $(row timeout 60 build/bench_kernels)"
done; el
for r in 1 2; do for b in build/base build; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 $b/bench_kernels > $OUT/torch.txt 2>&1
  echo "with torch r$r, $b:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt
done; done; el
cd $OUT && tar -czf /tmp/h100s14f.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s14f.tgz $OUT/
