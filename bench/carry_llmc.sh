#!/usr/bin/env bash
# Builds llm.c's train_gpt2cu for sm_90 with nvcc 13 here (with cuDNN attention and without) from a
# fetched copy OUTSIDE the repository, and packs the two binaries and the token shards into
# .carry/llmc.tar.xz (git-ignored) for bench/llmc_gpu.sh on the GPU machine. Nothing of llm.c or
# cudnn-frontend enters the repository: only this script's build commands and the one-line CUDA 13
# fix below, applied to the scratch copy.
# Usage: bash bench/carry_llmc.sh            (from any directory; writes <repo>/.carry/llmc.tar.xz)
#   env: LLMC_SRC=/work/llmc-src holding llm.c/ and cudnn-frontend/ (clones of the `fetch` tool's
#        mirrors of karpathy/llm.c and NVIDIA/cudnn-frontend); CARRY_DIR=<repo>/.carry; REBUILD=1
# Build (single GPU: no MPI, no NCCL; llm.c's Makefile with these overrides):
#   make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 NVCC_LDFLAGS="-lcublas -lcublasLt"
#   make train_gpt2cu USE_CUDNN=1 ... NVCC_LDFLAGS="-lcublas -lcublasLt -lcudnn -lnvrtc -L$CUDA/lib64/stubs -lcuda"
# What CUDA 13 / this machine need changed:
#   1. llmc/cuda_utils.cuh: cudaMemAdvise takes a cudaMemLocation in CUDA 13, not a device id
#      (cudaCpuDeviceId): the managed-memory fallback now names {cudaMemLocationTypeHost, 0}.
#   2. -lnvidia-ml dropped from the link: this toolkit has neither nvml.h nor libnvidia-ml, so
#      llm.c's mfu.h compiles NVML out already (it is only its -lg GPU-utilisation logging).
#   3. cuDNN build: cudnn-frontend 1.23's experimental kernels call NVRTC and the driver API, so
#      -lnvrtc -lcuda are linked too (-lcuda against the toolkit's stub: the driver's libcuda.so.1
#      is used at run time); the Makefile only looks for ./cudnn-frontend, so a link is made there.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
LLMC_SRC=${LLMC_SRC:-/work/llmc-src}
CARRY_DIR=${CARRY_DIR:-$REPO/.carry}
CUDA=${CUDA:-/usr/local/cuda}
L=$LLMC_SRC/llm.c
BIN=$LLMC_SRC/bin
case "$LLMC_SRC/" in "$REPO"/*) echo "carry_llmc: LLMC_SRC=$LLMC_SRC is inside the repository; keep llm.c outside it" >&2; exit 1 ;; esac
for d in "$L/llmc" "$LLMC_SRC/cudnn-frontend/include"; do
  [ -d "$d" ] || { echo "carry_llmc: $d missing: fetch karpathy/llm.c and NVIDIA/cudnn-frontend (the fetch tool) and" \
                        "git clone the mirrors into $LLMC_SRC/llm.c and $LLMC_SRC/cudnn-frontend" >&2; exit 1; }
done

# fix 1, idempotent: the CUDA 12 call has a device id where CUDA 13 wants a location
fix_memadvise() {
  local f=$L/llmc/cuda_utils.cuh
  if grep -q "cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)" "$f"; then
    sed -i 's/cudaCheck_(cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId), file, line);/{ cudaMemLocation loc_host = {}; loc_host.type = cudaMemLocationTypeHost; loc_host.id = 0; cudaCheck_(cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, loc_host), file, line); }/' "$f"
    echo "carry_llmc: patched $f (cudaMemAdvise location, CUDA 13)"
  fi
}

build() {   # build VARIANT MAKE-ARGS...: one train_gpt2cu, copied to $BIN/train_gpt2cu_VARIANT
  local v=$1; shift
  [ -z "${REBUILD:-}" ] && [ -x "$BIN/train_gpt2cu_$v" ] && [ "$BIN/train_gpt2cu_$v" -nt "$L/train_gpt2.cu" ] && return 0
  echo "carry_llmc: building train_gpt2cu ($v) in $L"
  (cd "$L" && rm -f train_gpt2cu build/cudnn_att.o &&
   make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 "$@" > "$LLMC_SRC/build_$v.log" 2>&1) ||
    { tail -20 "$LLMC_SRC/build_$v.log" >&2; echo "carry_llmc: build ($v) failed, log $LLMC_SRC/build_$v.log" >&2; exit 1; }
  mkdir -p "$BIN"; cp "$L/train_gpt2cu" "$BIN/train_gpt2cu_$v"
}

fix_memadvise
ln -sfn "$LLMC_SRC/cudnn-frontend" "$L/cudnn-frontend"
export PATH="$CUDA/bin:$PATH"
build nocudnn NVCC_LDFLAGS="-lcublas -lcublasLt"
build cudnn USE_CUDNN=1 NVCC_LDFLAGS="-lcublas -lcublasLt -lcudnn -lnvrtc -L$CUDA/lib64/stubs -lcuda"

# the package: llmc/{train_gpt2cu_cudnn,train_gpt2cu_nocudnn,data/llmc_train.bin,data/llmc_val.bin}
STAGE=$(mktemp -d); trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/llmc/data"
cp "$BIN/train_gpt2cu_cudnn" "$BIN/train_gpt2cu_nocudnn" "$STAGE/llmc/"
(cd "$REPO" && make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin)
python3 "$REPO/bench/llmc_data.py" "$REPO/data/tinyshakespeare_train.bin" "$STAGE/llmc/data/llmc_train.bin"
python3 "$REPO/bench/llmc_data.py" "$REPO/data/tinyshakespeare_val.bin" "$STAGE/llmc/data/llmc_val.bin"
(cd "$L" && git rev-parse HEAD | sed 's/^/llm.c /'; cd "$LLMC_SRC/cudnn-frontend" && git rev-parse HEAD | sed 's/^/cudnn-frontend /') > "$STAGE/llmc/VERSIONS"
mkdir -p "$CARRY_DIR"
XZ_OPT="-6 -T2" tar -cJf "$CARRY_DIR/llmc.tar.xz" -C "$STAGE" llmc
echo "carry_llmc: $CARRY_DIR/llmc.tar.xz, $(stat -c %s "$CARRY_DIR/llmc.tar.xz" | awk '{printf "%.1f", $1 / 1e6}') MB"
