#!/usr/bin/env bash
# H100 call (2026-11-24, eighth session, after review): bt_k_binary's scalar-kernel selection written
# plainly (same cases): binary group and memcheck on it, test_ops_gpu. Outputs in one tar.
source bench/runs/prelude.sh
BT_TEST_ONLY=binary timeout 200 build/tests/test_kernels_gpu > $OUT/test_binary.txt 2>&1; echo "tests binary: exit $?: $(tail -1 $OUT/test_binary.txt)"
grep -E "^binary |FAIL" $OUT/test_binary.txt | head -5
BT_TEST_ONLY=binary BT_TEST_QUICK=1 timeout 300 compute-sanitizer --tool memcheck build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1
echo "memcheck binary: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"
timeout 200 build/tests/test_ops_gpu > $OUT/test_ops.txt 2>&1; echo "test_ops_gpu: exit $?: $(tail -1 $OUT/test_ops.txt)"; el
cd $OUT && tar -cJf /tmp/s8k.tar.xz . && rm -rf $OUT/* && mv /tmp/s8k.tar.xz $OUT/
