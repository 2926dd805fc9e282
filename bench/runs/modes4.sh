#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session, fifth): is the slow mode the SM clock after bursts of large
# GEMMs? attn_modes in bench mode (ceilings replayed) with the SM clock, power and clock-event
# reasons logged every 10 ms; then bench_kernels' attention rows and sweep next to PyTorch, each
# row after an idle half second (settle(), BT_BENCH_SETTLE_MS).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date -u
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader -lms 10 > $OUT/clk.txt 2>&1 &
CK=$!
sleep 1
for r in 1 2; do
  echo "== r$r bench mode"; timeout 60 build/attn_modes 25 0 bench | grep "^place" | awk '{printf "  %-7s f %6.1f b %6.1f g %5.1f at %s\n", $2, $4, $6, $8, $NF}'
  sleep 2
done
kill $CK; sleep 0.2
echo "== SM clock (MHz), power (W), event reasons over that window (every 5th sample of 10 ms)"
awk -F', ' 'NR % 5 == 1 {split($1, t, " "); printf "  %s %s %s %s\n", t[2], $2, $3, $4}' $OUT/clk.txt | head -150
el
BT_BENCH_ONLY=attention BT_BENCH_TORCH=1 timeout 240 build/bench_kernels > $OUT/attention.txt 2>&1; echo "attention group: exit $?"; el
echo "=== attention group"; grep -E "^(attention|torch sdpa)" $OUT/attention.txt | cut -c1-110
echo "=== attention sweep"; sed -n '/^| attention bf16, B16 H12/,$p' $OUT/attention.txt | head -16
