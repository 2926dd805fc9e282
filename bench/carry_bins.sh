#!/usr/bin/env bash
# Packs the GPU binaries built on this machine into .carry/bins.tar.xz (git-ignored), so that a
# device call can name .carry in `carry` (64 MiB in all) and run them without building there;
# gpu_session.sh, dist_gpu.sh and mlir_gpu.sh unpack it when NOBUILD=1. Usage: bench/carry_bins.sh [binary...]
# (default: train_gpt2_cuda, bench_kernels and every tests/*_gpu test). `mlir` stands for what
# bench/mlir_gpu.sh runs: the MLIR-linked builds under build/mlir (make MLIR=1 BUILD=build/mlir ...),
# the plain ones that load kernels compiled ahead of time, and build/mlir_aot (make mlir-aot).
set -euo pipefail
cd "$(dirname "$0")/.."
MLIR_BINS=(build/mlir/tests/test_mlir_gpu build/mlir/train_gpt2_cuda build/mlir/train_llama_cuda build/mlir/bench_mlir
           build/tests/test_mlir_gpu build/train_gpt2_cuda build/train_llama_cuda build/mlir_aot)
bins=()
for a in "$@"; do if [ "$a" = mlir ]; then bins+=("${MLIR_BINS[@]}"); else bins+=("$a"); fi; done
[ ${#bins[@]} -eq 0 ] && bins=(build/train_gpt2_cuda build/bench_kernels $(ls tests/test_*_gpu.cu | sed 's|tests/\(.*\)\.cu|build/tests/\1|'))
for b in "${bins[@]}"; do
  if [ -d "$b" ]; then continue; fi                     # a folder (build/mlir_aot) goes as it is
  case "$b" in build/mlir/*) mk=(make -q MLIR=1 BUILD=build/mlir) ;; *) mk=(make -q) ;; esac
  "${mk[@]}" "$b" || { echo "carry_bins: $b is not up to date (${mk[*]/-q/} $b first)" >&2; exit 1; }
done
mkdir -p .carry
XZ_OPT="-6 -T2" tar -cJf .carry/bins.tar.xz "${bins[@]}"
du -sh .carry
