#!/usr/bin/env bash
# H100 call A of session 16 (2026-11-24): what the forward's item ends cost at most. Bench-only builds
# of bench_kernels (build/v/*; the hacks make results wrong on purpose and were not kept): base (the
# forward's new item order: fixed where every causal item has <= 4 key tiles), noout (no output
# stored), noqw (no wait for Q after the first two items), both; fwd / bwd us at T 512 / 1024 / 4096
# causal, three alternating rounds. Then the counter against the fixed order without the mask (T 512,
# 1024, 4096; sweep shapes 4, 5, 7).
source bench/runs/prelude.sh
for r in 1 2 3; do for v in base noout noqw both; do echo "r$r $v: $(att_row timeout 60 build/v/$v)"; done; done
for r in 1 2; do
  echo "noncausal r$r dyn: $(att_row BT_BENCH_SWEEP=4,5,7 timeout 60 build/v/base) fixed: $(att_row BT_BENCH_SWEEP=4,5,7 BT_ATT_DYN=0 timeout 60 build/v/base)"
done; el
