#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session): the attention's fast / slow process modes (issue 12,
# notes_attention.md). build/attn_modes in many processes: each times the GPT-2-shape forward and
# backward on buffers placed 11 ways (bench/attn_modes.cu), so a mode that follows placement shows
# inside a process and one set per process shows as processes that disagree. Process settings:
# default (with the forward's per-item trace), eager module loading, static work order, smaller L2
# sections, shared-memory carveout, and a few under ncu (L2 hit rate and DRAM bytes of one forward).
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
nvidia-smi dmon -s pc -d 1 > $OUT/dmon.txt 2>&1 &
DM=$!
run() {   # run <label> [env...]: one process, its placement lines prefixed by the label
  local lab=$1; shift
  env "$@" timeout 60 build/attn_modes 25 > $OUT/p_$lab.txt 2> $OUT/p_$lab.err
  echo "== $lab (exit $?) $*"; grep -E "^place" $OUT/p_$lab.txt | awk '{printf "  %-8s f %6.1f b %6.1f g %5.1f c %5.1f\n", $2, $4, $6, $8, $10}'
  grep -E "trace +[0-9]+ |gap|busy" $OUT/p_$lab.err | head -12 | sed 's/^/  /'
}
for i in 1 2 3 4 5; do run def$i BT_ATT_TRACE=1024; done; el
for i in 1 2 3; do run eager$i CUDA_MODULE_LOADING=EAGER; done
for i in 1 2 3; do run dyn0_$i BT_ATT_DYN=0; done
for i in 1 2 3; do run sec16_$i BT_ATT_L2_ONE_MB=0 BT_ATT_L2_MB=16; done
for i in 1 2; do run sec8_$i BT_ATT_L2_ONE_MB=0 BT_ATT_L2_MB=8; done
for i in 1 2; do run carve100_$i BT_ATT_CARVEOUT=100; done; el
if command -v ncu > /dev/null; then
  for i in 1 2 3 4; do
    timeout 120 ncu --cache-control none --clock-control none -k regex:"bt__k_att_(fwd|bwd)_wg" -s 6 -c 2 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex.sum,sm__cycles_elapsed.avg.per_second \
      build/attn_modes 25 > $OUT/ncu$i.txt 2>&1
    echo "== ncu$i (exit $?)"; grep -E "^place alloc " $OUT/ncu$i.txt | head -1
    grep -E "bt__k_att_|gpu__time|dram__bytes|hit_rate|srcunit_tex|cycles_elapsed" $OUT/ncu$i.txt | sed -e 's/(bt__k_attp).*//' | cut -c1-100 | head -16 | sed 's/^/  /'
  done
fi
el
kill $DM 2>/dev/null
echo "== dmon (sm clock MHz, power W: min / max over the run)"
awk '!/^#/ && NF > 5 {p = $2; s = $(NF-1); if (!n || p < pmin) pmin = p; if (p > pmax) pmax = p; n++} END {print "  samples", n, "power", pmin, "-", pmax}' $OUT/dmon.txt
head -3 $OUT/dmon.txt; sed -n '4,400p' $OUT/dmon.txt | awk '!/^#/' | awk 'NR % 10 == 1' | head -20
