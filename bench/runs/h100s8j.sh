#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session): which column sums cost the fused attention backward:
# timing-only builds of bench_kernels without dq's sums (-DBT_TIMING_NO_DQ_CS) or without dk/dv's
# (-DBT_TIMING_NO_KV_CS; both ifdefs existed only for these builds, never committed) against the normal
# build, GPT-2 shape, alternating processes. Outputs in one tar.
source bench/runs/prelude.sh
for r in 1 2 3; do
  for v in normal nodq nokv; do
    b=build/bench_kernels; [ $v != normal ] && b=build/abl/bench_$v
    BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 120 $b > $OUT/att_$v$r.txt 2>&1
    echo "r$r $v: $(grep -E '^attention sweep backward' $OUT/att_$v$r.txt | sed 's/  */ /g' | cut -d' ' -f1-12 | tr '\n' ';')"
  done
done; el
cd $OUT && tar -cJf /tmp/s8j.tar.xz . && rm -rf $OUT/* && mv /tmp/s8j.tar.xz $OUT/
