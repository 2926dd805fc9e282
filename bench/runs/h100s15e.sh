#!/usr/bin/env bash
# H100 call E of session 15 (2026-11-24): the forward's run-time switches re-swept on the kept build
# (2887454: the wait for P V below the softmax's max): turns in items of at least K key tiles
# (BT_ATT_FWD_TURNS=K, default 7) and the stale row max (BT_ATT_FWD_SKIP=1); three alternating
# rounds at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us), then T 1024 beside cuDNN.
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  for k in 0 1 3 5 7 9 12; do echo "r$r K $k: $(row BT_ATT_FWD_TURNS=$k timeout 60 build/bench_kernels)"; done
  for k in 0 7; do echo "r$r K $k SKIP: $(row BT_ATT_FWD_TURNS=$k BT_ATT_FWD_SKIP=1 timeout 60 build/bench_kernels)"; done
done; el
cd $OUT && tar -czf /tmp/h100s15e.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s15e.tgz $OUT/
