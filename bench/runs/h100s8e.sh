#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session): every GPU test on the binaries of the final code (commit
# 8a46f27's kernels: the suite was last run whole at 6716e7c, before the cross-entropy's review),
# then the default run three times. Outputs in one tar.
export OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
source bench/runs/med.sh
NOBUILD=1 SAN=0 bash bench/gpu_session.sh test > $OUT/session.txt 2>&1; echo "gpu_session test: exit $?"
sed -n '/=== summary/,$p' $OUT/session.txt | head -30
grep -E "FAIL" $OUT/test_gpu.txt | head -10
for r in 1 2 3; do
  timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default_$r.txt 2>&1
  echo "default r$r: $(med < $OUT/default_$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$r.txt | cut -c1-28) | $(grep -o 'peak memory.*' $OUT/default_$r.txt)"
done
cd $OUT && tar -cJf /tmp/s8e.tar.xz . && rm -rf $OUT/* && mv /tmp/s8e.tar.xz $OUT/
