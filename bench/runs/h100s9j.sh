#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session): the forward's run-time switches re-timed on the final
# kernels (build of 58c106f, SASS as the final commit): T 512 / 1024 / 4096 causal forward and
# backward, each setting in its own process, three alternating rounds. Outputs in one tar.
source bench/runs/prelude.sh
row() { env "$@" BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 90 build/bench_kernels > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  for v in "X=0" "BT_ATT_FWD_SKIP=1" "BT_ATT_FWD_TURNS=1" "BT_ATT_L2_MB=24" "BT_ATT_L2_MB=8" "BT_ATT_DYN=0" "BT_ATT_FWD_QEND=0"; do
    echo "r$r $v: $(row $v)"
  done
done | tee $OUT/switches.txt; el
cd $OUT && tar -cJf /tmp/s9j.tar.xz switches.txt && rm -rf $OUT/* && mv /tmp/s9j.tar.xz $OUT/
