#!/usr/bin/env bash
# attn4_call1.sh - session attn4's first device call (run from the unpacked carry, binaries built on
# the dev machine): per-item clock traces of the forward (BT_ATT_TRACE=1024: the flat pipeline, the
# per-item one, the per-item one with one softmax chain = the code before this session; and T 1024
# non-causal), then bench/attn_gpu.sh: tests, memcheck (quick), all sweep rows of this build, its
# variants and the build before this session (base/bench_kernels); the summary table last.
# Logs in /tmp/bt_out; a few (traces, test log, SASS counts, bench logs) copied to $RET (the run's $OUT).
set -uo pipefail
RET=${OUT:-/tmp/bt_ret}; mkdir -p "$RET"
export OUT=/tmp/bt_out; mkdir -p "$OUT"
i=0
for v in "BT_BENCH_SWEEP=1" "BT_ATT_FWD_FLAT=0 BT_BENCH_SWEEP=1" "BT_ATT_FWD_FLAT=0 BT_ATT_FWD_ILP=0 BT_BENCH_SWEEP=1" "BT_BENCH_SWEEP=5"; do
  i=$((i + 1))
  env $v BT_ATT_TRACE=1024 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 timeout 40 build/bench_kernels > "$OUT/trace_$i.txt" 2>&1
  rc=$?
  { echo "=== trace $v: exit $rc"; grep -E "att_fwd trace|^attention sweep" "$OUT/trace_$i.txt"; } >> "$RET/traces.txt"
  echo "trace $i: exit $rc"
  # a hang in the flat forward: the rest on the per-item one
  if [ $i = 1 ] && [ $rc = 124 ]; then export BT_ATT_FWD_FLAT=0; echo "flat forward timed out: BT_ATT_FWD_FLAT=0 from here"; fi
done
NOBUILD=1 TORCH=0 BONLY=attention_sweep VONLY=attention_sweep SWEEP=0,1,2,3,5 TMO_TEST=120 TMO=80 TMO_BENCH=80 \
  VARIANTS="BT_ATT_FWD_FLAT=0 BT_ATT_FWD_FLAT=0,BT_ATT_FWD_ILP=0 BT_ATT_FUSED_TMAX=4096 BT_ATT_FUSED_BWD=0" \
  BASE=base/bench_kernels bash bench/attn_gpu.sh
cp "$OUT/hgmma.txt" "$OUT/bench_attention.txt" "$RET/" 2>/dev/null
tail -60 "$OUT/test_attention.txt" > "$RET/test_attention_tail.txt" 2>/dev/null
grep -E "FAIL|ERROR SUMMARY|passed" "$OUT/test_attention.txt" "$OUT/memcheck_attention.txt" > "$RET/fails.txt" 2>/dev/null
cat "$OUT"/variant_*.txt > "$RET/variants.txt" 2>/dev/null
