#!/usr/bin/env bash
# H100 call H of session 15 (2026-11-24): where else a scheduling split (bt__k_sched_split) could go in
# the forward's softmax, on 3680c21 (build/bench_kernels: one split before the wait for P V):
# build/v/q1 also one after the row max, q2 also one after half the exponentials, q3 one after the
# max only; three alternating rounds at B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do for b in build/bench_kernels build/v/q1 build/v/q2 build/v/q3; do
  echo "r$r $b: $(row timeout 60 $b)"
done; done; el
