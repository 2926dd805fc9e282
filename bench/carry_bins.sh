#!/usr/bin/env bash
# Packs the GPU binaries built on this machine into .carry/bins.tar.xz (git-ignored), so that a
# device call can name .carry in `carry` (64 MiB in all) and run them without building there;
# gpu_session.sh and dist_gpu.sh unpack it when NOBUILD=1. Usage: bench/carry_bins.sh [binary...]
# (default: train_gpt2_cuda, bench_kernels and every tests/*_gpu test).
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=(build/train_gpt2_cuda build/bench_kernels $(ls tests/test_*_gpu.cu | sed 's|tests/\(.*\)\.cu|build/tests/\1|'))
for b in "${bins[@]}"; do make -q "$b" || { echo "carry_bins: $b is not up to date (make it first)" >&2; exit 1; }; done
mkdir -p .carry
XZ_OPT="-6 -T2" tar -cJf .carry/bins.tar.xz "${bins[@]}"
du -sh .carry
