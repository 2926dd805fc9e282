#!/usr/bin/env bash
# H100 call C of session 14 (2026-11-24): per-step clocks with two more marks (S issued, P V issued) to
# see whether issuing the step's P V blocks the warpgroup (build/abl2, -DBT_ATT_FWD_ABLATIONS), T 1024 / 4096.
source bench/runs/prelude.sh
for T in 1024 4096; do
  sw=$([ $T = 1024 ] && echo 1 || echo 3)
  BT_ATT_TRACE=$T BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=$sw timeout 60 build/abl2/bench_kernels > $OUT/trace$T.txt 2>&1
  echo "trace T$T (exit $?):"; grep -E "att_fwd (steps|step 2[0-4])" $OUT/trace$T.txt | cut -c1-220
done; el
