#!/usr/bin/env bash
# One call on the GPU machine: the micro-step in a CUDA graph (--cuda-graph, issue 12), tested and
# measured; prints a short table last.
#   1. tests: test_graph_gpu (graph vs eager bit for bit, re-capture, errors in a capture) and
#      test_gpt2_gpu (PyTorch parity), when SKIP does not name "tests"
#   2. resume with graphs on: GPT-2 124M bf16, --deterministic, 2 micro-batches, a run checkpointing
#      every 3 steps against one resumed from its step 3 (tests/resume_check.py: every logged
#      loss, norm and lr after step 3 and the last checkpoint, bit for bit); and the graph run's
#      last checkpoint against an eager (--cuda-graph off) run's
#   3. tok/s and host ms per step (the host's time until the loss read), graph against eager, GPT-2
#      124M bf16, T=1024, 0.5M tokens per step, at B = 4, 16 and the default (measured) micro-batch:
#      the median over the steps after the first two; and a host-bound case (T=128, B=4)
#   4. --recompute none vs gelu (activation recomputation): tok/s and peak reserved memory of GPT-2
#      124M bf16, T=1024, at B = 16, 32, 64; the default's choice at a B that fits only with gelu
# Env: OUT (logs, default /tmp/bt_out), CKPT_DIR (default /tmp/bt_ckpt_graph), STEPS (8),
# SKIP="tests resume time host recompute choice", TESTS (the test binaries to run).
# Binaries: build/ (carried; nothing is built here). Data: data/ or .carry/data.
set -uo pipefail
OUT=${OUT:-/tmp/bt_out}; C=${CKPT_DIR:-/tmp/bt_ckpt_graph}; STEPS=${STEPS:-8}; SKIP=${SKIP:-}
mkdir -p "$OUT" data; rm -rf "$C"; mkdir -p "$C"
cp -n .carry/data/* data/ 2>/dev/null
BIN=./build/train_gpt2_cuda
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" | tee "$OUT/date.txt"
ROWS=()
row() { ROWS+=("$(printf '%-52s | %s' "$1" "$2")"); echo "== $1: $2"; }
ck() { printf '%s/ckpt_%09d.safetensors' "$1" "$2"; }
check() { python3 tests/resume_check.py "$@" 2>&1 | tail -1; }

# ---- 1. tests ----
if [[ " $SKIP " != *" tests "* ]]; then
  for t in ${TESTS:-test_graph_gpu test_recompute_gpu test_gpt2_gpu}; do
    [ -x ./build/tests/$t ] || continue
    timeout 240 ./build/tests/$t > "$OUT/$t.txt" 2>&1; rc=$?
    grep -E "^(FAILED|  FAIL|  SKIP)|differ|captures|parity" "$OUT/$t.txt" | head -20
    row "$t (rc $rc)" "$(tail -1 "$OUT/$t.txt")"
  done
fi

# ---- 2. resume with graphs on ----
D12="-e d12 -b 16 -t 1024 -d 32768 -x 6 -v 3 -m 2 -g 0 --deterministic --quiet --precision bf16"
if [[ " $SKIP " != *" resume "* ]]; then
  timeout 120 $BIN $D12 --ckpt-every 3 --ckpt-keep 0 --ckpt-dir "$C/a" -o "$OUT/res_a" > "$OUT/res_a.txt" 2>&1 || echo "run a failed: $(tail -3 "$OUT/res_a.txt")"
  timeout 120 $BIN $D12 --ckpt-every 3 --ckpt-keep 0 --ckpt-dir "$C/b" -o "$OUT/res_b" --resume "$(ck "$C/a" 3)" > "$OUT/res_b.txt" 2>&1 \
    || echo "run b failed: $(tail -3 "$OUT/res_b.txt")"
  grep -h "cuda graph\|resumed" "$OUT/res_a.txt" "$OUT/res_b.txt"
  row "resume d12 bf16 after step 3, graphs on" "$(check --after 3 --log-a "$OUT/res_a/log.jsonl" --log-b "$OUT/res_b/log.jsonl" \
      --ckpt-a "$(ck "$C/a" 6)" --ckpt-b "$(ck "$C/b" 6)")"
  timeout 120 $BIN $D12 --ckpt-dir "$C/e" --cuda-graph off -o "$OUT/res_e" > "$OUT/res_e.txt" 2>&1 || echo "run e failed: $(tail -3 "$OUT/res_e.txt")"
  row "d12 bf16 6 steps: graph vs eager (--cuda-graph off)" "$(check --after 0 --log-a "$OUT/res_a/log.jsonl" --log-b "$OUT/res_e/log.jsonl" \
      --ckpt-a "$(ck "$C/a" 6)" --ckpt-b "$(ck "$C/e" 6)")"
  rm -rf "$C"
fi

# ---- 3. tok/s and host time, graph vs eager ----
summ() {   # median tok/s, ms and host ms over the steps after the first two; peak reserved MiB
  python3 - "$1" <<'EOF'
import json, statistics, sys
s = [json.loads(l) for l in open(sys.argv[1])][2:]
if not s: print("no steps"); sys.exit()
m = lambda k: statistics.median(x[k] for x in s)
print("%.0f tok/s | %.1f ms/step | host %.1f ms/step | peak reserved %.0f MiB" % (m("tok_per_s"), m("ms"), m("host_ms"), max(x["peak_reserved_mib"] for x in s)))
EOF
}
if [[ " $SKIP " != *" time "* ]]; then
  for b in 4 16 auto; do
    for g in off on; do
      bflag=$([ $b = auto ] && echo "" || echo "-b $b")
      timeout 150 $BIN -e d12 $bflag -t 1024 -x $STEPS -v 0 -g 0 --quiet --cuda-graph $g -o "$OUT/t_${b}_$g" > "$OUT/t_${b}_$g.txt" 2>&1 \
        || echo "run B=$b graph $g failed: $(tail -3 "$OUT/t_${b}_$g.txt")"
      bb=$(grep -o "^B [0-9]*" "$OUT/t_${b}_$g.txt" | head -1)
      row "d12 bf16 $bb (-b $b) graph $g" "$(summ "$OUT/t_${b}_$g/log.jsonl" 2>&1 | tail -1)"
    done
  done
fi
if [[ " $SKIP " != *" host "* ]]; then
  # two micro-steps of B=64 per step: the launch queue never fills, so host_ms is the host's own work
  for g in off on; do
    timeout 120 $BIN -e d12 -b 64 -t 1024 -d 131072 -x $STEPS -v 0 -g 0 --quiet --recompute none --cuda-graph $g -o "$OUT/h64_$g" > "$OUT/h64_$g.txt" 2>&1 \
      || echo "run B=64 graph $g failed: $(tail -3 "$OUT/h64_$g.txt")"
    row "d12 bf16 B 64 (2 micro-steps) graph $g" "$(summ "$OUT/h64_$g/log.jsonl" 2>&1 | tail -1)"
  done
  # a step of many small micro-steps: the GPU's kernels are short, the launches show
  for g in off on; do
    timeout 120 $BIN -e d12 -b 4 -t 128 -d 65536 -x $STEPS -v 0 -g 0 --quiet --cuda-graph $g -o "$OUT/h_$g" > "$OUT/h_$g.txt" 2>&1 \
      || echo "run host-bound graph $g failed: $(tail -3 "$OUT/h_$g.txt")"
    row "d12 bf16 B 4 T 128 (128 micro-steps) graph $g" "$(summ "$OUT/h_$g/log.jsonl" 2>&1 | tail -1)"
  done
fi

# ---- 4. activation recomputation ----
if [[ " $SKIP " != *" recompute "* ]]; then
  for b in 16 32 64; do
    for r in none gelu; do
      timeout 120 $BIN -e d12 -b $b -t 1024 -d 131072 -x 6 -v 0 -g 0 --quiet --recompute $r -o "$OUT/r_${b}_$r" > "$OUT/r_${b}_$r.txt" 2>&1 \
        || echo "run B=$b recompute $r failed: $(tail -3 "$OUT/r_${b}_$r.txt")"
      row "d12 bf16 B $b recompute $r" "$(summ "$OUT/r_${b}_$r/log.jsonl" 2>&1 | tail -1)"
    done
  done
fi
if [[ " $SKIP " != *" choice "* ]]; then
  # B=192: fits without recomputation (~300 MiB per sequence); the default should pick none
  timeout 150 $BIN -e d12 -b 192 -t 1024 -d 196608 -x 4 -v 0 -g 0 --quiet -o "$OUT/r_192_default" > "$OUT/r_192_default.txt" 2>&1 \
    || echo "run B=192 default failed: $(tail -3 "$OUT/r_192_default.txt")"
  grep -h "^recompute\|^B " "$OUT/r_192_default.txt"
  row "d12 bf16 B 192 default ($(grep -o '^recompute: [a-z]*' "$OUT/r_192_default.txt"))" "$(summ "$OUT/r_192_default/log.jsonl" 2>&1 | tail -1)"
  # what the linear memory model refused: does B=192 run without recomputation?
  timeout 150 $BIN -e d12 -b 192 -t 1024 -d 196608 -x 4 -v 0 -g 0 --quiet --recompute none -o "$OUT/r_192_none" > "$OUT/r_192_none.txt" 2>&1
  row "d12 bf16 B 192 --recompute none (rc $?)" "$(summ "$OUT/r_192_none/log.jsonl" 2>&1 | tail -1) $(grep -o 'out of memory[^(]*' "$OUT/r_192_none.txt" | head -1)"
  # B=256: too large without recomputation on an 80 GB GPU; the default should pick gelu and run
  for r in default none; do
    rflag=$([ $r = default ] && echo "" || echo "--recompute $r")
    timeout 150 $BIN -e d12 -b 256 -t 1024 -d 262144 -x 4 -v 0 -g 0 --quiet $rflag -o "$OUT/r_256_$r" > "$OUT/r_256_$r.txt" 2>&1
    rc=$?
    grep -h "^recompute" "$OUT/r_256_$r.txt"
    row "d12 bf16 B 256 $r (rc $rc$(grep -o ', recompute gelu' "$OUT/r_256_$r.txt" | head -1))" "$(summ "$OUT/r_256_$r/log.jsonl" 2>&1 | tail -1) $(grep -o 'out of memory[^(]*' "$OUT/r_256_$r.txt" | head -1)"
  done
fi

echo
echo "==== summary ($(cat "$OUT/gpu.txt" | head -1); $(cat "$OUT/date.txt")) ===="
printf '%s\n' "${ROWS[@]}"
