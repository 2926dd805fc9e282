#!/usr/bin/env bash
# bench_mlir_train.sh - what --mlir (bt_mlir.h's fused kernels) gives a training run (part of
# make bench-mlir MLIR=1 BUILD=build/mlir, on a machine with a GPU and MLIR): train_gpt2 (d12, whose
# MLP already has hand-written fused epilogues) and examples/train_llama.c (l12: RMSNorm + SwiGLU,
# no hand-written fusion), bf16, B 16, T 1024, STEPS steps, each without and with --mlir: tokens/s,
# and the losses of the two runs side by side (bf16: they agree within the parity bounds, not bit for bit).
#   bash bench/bench_mlir_train.sh BUILD_DIR     (its train_gpt2_cuda and train_llama_cuda, built with MLIR=1)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
D=${1:?usage: bash bench/bench_mlir_train.sh BUILD_DIR}; STEPS=${STEPS:-10}; OUT=${OUT:-$D/bench/mlir}
mkdir -p "$OUT"; rm -rf "$OUT"/gpt2_*
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
echo "GPT-2 d12 and Llama l12, bf16, B 16, T 1024, $STEPS steps; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%Y-%m-%d)"
for m in plain mlir; do
  flag=$([ $m = mlir ] && echo --mlir)
  timeout 300 "$D/train_gpt2_cuda" -e d12 -b 16 -t 1024 -d 16384 -x "$STEPS" -v 0 -g 0 --precision bf16 --quiet \
    -o "$OUT/gpt2_$m" $flag > "$OUT/gpt2_$m.txt" 2>&1 || echo "train_gpt2 $flag: exit $?: $(tail -2 "$OUT/gpt2_$m.txt")"
  timeout 300 "$D/train_llama_cuda" -e l12 -b 16 -t 1024 -x "$STEPS" --precision bf16 --quiet $flag > "$OUT/llama_$m.txt" 2>&1 \
    || echo "train_llama $flag: exit $?: $(tail -2 "$OUT/llama_$m.txt")"
done
python3 - "$OUT" <<'PY'
import json, os, re, statistics, sys
out = sys.argv[1]
def gpt2(m):
    p = os.path.join(out, f"gpt2_{m}", "log.jsonl")
    rows = [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
    return (statistics.median(r["tok_per_s"] for r in rows[2:] or rows) if rows else None), [r["train_loss"] for r in rows]
def llama(m):
    t = open(os.path.join(out, f"llama_{m}.txt")).read() if os.path.exists(os.path.join(out, f"llama_{m}.txt")) else ""
    x = re.search(r"done: \d+ steps, loss ([\d.]+) -> ([\d.]+), (\d+) tok/s", t)
    return (float(x.group(3)), [float(x.group(1)), float(x.group(2))]) if x else (None, [])
print("| program | tokens/s plain | tokens/s --mlir | --mlir / plain | losses plain | losses --mlir |")
print("| --- | ---: | ---: | ---: | --- | --- |")
for name, f in (("train_gpt2 d12", gpt2), ("train_llama l12", llama)):
    (a, la), (b, lb) = f("plain"), f("mlir")
    r = f"{b / a:.2f}x" if a and b else ""
    print(f"| {name} | {a or 0:,.0f} | {b or 0:,.0f} | {r} | {la[0] if la else '-'} .. {la[-1] if la else '-'} | {lb[0] if lb else '-'} .. {lb[-1] if lb else '-'} |")
PY
