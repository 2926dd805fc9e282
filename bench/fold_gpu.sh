#!/usr/bin/env bash
# The bf16 step's hot spots at the default micro-batch (B = 128), one device call per mode; run
# from the repository root of an unpacked tarball holding build/ (binaries built on the dev
# machine) and data/. Modes:
#   profile   the default run once; every GEMM of a B=128 micro-step timed with cuBLASLt's whole
#             heuristic list (build/bench_gemm) and each GEMM's kernel name (ncu); ncu over a
#             3-step run at B=128 and at B=16, the third step summed per kernel (bench/fold_profile.py)
#   ab OLD NEW  the GPU tests given in TESTS, then the default run alternating OLD and NEW binaries
#             (ROUNDS rounds), median tok/s of steps 4-8 of each
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT"
mode=${1:-profile}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
date -u +"%Y-%m-%d %H:%M UTC"
DEFAULT="-x 8 -v 0 -g 0"
tps() { grep -o '[0-9]* tok/s' "$1" | tail -5 | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }

if [ "$mode" = profile ]; then
  timeout 200 ./build/train_gpt2_cuda $DEFAULT > "$OUT/default.txt" 2>&1; echo "default run exit $?"
  grep -E "auto micro|step +[0-9]" "$OUT/default.txt" | tail -6
  timeout 150 ./build/bench_gemm 128 2668 10672 > "$OUT/gemm.txt" 2>&1; echo "bench_gemm exit $?"
  BT_GEMM_NAMES=1 timeout 150 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
      ./build/bench_gemm 128 2668 10672 2>/dev/null | grep '"gpu__time_duration.sum"' | awk -F'","' '{print $5}' | cut -c1-110 > "$OUT/gemm_names.txt"
  for B in 128 16; do
    timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
        ./build/train_gpt2_cuda -e d12 -b $B -t 1024 -d $((B * 1024)) -x 3 -v 0 -g 0 --precision bf16 --quiet 2>/dev/null > "$OUT/ncu_b$B.csv"
    echo "ncu B=$B exit $?"
    python3 bench/fold_profile.py "$OUT/ncu_b$B.csv" > "$OUT/profile_b$B.txt" 2>&1
    xz -T2 "$OUT/ncu_b$B.csv"
  done
  echo "=== kernels per GEMM (pick6 algorithm; bench_marker(i) precedes GEMM i)"; grep -E '^[a-z].*: M [0-9]' "$OUT/gemm.txt" | cut -d: -f1 | cat -n
  cat "$OUT/gemm_names.txt"
  echo "=== GEMM table"; sed -n '/^| GEMM/,$p' "$OUT/gemm.txt"
  echo "=== profile B=16"; head -30 "$OUT/profile_b16.txt"
  echo "=== profile B=128"; cat "$OUT/profile_b128.txt"
  echo "=== default run"; grep -E "auto micro|step +[0-9]" "$OUT/default.txt" | tail -6
fi

if [ "$mode" = ab ]; then
  # ab OLD NEW: TESTS (binaries, each may be "ENV=v:binary"), then ROUNDS alternating rounds of
  # the default run, then NEW once under each of VARIANTS (space-separated VAR=value), then
  # bench_kernels groups KGROUPS and an ncu profile of NEW at B=128 when PROF=1
  OLD=$2; NEW=$3; ROUNDS=${ROUNDS:-2}
  W=/tmp/fold_work; rm -rf $W; mkdir -p $W   # everything here; a few files go back under $OUT
  if [ -n "${D12:-}" ]; then
    timeout 120 python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin 2>&1 | tail -1
    export BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin
  fi
  for t in ${TESTS:-}; do
    envs=""; bin=$t; case "$t" in *:*) envs=${t%%:*}; bin=${t#*:} ;; esac
    f="$W/t_$(basename $bin)_${envs//[^A-Za-z0-9]/_}.txt"
    env $envs timeout 300 $bin > "$f" 2>&1; echo "$envs $(basename $bin) exit $?: $(tail -1 "$f")" | tee -a "$W/tests.txt"
  done
  if [ -n "${BENCHGEMM:-}" ]; then   # BENCHGEMM="128 10672": bench_gemm's table (the alternative layouts included)
    timeout 150 ./build/bench_gemm $BENCHGEMM > "$OUT/gemm.txt" 2>&1; echo "bench_gemm exit $?"
  fi
  for g in ${KGROUPS:-}; do BT_BENCH_ONLY=$g BT_BENCH_TORCH=0 timeout 120 ./build/bench_kernels 2>&1 | grep -E "^(cross_entropy|sum_rows|layernorm|ceilings)" >> "$W/kernels.txt"; done
  for r in $(seq 1 "$ROUNDS"); do
    for b in "$OLD" "$NEW"; do
      f="$W/run_$(basename $b)_r$r.txt"
      timeout 200 $b $DEFAULT > "$f" 2>&1
      echo "round $r $(basename $b): exit $? median tok/s (steps 4-8) $(tps "$f") | $(grep -E '^step +8' "$f" | cut -c1-120)"
    done
  done | tee "$W/ab.txt"
  for v in ${VARIANTS:-}; do
    f="$W/run_var_${v//[^A-Za-z0-9]/_}.txt"
    env ${v//,/ } timeout 200 $NEW $DEFAULT > "$f" 2>&1   # a variant: VAR=v[,VAR2=w...]
    echo "variant $v $(basename $NEW): exit $? median tok/s (steps 4-8) $(tps "$f") | $(grep -E '^step +8' "$f" | cut -c1-120)"
  done | tee -a "$W/ab.txt"
  if [ "${PROF:-0}" = 1 ]; then
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
        $NEW -e d12 -b 128 -t 1024 -d 131072 -x 3 -v 0 -g 0 --precision bf16 --quiet 2>/dev/null > /tmp/ncu_new.csv
    python3 bench/fold_profile.py /tmp/ncu_new.csv > "$W/profile_new_b128.txt" 2>&1
  fi
  echo "=== kernels"; cat "$W/kernels.txt" 2>/dev/null
  [ -f "$W/profile_new_b128.txt" ] && { echo "=== profile NEW B=128"; head -32 "$W/profile_new_b128.txt"; }
  [ -f "$OUT/gemm.txt" ] && { echo "=== bench_gemm"; grep -E "^\| (alt|ref|plain|fwd fc|bwd dh|bwd fc dW1|bwd qkv dW|bwd fcproj dW|bwd attproj dW)" "$OUT/gemm.txt"; }
  echo "=== summary"; cat "$W/tests.txt" 2>/dev/null; grep -h "parity" "$W"/t_test_gpt2_gpu*.txt 2>/dev/null | head -8; cat "$W/ab.txt"
  cp "$W/tests.txt" "$W/ab.txt" "$OUT/" 2>/dev/null; cp "$W/kernels.txt" "$W/profile_new_b128.txt" "$OUT/" 2>/dev/null
  for f in "$W"/t_*.txt; do echo "== $f"; tail -60 "$f"; done > "$OUT/tests_full.txt" 2>/dev/null
  for f in "$W"/run_*.txt; do echo "== $f"; cat "$f"; done > "$OUT/runs_full.txt" 2>/dev/null
fi
