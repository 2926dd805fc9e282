#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session, last): where the attention forward's cycles go now (ncu
# source page with per-instruction warp-state samples of one forward launch at the GPT-2 shape, the
# build of 58c106f, whose SASS the final commit keeps). Outputs in one tar.
source bench/runs/prelude.sh
export BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 BT_BENCH_TORCH=0
timeout 240 ncu --set full --import-source no -k regex:bt__k_att_fwd_wg -s 3 -c 1 -o $OUT/fwd build/bench_kernels > $OUT/ncu_fwd.log 2>&1
ncu -i $OUT/fwd.ncu-rep --page source --csv --print-source sass > $OUT/src_fwd.csv 2>/dev/null
ncu -i $OUT/fwd.ncu-rep --page details > $OUT/det_fwd.txt 2>&1
grep -E "Duration|Issue Slots Busy|No Eligible|Executed Ipc A" $OUT/det_fwd.txt | head -4; el
cd $OUT && tar -cJf /tmp/s9i.tar.xz *.txt *.csv *.log && rm -rf $OUT/* && mv /tmp/s9i.tar.xz $OUT/
