#!/usr/bin/env bash
# One call on the GPU machine: train_gpt2's checkpoints tested and measured (issue 10). Prints a
# short table last.
#   1. bit-exact resume of GPT-2 124M in bf16 and fp32 (--deterministic, T=1024, 2 micro-batches,
#      validation every 4 steps): an uninterrupted run checkpointing every 4 steps against one
#      resumed from its checkpoint of step 4 (tests/resume_check.py: every logged loss, norm and
#      learning rate after step 4 and the checkpoints of steps 8 and STEPS, bit for bit); and two
#      fresh --deterministic runs against each other
#   2. kill -9 at a random step, then --resume auto: the uninterrupted run's losses and final state
#   3. with 2 or more GPUs: the same resume with --nproc 2 for --dp ddp, zero1 and zero2; a resume
#      with another world size refused; a weights-only restart (--init-from) on 1 GPU
#   4. the asynchronous save's stall: GPT-2 124M bf16 at its default batch (0.5M tokens, measured
#      micro-batch), a checkpoint every 5 steps: the host stall of each snapshot, the time of each
#      save and its speed, the step time next to the steps right after a snapshot (the device-side
#      wait for the copies), and dd's write speed on the same disk
#   5. the CUDA test of bt_ckpt.h and tests/hf_interop.py (transformers both ways, on the GPU and the
#      CPU) when python3 has transformers
# Env: OUT (logs, default /tmp/bt_out), CKPT_DIR (the 1.5 GB checkpoints: keep them out of $OUT,
# default /tmp/bt_ckpt_gpu), STEPS (12), NOBUILD=1 (use the binaries in build/), SKIP="stall hf ...".
# Data: data/ from .carry/data when present (bench/carry_data.sh), else make data.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; C=${CKPT_DIR:-/tmp/bt_ckpt_gpu}; STEPS=${STEPS:-12}; SKIP=${SKIP:-}
mkdir -p "$OUT" data; rm -rf "$C"; mkdir -p "$C"
cp -n .carry/data/* data/ 2>/dev/null
BIN=./build/train_gpt2_cuda
NVCC=nvcc; command -v nvcc >/dev/null || NVCC=/usr/local/cuda/bin/nvcc
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
NG=$(nvidia-smi -L | wc -l)
[ -z "${NOBUILD:-}" ] && make -j16 NVCC_PATH=$NVCC build/train_gpt2_cuda build/hf_logits_cuda build/tests/test_ckpt_gpu 2>&1 | grep -E "error" | head
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe

ROWS=()
row() { ROWS+=("$(printf '%-46s | %s' "$1" "$2")"); echo "== $1: $2"; }
ck() { printf '%s/ckpt_%09d.safetensors' "$1" "$2"; }
# the last line of resume_check.py, or why it could not run
check() { python3 tests/resume_check.py "$@" 2>&1 | tail -1; }
D12="-e d12 -b 16 -t 1024 -d 32768 -x $STEPS -v 4 -m 2 -g 0 --deterministic --quiet"

# ---- 1. bit-exact resume, bf16 and fp32 ----
for p in bf16 fp32; do
  $BIN $D12 --precision $p --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/${p}_a" -o "$OUT/${p}_a" > "$OUT/${p}_a.txt" 2>&1 \
    || echo "run ${p}_a failed: $(tail -3 "$OUT/${p}_a.txt")"
  $BIN $D12 --precision $p --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/${p}_b" -o "$OUT/${p}_b" --resume "$(ck "$C/${p}_a" 4)" \
    > "$OUT/${p}_b.txt" 2>&1 || echo "run ${p}_b failed: $(tail -3 "$OUT/${p}_b.txt")"
  row "resume d12 $p after step 4" "$(check --after 4 --log-a "$OUT/${p}_a/log.jsonl" --log-b "$OUT/${p}_b/log.jsonl" \
      --ckpt-a "$(ck "$C/${p}_a" 8)" --ckpt-b "$(ck "$C/${p}_b" 8)" --ckpt-a "$(ck "$C/${p}_a" "$STEPS")" --ckpt-b "$(ck "$C/${p}_b" "$STEPS")")"
  rm -rf "$C/${p}_b"
done
$BIN $D12 --precision bf16 -o "$OUT/bf16_fresh" > "$OUT/bf16_fresh.txt" 2>&1
row "two fresh --deterministic runs, bf16" "$(check --after 0 --log-a "$OUT/bf16_a/log.jsonl" --log-b "$OUT/bf16_fresh/log.jsonl")"

# ---- 2. kill -9 at a random step, --resume auto ----
k=$((2 + RANDOM % (STEPS - 3)))
$BIN $D12 --precision bf16 --ckpt-every 2 --ckpt-dir "$C/kill" -o "$OUT/kill" > "$OUT/kill.txt" 2>&1 &
pid=$!
while [ "$(cat "$OUT/kill/log.jsonl" 2>/dev/null | wc -l)" -lt "$k" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
killed_at=$(cat "$OUT/kill/log.jsonl" | wc -l)
$BIN $D12 --precision bf16 --ckpt-every 2 --ckpt-dir "$C/kill" --resume auto -o "$OUT/kill2" > "$OUT/kill2.txt" 2>&1
from=$(grep -o 'after step [0-9]*' "$OUT/kill2.txt" | grep -o '[0-9]*$'); from=${from:-0}
row "kill -9 after step $killed_at, resume auto (from $from)" "$(check --after "$from" --log-a "$OUT/bf16_a/log.jsonl" \
    --log-b "$OUT/kill2/log.jsonl" --ckpt-a "$(ck "$C/bf16_a" "$STEPS")" --ckpt-b "$(ck "$C/kill" "$STEPS")")"
rm -rf "$C/kill" "$C/fp32_a"

# ---- 3. two GPUs ----
if [ "$NG" -ge 2 ]; then
  D2="--nproc 2 -e d12 -b 8 -t 1024 -d 32768 -x $STEPS -v 4 -m 2 -g 0 --deterministic --quiet --precision bf16"
  for m in ddp zero1 zero2; do
    $BIN $D2 --dp $m --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/${m}_a" -o "$OUT/${m}_a" > "$OUT/${m}_a.txt" 2>&1 \
      || echo "run ${m}_a failed: $(tail -3 "$OUT/${m}_a.txt")"
    $BIN $D2 --dp $m --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/${m}_b" -o "$OUT/${m}_b" --resume "$(ck "$C/${m}_a" 4)" \
      > "$OUT/${m}_b.txt" 2>&1 || echo "run ${m}_b failed: $(tail -3 "$OUT/${m}_b.txt")"
    row "resume 2 GPUs --dp $m after step 4" "$(check --after 4 --log-a "$OUT/${m}_a/log.jsonl" --log-b "$OUT/${m}_b/log.jsonl" \
        --ckpt-a "$(ck "$C/${m}_a" "$STEPS")" --ckpt-b "$(ck "$C/${m}_b" "$STEPS")")"
    rm -rf "$C/${m}_b"
  done
  $BIN -e d12 -b 8 -t 1024 -d 32768 -x "$STEPS" -v 4 -m 2 -g 0 --deterministic --precision bf16 --resume "$(ck "$C/zero1_a" 4)" \
    > "$OUT/world1.txt" 2>&1; rc=$?
  row "resume on 1 GPU of a 2-GPU checkpoint" "exit $rc (want 1): $(grep -o 'train.world = [0-9]*' "$OUT/world1.txt" | head -1)"
  $BIN -b 16 -t 1024 -d 32768 -x 3 -v 0 -g 0 --init-from "$(ck "$C/zero1_a" "$STEPS")" -o "$OUT/weights1" > "$OUT/weights1.txt" 2>&1; rc=$?
  row "--init-from a zero1 checkpoint on 1 GPU, 3 steps" "exit $rc (want 0), $(grep -o 'loss [0-9.]*' "$OUT/weights1.txt" | tail -1)"
  rm -rf "$C"/ddp_a "$C"/zero1_a "$C"/zero2_a
else
  row "2 GPUs (ddp, zero1, zero2)" "skipped: $NG GPU"
fi
rm -rf "$C/bf16_a"

# ---- 4. the stall of asynchronous saves at the default batch ----
if [[ " $SKIP " != *" stall "* ]]; then
  $BIN -e d12 -x 20 -v 0 -g 0 --ckpt-every 5 --ckpt-keep 2 --ckpt-dir "$C/stall" -o "$OUT/stall" > "$OUT/stall.txt" 2>&1
  grep -E "^checkpoint |auto micro-batch" "$OUT/stall.txt"
  python3 - "$OUT/stall/log.jsonl" > "$OUT/stall_summary.txt" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
snap = [r for r in rows if "ckpt_stall_ms" in r]
saves = [r for r in rows if "ckpt_save_ms" in r]
after = {r["step"] + 1 for r in snap}
steady = [r["ms"] for r in rows[2:] if r["step"] not in after]
post = [r["ms"] for r in rows if r["step"] in after]
print("stall per snapshot (ms): " + ", ".join(f"step {r['step']}: {r['ckpt_stall_ms']:.1f}" for r in snap)
      + f"; total {snap[-1]['ckpt_stall_total_ms']:.1f}" if snap else "no snapshot logged")
print("saves: " + ", ".join(f"step {r['ckpt_saved_step']}: {r['ckpt_save_ms']:.0f} ms, {r['ckpt_mb_per_s']:.0f} MB/s" for r in saves))
if steady and post:
    print(f"step ms: median {statistics.median(steady):.1f} (steps without a snapshot before), "
          f"{statistics.median(post):.1f} (steps right after one: the device waits for the copies before the update)")
warm = [r["ckpt_stall_ms"] for r in snap[1:]]
print(f"STALL first {snap[0]['ckpt_stall_ms']:.1f} ms (allocates the pinned staging), then max {max(warm) if warm else float('nan'):.1f} ms; "
      f"total {snap[-1]['ckpt_stall_total_ms']:.0f} ms over {len(snap)} snapshots" if snap else "STALL none")
EOF
  cat "$OUT/stall_summary.txt"
  row "async stall, d12 bf16 0.5M-token batch" "$(grep '^STALL' "$OUT/stall_summary.txt" | cut -c7-)"
  row "save time and speed" "$(grep '^saves' "$OUT/stall_summary.txt" | cut -c8- | cut -c1-110)"
  row "step time, plain vs right after a snapshot" "$(grep '^step ms' "$OUT/stall_summary.txt" | cut -c10- | cut -c1-110)"
  dd if=/dev/zero of="$C/dd.bin" bs=64M count=24 conv=fdatasync 2> "$OUT/dd.txt"
  row "dd 1.6 GB write + fdatasync, same disk" "$(tail -1 "$OUT/dd.txt" | awk -F, '{print $NF}')"
  rm -rf "$C/stall" "$C/dd.bin"
fi

# ---- 5. bt_ckpt.h's CUDA test, Hugging Face interop ----
timeout 600 build/tests/test_ckpt_gpu > "$OUT/test_ckpt_gpu.txt" 2>&1
row "build/tests/test_ckpt_gpu" "$(tail -1 "$OUT/test_ckpt_gpu.txt")"
if [[ " $SKIP " != *" hf "* ]] && python3 -c 'import transformers, safetensors, numpy' 2>/dev/null; then
  for d in cuda cpu; do
    timeout 900 python3 tests/hf_interop.py --train "$BIN" --logits build/hf_logits_cuda --device $d --out "$C/hf_$d" > "$OUT/hf_$d.txt" 2>&1
    grep -E "^(ok|FAIL)" "$OUT/hf_$d.txt"
    row "tests/hf_interop.py --device $d" "$(tail -1 "$OUT/hf_$d.txt")"
  done
else
  row "tests/hf_interop.py" "skipped (no transformers/safetensors/numpy in python3, or SKIP)"
fi
rm -rf "$C"

echo
echo "=== train_gpt2 checkpoints on $(head -1 "$OUT/gpu.txt" | cut -d, -f1), $(date -u +%Y-%m-%d)"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/summary.txt"
