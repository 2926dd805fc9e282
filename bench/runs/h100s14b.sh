#!/usr/bin/env bash
# H100 call B of session 14 (2026-11-24): turns at MUFU (the softmax's 2^x loop of each forward
# warpgroup behind named barriers 7-9, round robin like the tensor-core turns; -DBT_EXP_MTURN=1 every
# item: build/mt1, =2 only items with tensor turns: build/mt2): per-step clocks of mt1 (build/abl_mt1)
# at T 1024 / 4096, then three alternating rounds against 44667e3 (build/base) and the forward without
# the step's proxy fence (build/nofence), B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
for T in 1024 4096; do
  sw=$([ $T = 1024 ] && echo 1 || echo 3)
  BT_ATT_TRACE=$T BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=$sw timeout 60 build/abl_mt1/bench_kernels > $OUT/trace$T.txt 2>&1
  echo "trace T$T (exit $?):"; grep -E "att_fwd (trace|steps|step 2[0-4])" $OUT/trace$T.txt | cut -c1-170
done; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  for b in base mt1 mt2 nofence; do echo "r$r $b: $(row timeout 60 build/$b/bench_kernels)"; done
done; el
cd $OUT && tar -czf /tmp/h100s14b.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s14b.tgz $OUT/
