#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session, second): does the attention slow down as the GPU warms up
# (the fast / slow modes of notes_attention.md)? attn_modes in heat mode (GEMMs and copies between
# timings, 150 s) beside nvidia-smi dmon; then the forward's L2 sections (BT_ATT_L2_MB) timed and
# under ncu (DRAM bytes, L2 hit rate), and the backward's DRAM bytes once.
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
nvidia-smi dmon -s pc -d 2 > $OUT/dmon.txt 2>&1 &
DM=$!
first() { grep -E "^place (alloc|pad130|vmm|alloc2) " | awk '{printf "%s f %.1f b %.1f g %.1f c %.1f; ", $2, $4, $6, $8, $10} END {print ""}'; }
echo "cool: $(timeout 60 build/attn_modes 25 | first)"
timeout 200 build/attn_modes 25 ${HEAT:-150} > $OUT/heat.txt 2>&1; echo "heat: exit $?"
awk 'NR % 5 == 1' $OUT/heat.txt | head -40; tail -2 $OUT/heat.txt
for i in 1 2; do echo "hot $i: $(timeout 60 build/attn_modes 25 | first)"; done; el
for mb in 1 2 4 8 16; do
  echo "sec $mb MB: $(BT_ATT_L2_ONE_MB=0 BT_ATT_L2_MB=$mb timeout 60 build/attn_modes 25 | first)"
done
echo "sec default: $(timeout 60 build/attn_modes 25 | first)"; el
if command -v ncu > /dev/null; then
  M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
  for mb in default 1 4 16; do
    e=(); [ $mb != default ] && e=(BT_ATT_L2_ONE_MB=0 BT_ATT_L2_MB=$mb)
    env "${e[@]}" timeout 120 ncu --cache-control none --clock-control none -k regex:"bt__k_att_fwd_wg" -s 6 -c 1 --metrics $M \
      build/attn_modes 25 > $OUT/ncu_f$mb.txt 2>&1
    echo "ncu fwd sec $mb: $(grep -E "gpu__time|dram__bytes|hit_rate" $OUT/ncu_f$mb.txt | awk '{printf "%s %s; ", $1, $NF}')"
  done
  timeout 120 ncu --cache-control none --clock-control none -k regex:"bt__k_att_(bwd_wg|dvec)" -s 6 -c 2 --metrics $M \
    build/attn_modes 25 > $OUT/ncu_b.txt 2>&1
  grep -E "bt__k_att_|gpu__time|dram__bytes|hit_rate" $OUT/ncu_b.txt | sed -e 's/(bt__k_attp).*//' | cut -c1-90
fi
el
kill $DM 2>/dev/null
echo "== dmon every 10 s"; head -2 $OUT/dmon.txt; awk '!/^#/' $OUT/dmon.txt | awk 'NR % 5 == 1' | head -30
