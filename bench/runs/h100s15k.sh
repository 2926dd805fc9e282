#!/usr/bin/env bash
# H100 call K of session 15 (2026-11-24): the persistent attention's item order, dynamic (BT_ATT_DYN=1,
# the default: items from a counter as SMs free up) against the fixed snake order (0), at B16 H12 D64
# causal T 256 .. 1024 (BT_BENCH_T; fwd, bwd us), two alternating rounds, on 3680c21's kernels.
# Run first in session 16 (2026-11-24).
source bench/runs/prelude.sh
for T in 256 384 512 640 768 896 1024; do for r in 1 2; do
  echo "T $T r$r dyn: $(att_row BT_BENCH_T=$T BT_BENCH_SWEEP=0 timeout 60 build/bench_kernels) fixed: $(att_row BT_BENCH_T=$T BT_BENCH_SWEEP=0 BT_ATT_DYN=0 timeout 60 build/bench_kernels)"
done; done; el
