#!/usr/bin/env bash
# attnf_call2.sh - the device call session attnf could not make (loans paused after its first):
# run from the unpacked carry (build/ of branch attnf: tests without, bench with -DBT_ATT_FWD_ABLATIONS;
# base/bench_kernels = main's build). The attention tests (the default forward with the softmax under
# P V, and the LEAN variant's cases: BT_ATT_FWD_LEAN), memcheck (quick), then the GPT-2 forward (sweep
# rows 1, 3: T 1024 / 4096 causal D 64) of base, the default, LEAN with and without OVL, each twice
# where it matters, with per-item / per-step traces (BT_ATT_TRACE=1024), cuDNN in the same process
# as the default and as LEAN, SASS counts; summary last. Everything else in $OUT/attnf_call2.tar.xz.
set -uo pipefail
OUTD=${OUT:-/tmp/bt_ret}; mkdir -p "$OUTD"
W=/tmp/bt_w2; RET=$W/ret; mkdir -p "$RET"
clk() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; date -u; } | tee "$RET/gpu.txt"
BT_TEST_ONLY=attention BT_TEST_VERBOSE=1 timeout 120 build/tests/test_kernels_gpu > "$W/test.txt" 2>&1
echo "tests: exit $?" | tee "$RET/tests.txt"
grep -E "FAIL|wgmma path|passed, .* failed" "$W/test.txt" | head -20 | tee -a "$RET/tests.txt"
if command -v compute-sanitizer >/dev/null; then
  BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu \
    > "$W/memcheck.txt" 2>&1
  echo "memcheck: exit $? $(grep 'ERROR SUMMARY' "$W/memcheck.txt")" | tee -a "$RET/tests.txt"
fi
NVB=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
CUOBJ=$NVB/cuobjdump; [ -x "$CUOBJ" ] || CUOBJ=$(command -v cuobjdump)
if [ -n "$CUOBJ" ]; then
  timeout 60 "$CUOBJ" -sass build/bench_kernels > "$W/all.sass" 2>/dev/null
  for m in 0 8 16 24; do
    awk -v F="_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi${m}EEv10bt__k_attp" '/Function :/ {on = ($3 == F)} on' "$W/all.sass" > "$RET/sass_M$m.txt"
    echo "SASS M$m: $(grep -c HGMMA "$RET/sass_M$m.txt") HGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$RET/sass_M$m.txt") DEPBAR, $(grep -cE 'STL|LDL' "$RET/sass_M$m.txt") STL/LDL, $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$RET/sass_M$m.txt") instr"
  done | tee "$RET/sass_counts.txt"
  xz -6 "$RET"/sass_M*.txt
fi
row() { grep -E "^attention sweep +B16 H12 T$1 D64 bf16 causal" "$2" | awk '{for (i = 1; i <= NF; i++) if ($i == "us") {print $(i - 1); exit}}'; }
run() {   # run NAME BINARY ENV...: sweep rows 1, 3 with traces
  local name=$1 bin=$2; shift 2
  env "$@" BT_ATT_TRACE=1024 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 timeout 40 "$bin" > "$W/$name.txt" 2>&1
  local rc=$?
  printf "%-10s rc %3s  fwd T1024 %8s us  T4096 %8s us  %s\n" "$name" "$rc" "$(row 1024 "$W/$name.txt")" "$(row 4096 "$W/$name.txt")" "$(clk)" | tee -a "$RET/times.txt"
  { echo "=== $name ($*) rc $rc"; grep -E "att_fwd (trace|steps) T 1024|^attention sweep" "$W/$name.txt"; } >> "$RET/traces.txt"
}
run base1 base/bench_kernels
run ovl1 build/bench_kernels
run lean1 build/bench_kernels BT_ATT_FWD_LEAN=1
run lean0 build/bench_kernels BT_ATT_FWD_LEAN=1 BT_ATT_FWD_OVL=0
run v0 build/bench_kernels BT_ATT_FWD_OVL=0
run base2 base/bench_kernels
run ovl2 build/bench_kernels
run lean2 build/bench_kernels BT_ATT_FWD_LEAN=1
for e in "" "BT_ATT_FWD_LEAN=1"; do   # cuDNN (PyTorch SDPA) and ours in one process: row 1
  env $e BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 BT_BENCH_SWEEP=1 timeout 90 build/bench_kernels > "$W/torch.txt" 2>&1
  echo "torch run ($e): exit $?" | tee -a "$RET/times.txt"
  grep -E "^\| T1024 D64 causal" "$W/torch.txt" | tee -a "$RET/times.txt"
done
tar -cJf "$OUTD/attnf_call2.tar.xz" -C "$W" ret
echo "=== summary"
cat "$RET/gpu.txt" "$RET/tests.txt" "$RET/sass_counts.txt" "$RET/times.txt" 2>/dev/null
awk '/^=== / {n = $2} /att_fwd steps/ {sub(/.*wg /, ""); print n, "wg", $0}' "$RET/traces.txt" | sed -e 's/ (cycles)//' | cut -c1-150
