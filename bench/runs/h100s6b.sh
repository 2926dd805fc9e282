#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session): the attention switches re-timed now that each row starts
# from an idle GPU (bench_kernels' settle(): earlier variant tables mixed power-capped rows in).
# Two alternating rounds, one process per setting, causal T 1024 and T 4096 (B 16, H 12, D 64).
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
tar -xJf .carry/bins.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date -u
V="def BT_ATT_FWD_SKIP=1 BT_ATT_FWD_TURNS=1 BT_ATT_FWD_WG3=0 BT_ATT_FWD_WG3=0,BT_ATT_FWD_SKIP=1 BT_ATT_FWD_OVL=0 BT_ATT_BWD_TURNS=0 BT_ATT_FUSED_BWD=0"
for r in 1 2; do
  for v in $V; do
    e=(); [ $v != def ] && e=(${v//,/ })
    env "${e[@]}" BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 timeout 90 build/bench_kernels > $OUT/v.txt 2>&1
    printf "r%d %-36s %s\n" $r "$v" "$(grep -E '^attention sweep' $OUT/v.txt | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}')"
  done
done
echo "(columns: T 1024 fwd, bwd, T 4096 fwd, bwd, us)"
