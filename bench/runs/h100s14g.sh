#!/usr/bin/env bash
# H100 call G of session 14 (2026-11-24): five alternating rounds of 44667e3 (build/base), call E's
# candidate with BT_ATT_FWD_MTURNS=0 (build/cand: the step's fence gone only) and call F's kept build
# (build/kept: also the last P V's fence gone and the output's fence before its global stores),
# B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3 4 5; do
  echo "r$r base: $(row timeout 60 build/base/bench_kernels)"
  echo "r$r cand: $(row BT_ATT_FWD_MTURNS=0 timeout 60 build/cand/bench_kernels)"
  echo "r$r kept: $(row timeout 60 build/kept/bench_kernels)"
done; el
