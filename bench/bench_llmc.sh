#!/usr/bin/env bash
# bench_llmc.sh - GPT-2 124M training against llm.c (make bench-llmc): llm.c's train_gpt2cu, with
# and without cuDNN attention and with and without its GELU recomputation (-r 1 is its default,
# -r 0 keeps the activation as train_gpt2 does), beside train_gpt2 at the same settings, at each
# B of BS: tokens/s and peak GPU memory of the whole process. The table is printed last.
#
#   make bench-llmc LLMC_DIR=/path/to/llm.c [CUDNN_FRONTEND_DIR=/path/to/cudnn-frontend] [BS="16 32 64"]
#                   [STEPS=20] [RECOMPUTE="0 1"] [LLMC_SM=90] [BIN=build/train_gpt2_cuda]
#   (or the same names as environment variables of `bash bench/bench_llmc.sh`)
#
# Build: LLMC_DIR (a checkout of github.com/karpathy/llm.c) is copied to build/llmc/src (the checkout
# is never changed) and train_gpt2cu is built there for one GPU (no MPI, no NCCL) with llm.c's
# Makefile, GPU_COMPUTE_CAPABILITY=LLMC_SM; with CUDNN_FRONTEND_DIR (a checkout of
# github.com/NVIDIA/cudnn-frontend) also with USE_CUDNN=1. Two changes for CUDA 13 are made to the
# copy: cudaMemAdvise takes a cudaMemLocation (llmc/cuda_utils.cuh's managed-memory fallback), and
# -lnvidia-ml is left off the link (only llm.c's GPU-utilisation logging needs it). cuDNN's NVRTC
# kernels need -lnvrtc -lcuda too. REBUILD=1 builds again; libcudnn.so.9 and friends are looked up
# in the NVIDIA wheels PyTorch brings when the system has none.
# Settings as make bench-gpt2's: d12, bf16, T 1024, one micro-batch a step, AdamW lr 6e-4 (betas
# 0.9/0.95, eps 1e-8, weight decay 0.1), cosine with STEPS/10 warm-up steps, grad clip 1.0, Tiny
# Shakespeare (data/tinyshakespeare_train.bin, bt_data.h's shards are llm.c's layout; also llm.c's
# val file: the val shard is too short for B 64). tokens/s = B*T / the median step time after WARM=3
# steps (llm.c's "| X ms |" lines; train_gpt2's log.jsonl). Memory: the peak of nvidia-smi's
# per-process used memory, polled every 0.2 s (context, workspaces, allocator pools: the same poller
# for both), and llm.c's own "device memory usage" line. Logs in OUT (default build/bench/llmc).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
BS=${BS:-16 32 64}; STEPS=${STEPS:-20}; WARM=${WARM:-3}; RECOMPUTE=${RECOMPUTE:-0 1}; LLMC_SM=${LLMC_SM:-90}
BIN=${BIN:-build/train_gpt2_cuda}; OUT=${OUT:-build/bench/llmc}; T=1024
CUDA=${CUDA:-/usr/local/cuda}
W=$REPO/build/llmc
[ -n "${LLMC_DIR:-}" ] && [ -f "${LLMC_DIR}/train_gpt2.cu" ] \
  || { echo "bench_llmc: LLMC_DIR=${LLMC_DIR:-} is not an llm.c checkout (git clone https://github.com/karpathy/llm.c)" >&2; exit 1; }
mkdir -p "$OUT" "$W"
[ -x "$BIN" ] || { echo "bench_llmc: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
python3 bench/bench_llmc_shard.py data/tinyshakespeare_train.bin || exit 1

# NVIDIA libraries from PyTorch's wheels (libcudnn.so.9, libcublasLt.so.13, libnvrtc.so.13) when present
WHEELS=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null)
LIBDIRS=$CUDA/lib64
for so in libcudnn.so.9 libcublasLt.so.13 libnvrtc.so.13; do
  d=$([ -n "$WHEELS" ] && find "$WHEELS" -name "$so" -printf '%h\n' 2>/dev/null | head -1)
  [ -n "$d" ] && LIBDIRS="$LIBDIRS:$d"
done
export LD_LIBRARY_PATH="$LIBDIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$CUDA/bin:$PATH"

# ---- build ----
build() {   # build VARIANT MAKE-ARGS...: $W/train_gpt2cu_VARIANT from the copy in $W/src
  local v=$1; shift
  [ -z "${REBUILD:-}" ] && [ -x "$W/train_gpt2cu_$v" ] && [ "$W/train_gpt2cu_$v" -nt "$LLMC_DIR/train_gpt2.cu" ] && return 0
  echo "bench_llmc: building train_gpt2cu ($v), log $W/build_$v.log"
  (cd "$W/src" && rm -f train_gpt2cu build/cudnn_att.o &&
   make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY="$LLMC_SM" "$@" > "$W/build_$v.log" 2>&1) \
    && cp "$W/src/train_gpt2cu" "$W/train_gpt2cu_$v" \
    || { tail -15 "$W/build_$v.log" >&2; echo "bench_llmc: the $v build failed" >&2; return 1; }
}
if [ -n "${REBUILD:-}" ] || [ ! -d "$W/src" ]; then
  rm -rf "$W/src"; mkdir -p "$W/src"
  (cd "$LLMC_DIR" && tar --exclude=.git -cf - .) | (cd "$W/src" && tar -xf -)
  # CUDA 13: cudaMemAdvise's location is a cudaMemLocation, no longer a device id
  sed -i 's/cudaCheck_(cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId), file, line);/{ cudaMemLocation loc_host = {}; loc_host.type = cudaMemLocationTypeHost; loc_host.id = 0; cudaCheck_(cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, loc_host), file, line); }/' \
    "$W/src/llmc/cuda_utils.cuh"
fi
VARIANTS=""
build nocudnn NVCC_LDFLAGS="-lcublas -lcublasLt" && VARIANTS="nocudnn"
if [ -n "${CUDNN_FRONTEND_DIR:-}" ]; then
  ln -sfn "$CUDNN_FRONTEND_DIR" "$W/src/cudnn-frontend"   # llm.c's Makefile looks for ./cudnn-frontend
  CUDNN_L=""; for d in ${LIBDIRS//:/ }; do [ -e "$d/libcudnn.so.9" ] && CUDNN_L="-L$d -l:libcudnn.so.9"; done
  build cudnn USE_CUDNN=1 NVCC_LDFLAGS="-lcublas -lcublasLt ${CUDNN_L:--lcudnn} -lnvrtc -L$CUDA/lib64/stubs -lcuda" \
    && VARIANTS="cudnn $VARIANTS"
else
  echo "bench_llmc: no CUDNN_FRONTEND_DIR: llm.c without cuDNN attention only"
fi
[ -n "$VARIANTS" ] || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"
echo "llm.c $(cd "$LLMC_DIR" && git rev-parse --short HEAD 2>/dev/null)${CUDNN_FRONTEND_DIR:+, cudnn-frontend $(cd "$CUDNN_FRONTEND_DIR" && git rev-parse --short HEAD 2>/dev/null)}"

# ---- runs ----
poll_mem() {   # poll_mem FILE: every 0.2 s, the compute apps' summed used memory (MiB)
  while :; do
    nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null | awk '{s += $1} END {print s + 0}'
    sleep 0.2
  done > "$1"
}
run_one() {   # run_one NAME B CMD...: prints "RESULT name B exit tok/s median_ms peak_mib llmc_usage_mib"
  local name=$1 b=$2 log="$OUT/$1_B$2.txt"; shift 2
  poll_mem "$log.mem" & local poller=$!
  timeout 300 "$@" > "$log" 2>&1; local rc=$?
  kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null
  python3 - "$log" "$b" "$WARM" "$name" "$rc" <<'PY'
import json, os, re, statistics, sys
log, b, warm, name, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
text = open(log, errors="replace").read()
ms = [float(m) for m in re.findall(r"^step\s+\d+/\d+ \|.*?\| ([0-9.]+) ms \|", text, re.M)]   # llm.c
jl = log[:-4] + "/log.jsonl"                                                                  # train_gpt2
if os.path.exists(jl):
    ms = [json.loads(l)["ms"] for l in open(jl) if l.strip()]
timed = ms[warm:]
med = statistics.median(timed) if timed else float("nan")
peak = max((float(l) for l in open(log + ".mem") if l.strip()), default=0.0)
usage = re.findall(r"device memory usage: (\d+) MiB", text)
print(f"RESULT {name} {b} {rc} {b * 1024 / med * 1000 if timed else float('nan'):.0f} {med:.2f} {peak:.0f} {usage[0] if usage else '-'}")
PY
}
for b in $BS; do
  for v in $VARIANTS; do
    for r in $RECOMPUTE; do
      run_one "llm.c-$v-r$r" "$b" "$W/train_gpt2cu_$v" -i data/tinyshakespeare_train.bin -j data/tinyshakespeare_train.bin \
        -e d12 -b "$b" -t $T -d $((b * T)) -x "$STEPS" -l 6e-4 -u $((STEPS / 10)) -q 0.1 -c 0.1 -r "$r" -v 100000 -m 1 -s 0 -h 0 -n 0 -z 0
    done
  done
  run_one train_gpt2 "$b" "$BIN" -e d12 -b "$b" -t $T -d $((b * T)) -x "$STEPS" -v 0 -g 0 --precision bf16 --quiet -o "$OUT/train_gpt2_B$b"
done | tee "$OUT/results.txt"
echo
echo "GPT-2 124M bf16, T $T, $STEPS steps (median after $WARM); $(cat "$OUT/gpu.txt"); $(date -u +%Y-%m-%d)"
echo "| run | B | exit | tokens/s | step ms | peak MiB (nvidia-smi, process) | llm.c device memory usage MiB |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
grep "^RESULT" "$OUT/results.txt" | while read -r _ name b rc tps med peak usage; do
  echo "| $name | $b | $rc | $tps | $med | $peak | $usage |"
done | tee "$OUT/table.md"
