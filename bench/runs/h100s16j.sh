#!/usr/bin/env bash
# H100 call J of session 16 (2026-11-24): which part of the forward's output costs, finer (bench-only
# builds of 36ac268's kernels with timing hacks, results wrong on purpose, not kept): hlse (no lse
# store), hbar (no warpgroup barrier before the staging), hstm (no stmatrix and no ld.shared: zeros
# stored), hall (all three), noout (no output at all, call A); two alternating rounds.
source bench/runs/prelude.sh
for r in 1 2; do for v in base hlse hbar hstm hall noout; do echo "r$r $v: $(att_row timeout 60 build/v/$v)"; done; done; el
