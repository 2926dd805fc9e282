#!/usr/bin/env bash
# H100 call B of session 16 (2026-11-24): which part of the forward's output costs (bench-only builds,
# results wrong on purpose, not kept): base, noout (no output at all), nofence (no proxy fence after
# it), nost (everything but the global stores), nostf (neither); fwd / bwd us at T 512 / 1024 / 4096
# causal, three alternating rounds.
source bench/runs/prelude.sh
for r in 1 2 3; do for v in base noout nofence nost nostf; do echo "r$r $v: $(att_row timeout 60 build/v/$v)"; done; done; el
