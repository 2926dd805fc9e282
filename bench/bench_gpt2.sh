#!/usr/bin/env bash
# bench_gpt2.sh - GPT-2 or Llama training end to end: train_gpt2's tokens/s and peak GPU memory next
# to PyTorch eager and torch.compile on the same GPU, model and batch, in one run (make bench-gpt2).
#
#   make bench-gpt2 [B=16] [T=1024] [PREC=bf16] [MODEL=d12] [STEPS=12] [ROUNDS=1] [D=...]
#                   [RECOMPUTE="none mlp block"] [BIN="build/train_gpt2_cuda old/train_gpt2_cuda"]
#                   [ARGS="..."] [TORCH=0] [COMPILE=0]
#   (or the same names as environment variables of `bash bench/bench_gpt2.sh`)
#
#   B        rows per micro-batch. B=default: train_gpt2's own default run (micro-batch measured to
#            fit the GPU, 0.5M-token steps by accumulation); it has no PyTorch counterpart
#   T, MODEL sequence length and model preset: GPT-2's d12 (124M), d24, d36, d48 (1.5B), tiny
#            (PyTorch: tests/gpt2_torch.py) or a Llama's l125m, l125m_128k, llama3.2-1b, llama3-8b,
#            ls4, ls2 (PyTorch: tests/llama_torch.py, SDPA with grouped-query attention)
#   D        tokens per step (default B*T: one micro-batch a step, as the PyTorch rows)
#   PREC     fp32 (TF32 off), tf32, bf16, fp8 (GPT-2's block linears in FP8, docs/fp8.md; train_gpt2
#            only: its PyTorch rows are left out, and the table adds each binary's fp8 / bf16 ratio
#            when both ran); several space-separated
#   RECOMPUTE  --recompute modes, each a group of rows (default none): none, attn, mlp, block go to
#            train_gpt2 and PyTorch alike (torch.utils.checkpoint around the same regions); norm and
#            gelu to train_gpt2 only (PyTorch has no counterpart: its rows are left out; gelu not for
#            a Llama: train_gpt2 refuses it); auto: train_gpt2 without --recompute (its own choice)
#            against PyTorch without checkpointing
#   STEPS    steps a run; tokens/s is the median over the steps after the first 3
#   BIN      the train_gpt2 binaries to time (space-separated, default build/train_gpt2_cuda): each
#            one runs in every round, so two builds compare on one GPU in one run
#   ROUNDS   rounds, each running every binary and eager PyTorch in turn (a card whose clock drifts
#            slows them alike); torch.compile runs in the first round only
#   ARGS     more train_gpt2 flags, e.g. "--cuda-graph off" (a --recompute here overrides RECOMPUTE's)
#   TORCH=0  no PyTorch rows; COMPILE=0 no torch.compile row
#   OUT      logs (default build/bench/gpt2); the table (bench/bench_gpt2_table.py) is printed last
# Peak memory is the most reserved over the run: train_gpt2's caching allocator, PyTorch's
# torch.cuda.max_memory_reserved (warm-up included). Data: data/ (make data when it is missing).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=${B:-16}; T=${T:-1024}; PREC=${PREC:-bf16}; MODEL=${MODEL:-d12}; STEPS=${STEPS:-12}; ROUNDS=${ROUNDS:-1}
RECOMPUTE=${RECOMPUTE:-none}
BIN=${BIN:-build/train_gpt2_cuda}; ARGS=${ARGS:-}; TORCH=${TORCH:-1}; COMPILE=${COMPILE:-1}
OUT=${OUT:-build/bench/gpt2}
for rc in $RECOMPUTE; do
  case $rc in auto|none|norm|gelu|attn|mlp|block) ;; *) echo "bench_gpt2: RECOMPUTE has '$rc': auto, none, norm, gelu, attn, mlp or block" >&2; exit 1 ;; esac
done
if [ "$B" = default ]; then D=""; TORCH=0; else D=${D:-$((B * T))}; fi
mkdir -p "$OUT"; rm -rf "$OUT"/bt[0-9]*_* "$OUT/runs.jsonl" "$OUT/torch.jsonl"   # this script's files only
for b in $BIN; do [ -x "$b" ] || { echo "bench_gpt2: $b is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }; done
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
if [ "$TORCH" = 1 ] && ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "bench_gpt2: python3 has no torch with CUDA: PyTorch rows skipped"; TORCH=0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"
date -u +%Y-%m-%d | tee "$OUT/date.txt"
shape=(-e "$MODEL" -t "$T" -x "$STEPS" -v 0 -g 0 --quiet)
[ -n "$D" ] && shape+=(-b "$B" -d "$D")
torch_run() {   # torch_run [--compile]: one PyTorch run, its JSON line appended to $OUT/torch.jsonl
  timeout 600 python3 bench/bench_gpt2_torch.py --config "$MODEL" --B "$B" --T "$T" --precision "$p" --steps "$STEPS" \
    --warmup 3 --recompute "${rc/auto/none}" --json-out "$OUT/torch.jsonl" "$@" 2>&1 | tail -1 | cut -c1-160
}
for p in $PREC; do
  for rc in $RECOMPUTE; do
    for r in $(seq 1 "$ROUNDS"); do
      nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | head -1 | sed "s/^/$p $rc round $r: sm clock, temp, power: /"
      i=0
      for b in $BIN; do
        i=$((i + 1)); dir="$OUT/bt${i}_${p}_${rc}_r$r"
        # shellcheck disable=SC2086  # ARGS is a list of flags
        rcflag=(--recompute "$rc"); [ "$rc" = auto ] && rcflag=()
        timeout 900 "$b" "${shape[@]}" --precision "$p" "${rcflag[@]}" -o "$dir" $ARGS > "$dir.txt" 2>&1 \
          || echo "$b ($p, recompute $rc, round $r): exit $?: $(tail -2 "$dir.txt")"
        tail -1 "$dir.txt" | cut -c1-160
        printf '{"bin": "%s", "i": %d, "prec": "%s", "recompute": "%s", "round": %d, "log": "%s", "out": "%s"}\n' \
          "$b" "$i" "$p" "$rc" "$r" "$dir/log.jsonl" "$dir.txt" >> "$OUT/runs.jsonl"
      done
      if [ "$TORCH" = 1 ] && [ "$rc" != gelu ] && [ "$rc" != norm ] && [ "$p" != fp8 ]; then   # no FP8 counterpart in tests/gpt2_torch.py
        torch_run
        [ "$r" = 1 ] && [ "$COMPILE" = 1 ] && torch_run --compile
      fi
    done
  done
done
case $MODEL in l*) family=Llama ;; *) family=GPT-2 ;; esac   # llama.h's presets all begin with l
echo "$family $MODEL, B $B, T $T, ${D:-default} tokens a step, $STEPS steps, recompute $RECOMPUTE${ARGS:+, $ARGS}; $(cat "$OUT/gpu.txt"); $(cat "$OUT/date.txt")"
python3 bench/bench_gpt2_table.py "$OUT" | tee "$OUT/summary.txt"
