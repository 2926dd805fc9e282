#!/usr/bin/env bash
# H100 call A of session 14 (2026-11-24): per-step clocks of all three forward warpgroups in CTA 0
# (build/abl: -DBT_ATT_FWD_ABLATIONS, BT_ATT_TRACE=T: phase means and a window of steps 20-27) at
# T 1024 and 4096, and the forward without the proxy fence in each step (build/nofence, -DBT_EXP_NOFENCE:
# K and V land by TMA and are read by wgmma, both the async proxy) against 44667e3 (build/base),
# three alternating rounds, B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us).
source bench/runs/prelude.sh
for T in 1024 4096; do
  sw=$([ $T = 1024 ] && echo 1 || echo 3)
  BT_ATT_TRACE=$T BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=$sw timeout 60 build/abl/bench_kernels > $OUT/trace$T.txt 2>&1
  echo "trace T$T:"; grep -E "att_fwd (trace|steps|step)" $OUT/trace$T.txt | cut -c1-170
done; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r base:    $(row timeout 60 build/base/bench_kernels)"
  echo "r$r nofence: $(row timeout 60 build/nofence/bench_kernels)"
done; el
cd $OUT && tar -czf /tmp/h100s14a.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s14a.tgz $OUT/
