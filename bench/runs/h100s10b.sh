#!/usr/bin/env bash
# H100 call (2026-11-24, tenth session): where the attention group hangs on the joined-boundary build
# (h100s10a.sh timed out in test_attention_hopper with and without BT_ATT_FWD_XI): verbose checks
# with short timeouts, and the forward rows alone.
source bench/runs/prelude.sh
for xi in 0 1; do
  BT_ATT_FWD_XI=$xi BT_TEST_PROGRESS=1 BT_TEST_ONLY=attention_hopper timeout 45 build/tests/test_kernels_gpu > $OUT/tv$xi.txt 2>&1
  echo "XI=$xi exit $?"; tail -4 $OUT/tv$xi.txt; el
done
for xi in 0 1; do
  BT_ATT_FWD_XI=$xi BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1 timeout 30 build/bench_kernels > $OUT/b$xi.txt 2>&1
  echo "bench XI=$xi exit $?: $(grep -E '^attention sweep' $OUT/b$xi.txt | head -2)"; el
done
cd $OUT && tar -cJf /tmp/s10b.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s10b.tar.xz $OUT/
