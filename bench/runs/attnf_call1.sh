#!/usr/bin/env bash
# attnf_call1.sh - session attnf's first device call (run from the unpacked carry: build/ of this
# branch, with the forward ablations compiled in (-DBT_ATT_FWD_ABLATIONS), and base/bench_kernels =
# main's build): SASS of the forward kernels, the GPT-2 forward (sweep rows 1 and 3: T 1024 / 4096
# causal D 64) of base and this build, its variants (BT_ATT_FWD_V) and ablations (BT_ATT_FWD_ABL),
# each with per-item and per-step clock traces (BT_ATT_TRACE=1024, the third call: a warm-up one),
# cuDNN through PyTorch in one run, Nsight Compute on the default forward, the attention tests
# (variants included); summary last.
set -uo pipefail
OUTD=${OUT:-/tmp/bt_ret}; mkdir -p "$OUTD"
W=/tmp/bt_w; RET=$W/ret; mkdir -p "$RET"   # everything in $RET, packed into $OUT/attnf_call1.tar.xz at the end (8 files come back)
clk() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RET/gpu.txt"
date -u | tee -a "$RET/gpu.txt"
NVB=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
CUOBJ=$NVB/cuobjdump; [ -x "$CUOBJ" ] || CUOBJ=$(command -v cuobjdump)
if [ -n "$CUOBJ" ]; then
  timeout 60 "$CUOBJ" -sass build/bench_kernels > "$W/all.sass" 2>/dev/null
  for m in 0 8 32 40; do
    awk -v F="_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi${m}EEv10bt__k_attp" '/Function :/ {on = ($3 == F)} on' "$W/all.sass" > "$RET/sass_M$m.txt"
    echo "SASS M$m: $(grep -c HGMMA "$RET/sass_M$m.txt") HGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$RET/sass_M$m.txt") DEPBAR, $(grep -c MUFU "$RET/sass_M$m.txt") MUFU, $(grep -cE 'STL|LDL' "$RET/sass_M$m.txt") STL/LDL, $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$RET/sass_M$m.txt") instr"
  done | tee "$RET/sass_counts.txt"
  xz -6 "$RET"/sass_M*.txt
fi
run() {   # run NAME BINARY ENV...: sweep rows 1, 3 with traces
  local name=$1 bin=$2; shift 2
  env "$@" BT_ATT_TRACE=1024 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 timeout 40 "$bin" > "$W/$name.txt" 2>&1
  local rc=$?
  local f=$(grep -E "^attention sweep +B16 H12 T1024 D64 bf16 causal" "$W/$name.txt" | awk '{print $(NF-6)}')
  local f4=$(grep -E "^attention sweep +B16 H12 T4096 D64 bf16 causal" "$W/$name.txt" | awk '{print $(NF-6)}')
  printf "%-14s rc %3s  fwd T1024 %8s us  T4096 %8s us  %s\n" "$name" "$rc" "$f" "$f4" "$(clk)" | tee -a "$RET/times.txt"
  { echo "=== $name ($*) rc $rc"; grep -E "att_fwd (trace|steps) T 1024|^attention sweep" "$W/$name.txt"; } >> "$RET/traces.txt"
}
run base1 base/bench_kernels
run new1 build/bench_kernels
for v in 8 16 32 24 40; do run v$v build/bench_kernels BT_ATT_FWD_V=$v; done
for a in 1 2 3 4 5 6; do run abl$a build/bench_kernels BT_ATT_FWD_ABL=$a; done
run base2 base/bench_kernels
run new2 build/bench_kernels
for v in 8 32 40; do run v${v}b build/bench_kernels BT_ATT_FWD_V=$v; done
# cuDNN (PyTorch SDPA) and ours in one process: row 1 only
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 BT_BENCH_SWEEP=1 timeout 90 build/bench_kernels > "$W/torch.txt" 2>&1
echo "torch run: exit $?" | tee -a "$RET/times.txt"
grep -E "^\| (attention bf16|T1024 D64 causal)" "$W/torch.txt" | tee -a "$RET/times.txt"
BT_TEST_ONLY=attention BT_TEST_VERBOSE=1 timeout 90 build/tests/test_kernels_gpu > "$W/test.txt" 2>&1
echo "tests: exit $?" | tee -a "$RET/times.txt"
grep -E "FAIL|wgmma path|passed, .* failed" "$W/test.txt" | head -20 | tee "$RET/tests.txt"
grep -E "wg" "$W/test.txt" | grep -E "T=?1000|T200|T300" | tail -40 > "$RET/test_wg_tail.txt"
tar -cJf "$OUTD/attnf_call1.tar.xz" -C "$W" ret   # in case ncu runs past the limit
if command -v ncu >/dev/null; then
  for v in 0 8; do
    BT_ATT_FWD_V=$v BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1 timeout 60 ncu --clock-control none \
      -k regex:bt__k_att_fwd_wg -c 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
      --section InstructionStats --section SourceCounters build/bench_kernels > "$RET/ncu_v$v.txt" 2>&1
    echo "ncu v$v: exit $?" | tee -a "$RET/times.txt"
  done
  BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1 timeout 60 ncu --clock-control none -k regex:bt__k_att_fwd_wg -c 1 \
    --section SourceCounters --page source --print-source sass --csv build/bench_kernels > "$W/ncu_src.csv" 2>&1
  echo "ncu source: exit $? $(wc -l < "$W/ncu_src.csv") lines" | tee -a "$RET/times.txt"
  xz -6 -c "$W/ncu_src.csv" > "$RET/ncu_src_v0.csv.xz"
fi
echo "=== summary"
cat "$RET/gpu.txt" "$RET/sass_counts.txt" 2>/dev/null
cat "$RET/times.txt"
for f in "$RET"/ncu_v*.txt; do
  echo "--- $(basename $f)"
  grep -E "Duration|Issued Warp Per Scheduler|No Eligible|Compute \(SM\) Throughput|Executed Ipc Active|Stall|stall" "$f" | cut -c1-120 | head -14
done 2>/dev/null
awk '/^=== / {n = $2} /att_fwd steps/ {sub(/.*wg /, ""); print n, "wg", $0}' "$RET/traces.txt" | sed -e 's/ (cycles)//' -e 's/steps |/st |/' | cut -c1-150
awk '/^=== / {n = $2} /att_fwd trace +[0-9]/ && ($3 == 1 || $3 == 4 || $3 == 8) {print n, $0}' "$RET/traces.txt" | cut -c1-150 | head -45
tar -cJf "$OUTD/attnf_call1.tar.xz" -C "$W" ret
