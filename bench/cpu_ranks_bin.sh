#!/usr/bin/env bash
# cpu_ranks_bin.sh - a CPU stand-in for build/train_gpt2_cuda in the GPU scripts' smoke tests
# (bench/zerotp_gpu.sh, bench/tpcomp_gpu.sh with BIN=bench/cpu_ranks_bin.sh): `--nproc N ARGS`
# starts N ranks of build/train_gpt2_cpu with the launcher variables (tp/cp on CPUs go through
# the TCP store and need ranks started that way), without `--nproc` one process. `--dp X` is
# dropped: tp/cp on CPUs refuse ZeRO, and the smoke test checks a script's plumbing, not ZeRO.
set -uo pipefail
BIN="$(dirname "$0")/../build/train_gpt2_cpu"
nproc=1 args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc) nproc=$2; shift 2 ;;
    --dp) shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ "$nproc" -eq 1 ] && exec "$BIN" "${args[@]}"
port=$(( 20000 + RANDOM % 20000 )) pids=()
for ((r = 0; r < nproc; r++)); do
  RANK=$r WORLD_SIZE=$nproc LOCAL_RANK=$r LOCAL_WORLD_SIZE=$nproc MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    "$BIN" "${args[@]}" & pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=$?; done
exit $fail
