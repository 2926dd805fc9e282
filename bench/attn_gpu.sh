#!/usr/bin/env bash
# attn_gpu.sh - one device call for the attention kernels of bt_kernels.cuh section 9 (issue 12):
# build for sm_90a, show that the wgmma kernels hold HGMMA, run the attention tests (full size,
# then quick under compute-sanitizer memcheck), time the attention group of bench_kernels next to
# PyTorch's SDPA (default, flash, cuDNN), and print a short table last.
# Usage, from the repository root on the GPU machine:
#   bash bench/attn_gpu.sh              build with make (CUDA_ARCH=90a, the default), then run
#   NOBUILD=1 bash bench/attn_gpu.sh    use build/tests/test_kernels_gpu and build/bench_kernels as carried
#   SAN=0 ...                           skip the memcheck pass;  TORCH=0 ... skip PyTorch
#   TESTS=0 ...                         skip the tests (timings only)
#   VARIANTS="BT_ATT_FUSED_BWD=0 A=1,B=2"  also time the attention group under each of these settings
#                                       (space-separated; NAME=VALUE pairs joined by commas: one run
#                                       each; no PyTorch, sweep shapes SWEEP, default 0,1,2,3)
#   BONLY=attention_sweep ...           the first bench's group (default attention: the whole group)
#   VONLY=attention_sweep ...           the variants' bench group (default attention)
#   BASE=path/to/bench_kernels ...      also time an earlier build's bench binary as the variant "base"
#   TMO=s, TMO_TEST=s, TMO_BENCH=s      time limits per command (default 420; the tests, the first bench)
#   NCU=1 ...                           Nsight Compute on one forward and one backward at the GPT-2 shape
# Full logs go to $OUT (default /tmp/bt_out).
set -uo pipefail
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT"
NVCC=nvcc; command -v nvcc >/dev/null || NVCC=/usr/local/cuda/bin/nvcc
CUOBJDUMP=$(dirname "$(command -v $NVCC)")/cuobjdump
TEST=build/tests/test_kernels_gpu BENCH=build/bench_kernels
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -z "${NOBUILD:-}" ]; then
  # -Xptxas -v: registers / spills of the wgmma kernels; C7508/C7512/C7520 would say setmaxnreg was
  # ignored or the wgmmas were serialized
  NVFLAGS="-O3 -Xptxas -v" make -j16 NVCC_PATH=$NVCC $TEST $BENCH > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
  grep -A3 "_wg.*sm_90a" "$OUT/build.txt" | grep -E "spill|Used" | sort | uniq -c | head -8
  grep -E "C75(08|12|20)" "$OUT/build.txt" | head -5
fi
# the SASS of the wgmma kernels must hold HGMMA (warpgroup MMAs), not only HMMA
if [ -x "$CUOBJDUMP" ]; then
  # and WARPGROUP.DEPBAR (a wait for the tensor cores): about one per HGMMA means ptxas serialized them
  "$CUOBJDUMP" -sass "$TEST" | awk '/Function :/ {f = $3} /HGMMA/ && f ~ /_wg/ {n[f]++} /WARPGROUP.DEPBAR/ && f ~ /_wg/ {d[f]++}
    END {for (k in n) print "HGMMA", n[k], "DEPBAR", d[k] + 0, k}' | sort -k5 | tee "$OUT/hgmma.txt"
  # local-memory spills of the fused backward, each with the 4 instructions before it (which region)
  "$CUOBJDUMP" -sass "$TEST" | awk '/Function :/ {on = ($3 ~ /att_bwd_wg/)} on' > "$OUT/bwd_wg.sass"
  grep -B4 -E "STL|LDL" "$OUT/bwd_wg.sass" | cut -c1-100 > "$OUT/bwd_wg_spills.txt"
  echo "bwd_wg SASS: $(grep -c HGMMA "$OUT/bwd_wg.sass") HGMMA, $(grep -c STL "$OUT/bwd_wg.sass") STL, $(grep -c LDL "$OUT/bwd_wg.sass") LDL"
fi
# the attention tests at full size (BT_TEST_VERBOSE=1: every check with its error, in the log)
rc=skipped
if [ "${TESTS:-1}" = 1 ]; then
  BT_TEST_ONLY=attention BT_TEST_VERBOSE=1 timeout ${TMO_TEST:-${TMO:-420}} "$TEST" > "$OUT/test_attention.txt" 2>&1
  rc=$?
fi
echo "tests: exit $rc $(grep -c ' FAIL$' "$OUT/test_attention.txt" 2>/dev/null) failed checks"
# a hang (timeout's 124) in the fused backward: the rest on the two-kernel backward
if [ $rc = 124 ]; then export BT_ATT_FUSED_BWD=0; echo "tests timed out: BT_ATT_FUSED_BWD=0 from here"; fi
grep -E "wgmma path|FAIL|^attention |passed, .* failed" "$OUT/test_attention.txt" 2>/dev/null | head -20
if [ "${SAN:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout ${TMO:-420} compute-sanitizer --tool memcheck --error-exitcode 9 "$TEST" \
    > "$OUT/memcheck_attention.txt" 2>&1
  echo "memcheck: exit $? $(grep 'ERROR SUMMARY' "$OUT/memcheck_attention.txt")"
fi
BT_BENCH_ONLY=${BONLY:-attention} BT_BENCH_TORCH=${TORCH:-1} timeout ${TMO_BENCH:-${TMO:-420}} "$BENCH" > "$OUT/bench_attention.txt" 2>&1
echo "bench: exit $?"
for v in ${VARIANTS:-}; do
  env ${v//,/ } BT_BENCH_ONLY=${VONLY:-attention} BT_BENCH_TORCH=0 BT_BENCH_SWEEP=${SWEEP:-0,1,2,3} timeout ${TMO:-420} "$BENCH" \
    > "$OUT/variant_${v//[=,]/_}.txt" 2>&1
  echo "bench $v: exit $?"
done
if [ -n "${BASE:-}" ]; then
  BT_BENCH_ONLY=${VONLY:-attention} BT_BENCH_TORCH=0 BT_BENCH_SWEEP=${SWEEP:-0,1,2,3} timeout ${TMO:-420} "$BASE" > "$OUT/variant_base.txt" 2>&1
  echo "bench base ($BASE): exit $?"
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  # one launch of each attention wgmma kernel at the GPT-2 shape (the bench's first calls)
  for kn in ${NCU_KERNELS:-fwd_wg bwd_wg dvec16}; do
    BT_BENCH_ONLY=attention BT_BENCH_TORCH=0 BT_BENCH_SWEEP=99 timeout 120 ncu --clock-control none \
      -k regex:"bt__k_att_$kn" -c 1 --section SpeedOfLight --section SchedulerStats --section MemoryWorkloadAnalysis \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio "$BENCH" >> "$OUT/ncu_attention.txt" 2>&1
    echo "ncu $kn: exit $?"
  done
  # the stall reasons above 0.05 warps per issue, per kernel
  grep -E "^  void bt__k_att_|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Hit|Issued Warp|No Eligible|issue_stalled" \
    "$OUT/ncu_attention.txt" | awk '!/issue_stalled/ || $NF + 0 >= 0.05' | sed -e 's/smsp__average_warps_issue_stalled_//' \
    -e 's/_per_issue_active.ratio//' | cut -c1-110 | head -80
fi
echo "=== summary ($(cat "$OUT/gpu.txt"))"
grep -E "passed, .* failed" "$OUT/test_attention.txt" 2>/dev/null
grep -E "ERROR SUMMARY" "$OUT/memcheck_attention.txt" 2>/dev/null
grep -E "^ceilings|^\| attention( |_backward)|^attention (bf16|f32|tf32)" "$OUT/bench_attention.txt"
sed -n '/^| attention bf16, B16 H12/,$p' "$OUT/bench_attention.txt"
for v in ${VARIANTS:-} ${BASE:+base}; do
  echo "--- $v"
  grep -E "^\| attention( |_backward)|^\| attention sweep" "$OUT/variant_${v//[=,]/_}.txt"
done
