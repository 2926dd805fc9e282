#!/usr/bin/env bash
# One call on the two-H200 machine: the data-parallel micro-step in a CUDA graph (--cuda-graph on
# with --nproc 2: the gradient buckets' collectives captured with the backward), tested, then
# measured against the eager run; prints a table last.
#   1. tests: test_dist_gpu's graph tests (BT_TEST_ONLY=graph: the bucket engine captured and
#      replayed bit for bit against eager passes, on blocking and non-blocking communicators; a
#      peer that stops inside a replay is caught by the watchdog), test_graph_gpu (one GPU, as
#      before), and tests/dist_parity.py --graph (train_gpt2 on 2 ranks, graph on vs off, 2
#      micro-batches a step: ddp / zero1 / zero2, fp32 / bf16, rows exchange, bf16 on the wire:
#      every loss, norm and weight byte equal)
#   2. GPT-2 124M bf16, B 16, T 1024, 16 steps: 1 GPU (-d 16384) and 2 GPUs (-d 32768) with the graph
#      off and on, alternating, ROUNDS rounds; the median tok/s of steps 4..16 of each run
#      (bench/runs/med.sh); one eager 2-GPU run on blocking communicators (what the graph run uses)
#   3. NCCL_MAX_CTAS 4, 8, 16 for the 2-GPU graph run (one run each): do fewer NCCL CTAs shorten
#      the overlapped backward?
# Env: NOBUILD=1 (unpack .carry/bins.tar.xz instead of building: build/train_gpt2_cuda,
# build/tests/test_dist_gpu, build/tests/test_graph_gpu), OUT (logs, default /tmp/bt_ddpgraph),
# ROUNDS (3), SKIP="tests parity bench ctas". Data: data/ or .carry/data. Every command runs under
# timeout; the whole is meant to take under 240 s on two H200s.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_ddpgraph}; ROUNDS=${ROUNDS:-3}; SKIP=${SKIP:-}
rm -rf "$OUT"; mkdir -p "$OUT" data
if [ "${NOBUILD:-0}" = 1 ]; then
  [ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
else
  make -j16 build/train_gpt2_cuda build/tests/test_dist_gpu build/tests/test_graph_gpu > "$OUT/build.txt" 2>&1 || { echo "build failed:"; tail -20 "$OUT/build.txt"; exit 1; }
fi
cp -n .carry/data/* data/ 2>/dev/null
BIN=./build/train_gpt2_cuda
for b in $BIN build/tests/test_dist_gpu build/tests/test_graph_gpu; do [ -x "$b" ] || echo "missing binary: $b"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +"%Y-%m-%d %H:%M UTC"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
source bench/runs/med.sh
ROWS=()
row() { ROWS+=("$(printf '%-46s | %s' "$1" "$2")"); echo "== $1: $2"; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }

# ---- 1. tests ----
if ! skip tests; then
  BT_TEST_ONLY=graph timeout 100 build/tests/test_dist_gpu > "$OUT/test_dist_gpu.txt" 2>&1; rc=$?
  grep -E "FAIL|ddp graph .* buckets|^ok|SKIP|timed out|nonblocking" "$OUT/test_dist_gpu.txt" | head -30
  row "test_dist_gpu graph tests (rc $rc)" "$(tail -1 "$OUT/test_dist_gpu.txt")"
  timeout 90 build/tests/test_graph_gpu > "$OUT/test_graph_gpu.txt" 2>&1; rc=$?
  grep -E "FAIL|differ|SKIP" "$OUT/test_graph_gpu.txt" | head -10
  row "test_graph_gpu (rc $rc)" "$(tail -1 "$OUT/test_graph_gpu.txt")"
  el tests
fi
if ! skip parity; then
  timeout 150 python3 tests/dist_parity.py $BIN "$OUT/parity" --graph --model s4 --B 4 --T 64 --steps 4 > "$OUT/parity.txt" 2>&1; rc=$?
  cat "$OUT/parity.txt"
  row "dist_parity --graph (rc $rc)" "$(grep -c '^PASS' "$OUT/parity.txt") passed, $(grep -c '^FAIL' "$OUT/parity.txt") failed"
  el parity
fi

# ---- 2. 1 -> 2 GPU scaling, graph off and on ----
A="-e d12 -b 16 -t 1024 -x 16 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
# one run: its log in $OUT/NAME.txt, the median line printed; echoes the median tok/s (or "fail")
tps() {
  local name=$1; shift
  "$@" > "$OUT/$name.txt" 2>&1 || echo "  $name: exit $? ($(grep -m1 -iE 'error|abort' "$OUT/$name.txt"))" >&2
  local m; m=$(med < "$OUT/$name.txt")
  echo "  $name:$m" >&2
  grep -q "cuda graph: on (each kind" "$OUT/$name.txt" && echo "  $name: graph on, $(grep -m1 'captures' "$OUT/$name.txt")" >&2
  local v; v=$(sed -n 's/.*median of [0-9]* steps: \([0-9]*\) tok\/s.*/\1/p' <<< "$m")
  echo "${v:-fail}"
}
ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print('%.3f' % (float(a) / float(b)) if a.isdigit() and b.isdigit() and int(b) else '-')" "$1" "$2"; }
TABLE=()
if ! skip bench; then
  for r in $(seq 1 "$ROUNDS"); do
    one=$(tps "r${r}_1gpu" timeout 60 $BIN $A -d 16384)
    eag=$(tps "r${r}_2gpu_eager" timeout 80 $BIN --nproc 2 $A -d 32768 --cuda-graph off)
    gra=$(tps "r${r}_2gpu_graph" timeout 80 $BIN --nproc 2 $A -d 32768 --cuda-graph on)
    TABLE+=("$(printf '%5s | %9s | %12s | %12s | %14s | %14s' "$r" "$one" "$eag" "$gra" "$(ratio "$eag" "$one")" "$(ratio "$gra" "$one")")")
    el "round $r"
  done
  blk=$(tps "2gpu_eager_blocking" env BT_NCCL_BLOCKING=1 timeout 80 $BIN --nproc 2 $A -d 32768 --cuda-graph off)
  row "2 GPUs eager, blocking communicators" "$blk tok/s"
fi

# ---- 3. NCCL_MAX_CTAS for the 2-GPU graph run ----
if ! skip ctas; then
  for c in 4 8 16; do
    v=$(tps "2gpu_graph_ctas$c" env NCCL_MAX_CTAS=$c timeout 80 $BIN --nproc 2 $A -d 32768 --cuda-graph on)
    row "2 GPUs graph, NCCL_MAX_CTAS=$c" "$v tok/s, fwd+bwd $(med < "$OUT/2gpu_graph_ctas$c.txt" | sed -n 's/.*fwd+bwd \([0-9.]*\) ms.*/\1/p') ms"
  done
  el ctas
fi

echo
echo "==== summary (GPT-2 124M bf16, B 16, T 1024 per GPU; median tok/s of steps 4..16) ===="
for l in "${ROWS[@]}"; do echo "$l"; done
if [ ${#TABLE[@]} -gt 0 ]; then
  printf '%5s | %9s | %12s | %12s | %14s | %14s\n' round "1 GPU" "2 GPU eager" "2 GPU graph" "scaling eager" "scaling graph"
  for l in "${TABLE[@]}"; do echo "$l"; done
fi
el done
