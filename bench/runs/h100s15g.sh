#!/usr/bin/env bash
# H100 call G of session 15 (2026-11-24): the forward's other run-time switches re-swept on 3680c21
# (no turns by default): BT_ATT_FWD_QEND=0, BT_ATT_DYN=0, BT_ATT_L2_MB=0, BT_ATT_L2_ONE_MB=0,
# BT_ATT_CARVEOUT=100 against the defaults; three alternating rounds at B16 H12 D64 causal
# T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  for e in BT_NONE=0 BT_ATT_FWD_QEND=0 BT_ATT_DYN=0 BT_ATT_L2_MB=0 BT_ATT_L2_ONE_MB=0 BT_ATT_CARVEOUT=100; do
    echo "r$r $e: $(row $e timeout 60 build/bench_kernels)"
  done
done; el
