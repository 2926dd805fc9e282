#!/usr/bin/env bash
# H100 call (2026-11-24, ninth session): where the attention kernels' cycles go at the GPT-2 shape
# (B 16, H 12, T 1024, D 64, bf16, causal): ncu full set with per-instruction stall samples (source
# page, SASS) of one forward and one fused backward launch, and the SASS of both kernels, from the
# bench_kernels build of 23:28 UTC (attention code unchanged since). Outputs in one tar.
source bench/runs/prelude.sh
export BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 BT_BENCH_TORCH=0
BT_BENCH_SETTLE_MS=0 timeout 120 build/bench_kernels 2>&1 | grep -E "^attention sweep" | cut -c1-110
for k in fwd bwd; do
  timeout 240 ncu --set full --import-source no -k regex:bt__k_att_${k}_wg -s 3 -c 1 -o $OUT/$k build/bench_kernels > $OUT/ncu_$k.log 2>&1
  echo "ncu $k: exit $?"; tail -3 $OUT/ncu_$k.log
  ncu -i $OUT/$k.ncu-rep --page source --csv --print-source sass > $OUT/src_$k.csv 2> $OUT/src_$k.err; echo "source $k: $? $(wc -l < $OUT/src_$k.csv) lines"
  ncu -i $OUT/$k.ncu-rep --page details > $OUT/det_$k.txt 2>&1
  grep -E "Duration|Issue Slots Busy|Executed Ipc A|No Eligible|Warp Cycles Per Issued|Registers Per|Compute \(SM\) Thr|Memory Thr" $OUT/det_$k.txt | head -12
done; el
cuobjdump -sass build/bench_kernels > /tmp/all.sass 2>/dev/null; echo "cuobjdump: $? $(wc -l < /tmp/all.sass)"
awk '/Function : /{p = ($0 ~ /att_fwd_wgI13__nv_bfloat16Li64ELi184E/ || $0 ~ /att_bwd_wgI13__nv_bfloat16E/)} p' /tmp/all.sass > $OUT/att.sass
grep -c "" $OUT/att.sass; grep "Function :" $OUT/att.sass; el
cd $OUT && tar -cJf /tmp/s9a.tar.xz *.csv *.txt *.sass *.log && rm -rf $OUT/* && mv /tmp/s9a.tar.xz $OUT/
