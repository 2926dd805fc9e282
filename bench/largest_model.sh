#!/usr/bin/env bash
# largest_model.sh - the largest GPT-2-shaped model one GPU trains: PyTorch (activation
# checkpointing per block, fused AdamW, no offload) against train_gpt2 (--recompute block, bf16
# gradients, --offload adamw), in one run on one GPU (make bench-largest).
#
#   make bench-largest [TORCH_LAYERS="32 34 36 38 40 42 44 46 48"] [TORCH_WIDTH=4096] [OURS="d44w5120 d40w5120"]
#                      [STEPS=50] [TORCH=0]
#
#   PyTorch: bench/bench_gpt2_torch.py --config dLw$TORCH_WIDTH (L layers of width C, heads of 128,
#            made on the GPU) for each L of TORCH_LAYERS in turn, B 1 T 1024 bf16 autocast,
#            --recompute block (torch.utils.checkpoint around each block), 3 steps after 1 of warm-up,
#            PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (its least fragmented allocator); it
#            stops at the first L that runs out of memory. The largest that trained is PyTorch's.
#   ours:    build/train_gpt2_cuda -e MODEL for each MODEL of OURS in turn: B 1 T 1024, STEPS steps
#            on Tiny Shakespeare at lr 3e-5, bf16, --grad-dtype bf16 --recompute block --offload
#            adamw: on the GPU the fp32 weights (4 bytes a parameter), their bf16 copy (2) and the
#            bf16 gradients (2); in pinned host memory AdamW's m and v (8). The models of OURS are
#            tried in turn (largest first) until one trains: a run that finishes with the mean loss
#            of its last 10 steps below its first step's.
#   Host memory (free -g) and the GPU are printed first; the table last (parameters, peak GPU
#   memory, host memory pinned, step time, first and last losses). OUT: build/bench/largest.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
TORCH_LAYERS=${TORCH_LAYERS:-32 34 36 38 40 42 44 46 48}; TORCH_WIDTH=${TORCH_WIDTH:-4096}; OURS=${OURS:-d44w5120 d40w5120}
STEPS=${STEPS:-50}; TORCH=${TORCH:-1}; BIN=${BIN:-build/train_gpt2_cuda}; OUT=${OUT:-build/bench/largest}
mkdir -p "$OUT"; rm -f "$OUT/torch.jsonl" "$OUT"/ours_*.txt
[ -x "$BIN" ] || { echo "largest_model: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"
free -g | sed -n 2p | tee "$OUT/host.txt"
date -u +%Y-%m-%d | tee "$OUT/date.txt"
if [ "$TORCH" = 1 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  for L in $TORCH_LAYERS; do
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 600 python3 bench/bench_gpt2_torch.py --config "d${L}w$TORCH_WIDTH" \
      --B 1 --T 1024 --precision bf16 --recompute block --steps 3 --warmup 1 --json-out "$OUT/torch.jsonl" 2>&1 | tail -1 | cut -c1-200
    tail -1 "$OUT/torch.jsonl" 2>/dev/null | grep -q '"oom": false' || break
  done
else
  echo "largest_model: no PyTorch rows (TORCH=$TORCH, or python3 has no torch with CUDA)"
fi
for m in $OURS; do
  timeout 900 "$BIN" -e "$m" -b 1 -t 1024 -d 1024 -x "$STEPS" -l 3e-5 -v 0 -g 0 --precision bf16 --grad-dtype bf16 \
    --recompute block --offload adamw -o "$OUT/ours_$m" > "$OUT/ours_$m.txt" 2>&1
  rc=$?
  echo "train_gpt2 -e $m: exit $rc ($(grep -E '^(model|offload|done|error)' "$OUT/ours_$m.txt" | tr '\n' ' ' | cut -c1-300))"
  [ $rc = 0 ] && break   # the first (largest) that trains
done
python3 - "$OUT" $OURS <<'PY'
import json, os, re, statistics, sys
out, ours = sys.argv[1], sys.argv[2:]
print("| run | parameters | trains | peak GPU memory MiB | host memory pinned GB | step s | loss: step 1 -> mean of the last 10 (highest) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
best = 0
path = os.path.join(out, "torch.jsonl")
for r in (json.loads(l) for l in open(path)) if os.path.exists(path) else []:
    ok = not r["oom"]
    if ok: best = max(best, r["params"])
    print(f"| PyTorch {r['torch']} {r['config']} checkpointing | {r['params'] / 1e9:.2f}B | {'yes' if ok else 'out of memory'} | "
          f"{r['peak_reserved_mib']:.0f} | 0 | {r.get('median_ms', 0) / 1e3:.2f} | {r.get('loss_first', '-')} -> {r.get('loss_last', '-')} |")
for m in ours:
    if not os.path.exists(os.path.join(out, f"ours_{m}.txt")):
        continue
    txt = open(os.path.join(out, f"ours_{m}.txt")).read()
    logp = os.path.join(out, f"ours_{m}", "log.jsonl")
    rows = [json.loads(l) for l in open(logp) if l.strip()] if os.path.exists(logp) else []
    loss = [r["train_loss"] for r in rows if "train_loss" in r]
    params = re.search(r"([\d.]+)M parameters", txt)
    peak = re.findall(r"peak memory (\d+) MiB", txt)
    host = re.search(r"host memory \(([\d.]+) GB\)", txt)
    ms = [r["ms"] for r in rows[3:] if "ms" in r]
    trained = len(loss) >= 20 and statistics.mean(loss[-10:]) < loss[0] and "done:" in txt
    p = float(params[1]) * 1e6 if params else 0
    print(f"| train_gpt2 {m} offload | {p / 1e9:.2f}B | {'yes' if trained else 'no'} | {peak[-1] if peak else '-'} | "
          f"{host[1] if host else '-'} | {statistics.median(ms) / 1e3 if ms else 0:.2f} | "
          f"{loss[0] if loss else 0:.3f} -> {statistics.mean(loss[-10:]) if loss else 0:.3f} ({max(loss) if loss else 0:.3f}) |")
    if trained and best:
        print(f"train_gpt2 {m}: {p / best:.2f}x the parameters of the largest PyTorch trained ({best / 1e9:.2f}B)")
PY
