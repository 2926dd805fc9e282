#!/usr/bin/env bash
# H100 call (2026-11-24, tenth session, last): the attention group of tests on the final code (the
# kernels of 935467a; the test binary with the new non-causal several-items case), each case named.
source bench/runs/prelude.sh
BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention timeout 200 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5; grep -c attn_case $OUT/test_attention.txt; grep "T1000" $OUT/test_attention.txt | tail -2; el
cd $OUT && tar -cJf /tmp/s10f.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s10f.tar.xz $OUT/
