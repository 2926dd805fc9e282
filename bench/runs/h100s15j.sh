#!/usr/bin/env bash
# H100 call J of session 15 (2026-11-24): the forward beside cuDNN in one process, five runs of the
# T 1024 row (3680c21's build, the code of the session's last commit), for a steadier ratio.
source bench/runs/prelude.sh
for r in 1 2 3 4 5; do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch$r.txt 2>&1
  echo "with torch r$r: $(grep -E '^\| T1024 D64 causal' $OUT/torch$r.txt)"
done; el
