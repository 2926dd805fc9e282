#!/usr/bin/env bash
# H100 call F of session 15 (2026-11-24): the final build (no turns at the tensor cores by default,
# BT_ATT_FWD_TURNS=0; build/ = `make` of this tree): attention tests + memcheck of the group, the whole
# GPU suite, three alternating rounds against the same binary with BT_ATT_FWD_TURNS=7 (the default
# before) at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us), T 1024 beside cuDNN, default runs.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
NOBUILD=1 SAN=0 timeout 420 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1
echo "whole GPU suite: exit $?"; sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r K 7: $(row BT_ATT_FWD_TURNS=7 timeout 60 build/bench_kernels)"
  echo "r$r default: $(row timeout 60 build/bench_kernels)"
done; el
for r in 1 2 3; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
  echo "with torch r$r:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt
done; el
for r in 1 2; do
  timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default$r.txt 2>&1
  echo "default run r$r: $(med < $OUT/default$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default$r.txt | cut -c1-28)"
done; el
cd $OUT && tar -czf /tmp/h100s15f.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s15f.tgz $OUT/
