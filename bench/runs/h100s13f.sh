#!/usr/bin/env bash
# H100 call F of session 13 (2026-11-24): the kept forward (11aa457's binary, build/base13) with its
# run-time switches re-timed against its default now that loads are by TMA: three warpgroups taking
# turns at the tensor cores (BT_ATT_FWD_TURNS=1), turns + SKIP, SKIP; 3 alternating rounds, B16 H12 D64
# causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r default:    $(row timeout 60 build/base13/bench_kernels)"
  echo "r$r turns:      $(row BT_ATT_FWD_TURNS=1 timeout 60 build/base13/bench_kernels)"
  echo "r$r turns+skip: $(row BT_ATT_FWD_TURNS=1 BT_ATT_FWD_SKIP=1 timeout 60 build/base13/bench_kernels)"
done; el
