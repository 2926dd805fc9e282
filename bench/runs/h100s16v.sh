#!/usr/bin/env bash
# H100 call V of session 16 (2026-11-24), the final build (build/ = `make` of this tree: the forward's
# output staged in an O tile of its own and stored under the next item's first S, per-warp named
# barriers): attention tests and memcheck of them, the whole GPU suite, two alternating rounds against
# 007d4a8 (build/v/final1) at T 512-4096, T 1024 beside cuDNN (two runs), a default run.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
NOBUILD=1 SAN=0 timeout 300 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1
echo "whole GPU suite: exit $?"; sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
echo "rows: fwd, bwd at T512, T1024, T2048, T4096 (us)"
for r in 1 2; do for v in build/v/final1 build/bench_kernels; do echo "r$r $v: $(att_row BT_BENCH_SWEEP=0,1,2,3 timeout 60 $v)"; done; done; el
cudnn_rows 2; el
default_runs 1; el
