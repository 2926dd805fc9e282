#!/usr/bin/env bash
# fp8_curve.sh - does --precision fp8 hold bf16's loss curve? (make bench-fp8-curve)
#
#   make bench-fp8-curve [STEPS="300 3000"] [B=16] [MODEL=d12] [RECIPES="delayed current"] [EVERY=25]
#   (or the same names as environment variables of `bash bench/fp8_curve.sh`)
#
# For each length in STEPS: one bf16 run and one fp8 run per recipe of train_gpt2 on WikiText-2 (a recipe
# delayed or current, with -fast appended: --fp8-accum fast, the forward products' fast accumulation;
# -fastdx: --fp8-accum fast-dx, the block linears' input-gradient products' too;
# with -head appended: --fp8-head on, the classifier's products in FP8 too; e.g. delayed-fast-head)
# (data/wikitext2_{train,val}.bin: make data/wikitext2_train.bin), B rows of T 1024, one micro-batch a
# step, the default learning-rate schedule, validation every EVERY steps (20 batches). The runs of
# one length go side by side on the GPU (their speed is not what this measures). The table: each
# fp8 run's largest |val_fp8 / val_bf16 - 1| over the validations, its final validation loss
# against bf16's, and whether it ran every step (a non-finite loss stops a run: no update skipped).
# The issue's bars: within 1% at every validation (300 steps); final within 1.5% (3,000 steps).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=${STEPS:-300 3000}; B=${B:-16}; MODEL=${MODEL:-d12}; RECIPES=${RECIPES:-delayed current}; EVERY=${EVERY:-25}
BIN=${BIN:-build/train_gpt2_cuda}; OUT=${OUT:-build/bench/fp8_curve}
[ -x "$BIN" ] || { echo "fp8_curve: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/wikitext2_train.bin ] || make -s data/wikitext2_train.bin data/wikitext2_val.bin || exit 1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"
for n in $STEPS; do
  base=(-e "$MODEL" -b "$B" -t 1024 -d $((B * 1024)) -x "$n" -v "$EVERY" -m 20 -g 0 --quiet
        -i data/wikitext2_train.bin -j data/wikitext2_val.bin)
  "$BIN" "${base[@]}" --precision bf16 -o "$OUT/bf16_$n" > "$OUT/bf16_$n.txt" 2>&1 &
  for r in $RECIPES; do   # RECIPE[-fast|-fastdx][-head]
    acc=split; [[ $r == *-fast* ]] && acc=fast; [[ $r == *-fastdx* ]] && acc=fast-dx
    head=off; [[ $r == *-head* ]] && head=on
    "$BIN" "${base[@]}" --precision fp8 --fp8-recipe "${r%%-*}" --fp8-accum $acc --fp8-head $head -o "$OUT/fp8_${r}_$n" > "$OUT/fp8_${r}_$n.txt" 2>&1 &
  done
  wait
done
python3 - "$OUT" "$STEPS" "$RECIPES" <<'PY'
import json, os, sys
out, steps, recipes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def vals(d):
    p = os.path.join(out, d, "log.jsonl")
    rows = [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
    return {r["step"]: r["val_loss"] for r in rows if r.get("val_loss") is not None}, max((r["step"] for r in rows), default=0)
print(f"train_gpt2 --precision fp8 against bf16, WikiText-2; {open(os.path.join(out, 'gpu.txt')).read().strip()}")
print("| steps | recipe | validations | largest deviation from bf16 | final val bf16 | final val fp8 | final deviation | steps run |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for n in steps:
    b, _ = vals(f"bf16_{n}")
    for r in recipes:
        f, last = vals(f"fp8_{r}_{n}")
        common = sorted(set(b) & set(f))
        if not common:
            print(f"| {n} | {r} | 0 | - | - | - | - | {last} |"); continue
        dev = max(abs(f[s] / b[s] - 1) for s in common)
        s = common[-1]
        print(f"| {n} | {r} | {len(common)} | {100 * dev:.2f}% | {b[s]:.4f} | {f[s]:.4f} | {100 * (f[s] / b[s] - 1):+.2f}% | {last} / {n} |")
PY
