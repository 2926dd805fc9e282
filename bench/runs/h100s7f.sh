#!/usr/bin/env bash
# H100 call (2026-11-23, seventh session, last): every GPU test on this session's final binaries
# (gpu_session.sh test: PyTorch fixtures and parity, tests/run_all.sh over build/tests/*_gpu), plus
# compute-sanitizer memcheck (quick) on the tests that exercise the new column-sum plumbing and the
# graph capture (test_ops_gpu, test_graph_gpu, test_gpt2_gpu). Outputs in one tar.
export OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
NOBUILD=1 SAN=0 bash bench/gpu_session.sh test > $OUT/session.txt 2>&1; echo "gpu_session test: exit $?"
sed -n '/=== summary/,$p' $OUT/session.txt | head -30
grep -E "FAIL" $OUT/test_gpu.txt | head -10
for t in test_ops_gpu test_graph_gpu test_gpt2_gpu; do
  BT_TEST_QUICK=1 timeout 240 compute-sanitizer --tool memcheck build/tests/$t > $OUT/san_$t.txt 2>&1
  echo "memcheck $t: exit $? $(grep 'ERROR SUMMARY' $OUT/san_$t.txt | tail -1)"
done
cd $OUT && tar -cJf /tmp/s7f.tar.xz . && rm -rf $OUT/* && mv /tmp/s7f.tar.xz $OUT/
