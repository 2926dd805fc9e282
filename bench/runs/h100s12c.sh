#!/usr/bin/env bash
# H100 call C of session 12 (2026-11-24): where the producer loads the next item's Q (BT_ATT_FWD_QAT:
# -1 after the current item's last key tile, as before; k after tile min(k, nt - 1)) and whether a
# warpgroup with no row in 0 .. T - 1 multiplies nothing (BT_ATT_FWD_SKIPDEAD=1) or one tile of zero
# rows (0, as before), in build/v3, against the code of 9ea9c87 (build/); 3 alternating rounds of
# B16 H12 T512/1024/4096 D64 causal, forward and backward.
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd T512, bwd T512, fwd T1024, bwd T1024, fwd T4096, bwd T4096 (us)"
for r in 1 2 3; do
  echo "r$r base:            $(row timeout 60 build/bench_kernels)"
  echo "r$r qat-1 skipdead0: $(row BT_ATT_FWD_QAT=-1 BT_ATT_FWD_SKIPDEAD=0 timeout 60 build/v3/bench_kernels)"
  for q in -1 0 1 2 3; do echo "r$r qat$q skipdead1:  $(row BT_ATT_FWD_QAT=$q BT_ATT_FWD_SKIPDEAD=1 timeout 60 build/v3/bench_kernels)"; done
done; el
