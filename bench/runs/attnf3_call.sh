#!/usr/bin/env bash
# attnf3_call.sh - session attnf3's one device call (H100), run from the unpacked carry (build/ of
# branch attnf3, bench/bench_attention_torch.py): the attention tests (the forward's variants
# BT_ATT_FWD_WG3 = three consumer warpgroups with 192-query tiles, BT_ATT_FWD_SKIP = stale row max,
# BT_ATT_FWD_TURNS=0 next to the earlier ones), memcheck (quick), SASS counts, then the GPT-2
# forward's sweep rows 1 and 3 (T 1024 / 4096, B 16 H 12 D 64 bf16 causal) of the default (LEAN +
# OVL) and the variants, each in separate processes, rounds interleaved; cuDNN (PyTorch SDPA) in one
# process with the fastest variant at T 1024, and with the default; summary table last. Everything
# also in $OUT/attnf3_call.tar.xz. Keeps within ~280 s (guards on $SECONDS).
set -uo pipefail
OUTD=${OUT:-/tmp/bt_ret}; mkdir -p "$OUTD"
W=/tmp/bt_w3; RET=$W/ret; mkdir -p "$RET"
clk() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; date -u; } | tee "$RET/gpu.txt"
BT_TEST_ONLY=attention BT_TEST_VERBOSE=1 timeout 75 build/tests/test_kernels_gpu > "$W/test.txt" 2>&1
echo "tests: exit $? ($SECONDS s)" | tee "$RET/tests.txt"
grep -E "FAIL|wgmma path|passed, .* failed" "$W/test.txt" | head -20 | tee -a "$RET/tests.txt"
if command -v compute-sanitizer >/dev/null; then
  BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu \
    > "$W/memcheck.txt" 2>&1
  echo "memcheck: exit $? $(grep 'ERROR SUMMARY' "$W/memcheck.txt") ($SECONDS s)" | tee -a "$RET/tests.txt"
  grep -E "passed, .* failed" "$W/memcheck.txt" | tail -1 | tee -a "$RET/tests.txt"
fi
NVB=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
CUOBJ=$NVB/cuobjdump; [ -x "$CUOBJ" ] || CUOBJ=$(command -v cuobjdump)
if [ -n "$CUOBJ" ]; then   # M: 24 default, 56 WG3, 120 WG3 + SKIP, 184 WG3 no turns, 88 SKIP, 48 WG3 without OVL
  timeout 60 "$CUOBJ" -sass build/bench_kernels > "$W/all.sass" 2>/dev/null
  for m in 24 56 120 184 88 48; do
    awk -v F="_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi${m}EEv10bt__k_attp" '/Function :/ {on = ($3 == F)} on' "$W/all.sass" > "$RET/sass_M$m.txt"
    echo "SASS M$m: $(grep -c HGMMA "$RET/sass_M$m.txt") HGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$RET/sass_M$m.txt") DEPBAR, $(grep -cE 'STL|LDL' "$RET/sass_M$m.txt") STL/LDL, $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$RET/sass_M$m.txt") instr, top reg R$(grep -oE '\bR[0-9]+\b' "$RET/sass_M$m.txt" | tr -d R | sort -n | tail -1)"
  done | tee "$RET/sass_counts.txt"
  xz -6 "$RET"/sass_M*.txt
fi
row() { grep -E "^attention sweep +B16 H12 T$1 D64 bf16 causal" "$2" | awk '{for (i = 1; i <= NF; i++) if ($i == "us") {print $(i - 1); exit}}'; }
declare -A ENV=([def]="" [wg3]="BT_ATT_FWD_WG3=1" [wg3s]="BT_ATT_FWD_WG3=1 BT_ATT_FWD_SKIP=1" [skip]="BT_ATT_FWD_SKIP=1"
                [wg3nt]="BT_ATT_FWD_WG3=1 BT_ATT_FWD_TURNS=0" [wg3L]="BT_ATT_FWD_WG3=1 BT_ATT_FWD_OVL=0")
run() {   # run NAME ROUND: sweep rows 1, 3 of variant NAME in a process of its own
  local name=$1 r=$2
  [ "$SECONDS" -gt 235 ] && return
  env ${ENV[$name]} BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 timeout 30 build/bench_kernels > "$W/$name$r.txt" 2>&1
  local rc=$?
  printf "%-6s %s rc %3s  fwd T1024 %8s us  T4096 %8s us  %s\n" "$name" "$r" "$rc" "$(row 1024 "$W/$name$r.txt")" "$(row 4096 "$W/$name$r.txt")" "$(clk)" | tee -a "$RET/times.txt"
}
for r in 1 2 3; do
  for v in def wg3 wg3s skip; do run $v $r; done
  [ $r -lt 3 ] && { run wg3nt $r; run wg3L $r; }
done
# the fastest variant at T 1024 (median of its processes), then cuDNN in one process with it
best=$(awk '$7 ~ /^[0-9.]+$/ {print $1, $7}' "$RET/times.txt" | sort -k1,1 -k2,2n | awk '{a[$1] = a[$1] " " $2; n[$1]++}
  END {for (k in a) {split(substr(a[k], 2), x, " "); print x[int((n[k] + 1) / 2)], k}}' | sort -n | head -1 | awk '{print $2}')
echo "fastest at T 1024 (median): ${best:-none}" | tee -a "$RET/times.txt"
for v in ${best:-def} def; do
  [ "$SECONDS" -gt 250 ] && break
  env ${ENV[$v]} BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 BT_BENCH_SWEEP=1 timeout $((285 - SECONDS)) build/bench_kernels > "$W/torch_$v.txt" 2>&1
  echo "torch run ($v: ${ENV[$v]}): exit $? ($SECONDS s)" | tee -a "$RET/times.txt"
  grep -E "^\| T1024 D64 causal" "$W/torch_$v.txt" | tee -a "$RET/times.txt"
  [ "$v" = def ] && break
done
tar -cJf "$OUTD/attnf3_call.tar.xz" -C "$W" ret test.txt 2>/dev/null
echo "=== summary ($SECONDS s)"
cat "$RET/gpu.txt" "$RET/tests.txt" "$RET/sass_counts.txt" 2>/dev/null
echo "variant  T1024 us (rounds)      T4096 us (rounds)"
for v in def wg3 wg3s skip wg3nt wg3L; do
  printf "%-6s %-26s %s\n" "$v" "$(awk -v v=$v '$1 == v {printf "%s ", $7}' "$RET/times.txt")" "$(awk -v v=$v '$1 == v {printf "%s ", $10}' "$RET/times.txt")"
done
grep -E "fastest|torch run|^\| T1024" "$RET/times.txt"
