#!/usr/bin/env bash
# attn4_call2.sh - session attn4's second device call: the final build's tests, memcheck (quick), the
# whole attention group with PyTorch's SDPA backends (cuDNN) in the same run, and the build before this
# session (base/bench_kernels) timed before and after it (the run-to-run spread); summary last.
set -uo pipefail
RET=${OUT:-/tmp/bt_ret}; mkdir -p "$RET"
export OUT=/tmp/bt_out; mkdir -p "$OUT"
clk() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }
echo "clocks before: $(clk)"
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,2,3 timeout 60 base/bench_kernels > "$OUT/base1.txt" 2>&1
echo "base 1: exit $? $(clk)"
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,2,3 timeout 60 build/bench_kernels > "$OUT/new1.txt" 2>&1
echo "new 1: exit $? $(clk)"
NOBUILD=1 TMO_TEST=150 TMO=90 TMO_BENCH=200 bash bench/attn_gpu.sh > "$OUT/attn_gpu.txt" 2>&1
echo "attn_gpu.sh: exit $? $(clk)"
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,2,3 timeout 60 base/bench_kernels > "$OUT/base2.txt" 2>&1
echo "base 2: exit $? $(clk)"
cp "$OUT/attn_gpu.txt" "$OUT/bench_attention.txt" "$RET/"
grep -E "FAIL|ERROR SUMMARY|passed" "$OUT/test_attention.txt" "$OUT/memcheck_attention.txt" > "$RET/fails.txt" 2>/dev/null
for f in base1 new1 base2; do echo "--- $f"; grep -E "^\| attention sweep" "$OUT/$f.txt"; done | tee "$RET/spread.txt"
echo "=== final summary"
sed -n '/^=== summary/,$p' "$OUT/attn_gpu.txt" | grep -v "^| attention sweep"
