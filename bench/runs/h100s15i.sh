#!/usr/bin/env bash
# H100 call I of session 15 (2026-11-24): the forward's K / V ring depth at D 64 (3 stages) against
# builds with 2, 4 and 5 (build/v/stN: -DBT_ATT_FWD_ST64=N, a temporary macro), on 3680c21; three
# alternating rounds at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do for b in build/bench_kernels build/v/st2 build/v/st4 build/v/st5; do
  echo "r$r $b: $(row timeout 60 $b)"
done; done; el
