#!/usr/bin/env bash
# bench_ckpt_train.sh - what asynchronous checkpoints cost a training run (part of make bench-ckpt, on a
# machine with a GPU): GPT-2 124M bf16 at train_gpt2's default batch (0.5M tokens, micro-batch
# measured), a checkpoint every 5 steps of 20: the host stall of each snapshot, each save's time and
# speed, the step time of the steps right after a snapshot (the device waits for the snapshot's copies
# before the optimizer step) against the others, and dd's write speed on the same disk.
#   bash bench/bench_ckpt_train.sh [BINARY]     (default build/train_gpt2_cuda, made first; CKPT_DIR:
#                                                where the 1.5 GB files go, default /tmp/bt_bench_ckpt_train)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -gt 0 ] || MAKEFLAGS='' make -s build/train_gpt2_cuda || exit 1
BIN=${1:-build/train_gpt2_cuda}; C=${CKPT_DIR:-/tmp/bt_bench_ckpt_train}; OUT=${OUT:-build/bench/ckpt}
[ -x "$BIN" ] || { echo "bench_ckpt_train: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
mkdir -p "$OUT"; rm -rf "$C" "$OUT/stall"; mkdir -p "$C"
echo "train_gpt2 -x 20 --ckpt-every 5 on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%Y-%m-%d)"
timeout 600 "$BIN" -x 20 -v 0 -g 0 --ckpt-every 5 --ckpt-keep 2 --ckpt-dir "$C" -o "$OUT/stall" > "$OUT/stall.txt" 2>&1 \
  || { echo "bench_ckpt_train: the run exited $?: $(tail -3 "$OUT/stall.txt")" >&2; exit 1; }
grep -E "^checkpoint |auto micro-batch" "$OUT/stall.txt"
python3 - "$OUT/stall/log.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
snap = [r for r in rows if "ckpt_stall_ms" in r]
saves = [r for r in rows if "ckpt_save_ms" in r]
after = {r["step"] + 1 for r in snap}
steady = [r["ms"] for r in rows[2:] if r["step"] not in after]
post = [r["ms"] for r in rows if r["step"] in after]
if not snap:
    sys.exit("no snapshot logged")
warm = [r["ckpt_stall_ms"] for r in snap[1:]]
print(f"host stall per snapshot: first {snap[0]['ckpt_stall_ms']:.1f} ms, then at most {max(warm, default=float('nan')):.1f} ms; "
      f"{snap[-1]['ckpt_stall_total_ms']:.1f} ms over {len(snap)} snapshots")
print("saves: " + ", ".join(f"step {r['ckpt_saved_step']}: {r['ckpt_save_ms']:.0f} ms, {r['ckpt_mb_per_s']:.0f} MB/s" for r in saves))
if steady and post:
    print(f"step ms, median: {statistics.median(steady):.1f} plain, {statistics.median(post):.1f} right after a snapshot")
PY
dd if=/dev/zero of="$C/dd.bin" bs=64M count=24 conv=fdatasync 2> "$OUT/dd.txt"
echo "dd, 1.6 GB + fdatasync on the same disk: $(tail -1 "$OUT/dd.txt" | awk -F, '{print $NF}')"
rm -rf "$C"
