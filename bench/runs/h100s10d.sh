#!/usr/bin/env bash
# H100 call (2026-11-24, tenth session): the joined item boundary, second form (S of the next item and
# the last P V waited for together, the store before the softmax; no two items' contexts live at
# once): the T 512 / 1024 / 4096 causal rows of XI=1, XI=0 and the build before (build/old10) in
# alternating processes, and the kernel's spill sites (SASS).
source bench/runs/prelude.sh
cuobjdump -sass -fun '_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi440EEv10bt__k_attp' build/bench_kernels > $OUT/sass440.txt 2>&1
echo "sass 440: $(wc -l < $OUT/sass440.txt) lines, STL $(grep -c STL $OUT/sass440.txt), LDL $(grep -c LDL $OUT/sass440.txt)"
row() { env $2 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 60 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r xi1: $(row build/bench_kernels BT_ATT_FWD_XI=1) | xi0: $(row build/bench_kernels BT_ATT_FWD_XI=0) | old: $(row build/old10/bench_kernels X=1)"
done; el
cd $OUT && tar -cJf /tmp/s10d.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s10d.tar.xz $OUT/
