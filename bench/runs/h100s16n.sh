#!/usr/bin/env bash
# H100 call N of session 16 (2026-11-24), the final build (build/ = `make` of this tree: the forward's
# fixed item order at short causal T, the work item's decode in 32 bits): attention tests and memcheck
# of them, the whole GPU suite.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_att.txt 2>&1
echo "attention tests: exit $?: $(tail -1 $OUT/test_att.txt)"; grep -E "FAIL" $OUT/test_att.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck attention: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
NOBUILD=1 SAN=0 timeout 330 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1
echo "whole GPU suite: exit $?"; sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
cd $OUT && tar -czf /tmp/h100s16n.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s16n.tgz $OUT/
