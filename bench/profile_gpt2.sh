#!/usr/bin/env bash
# profile_gpt2.sh - where a GPT-2 training step's GPU time goes (make profile-gpt2): every kernel of
# one step of train_gpt2 timed by Nsight Compute, summed per kernel name, with the GEMMs grouped by
# grid (bench/profile_gpt2_sum.py); then PyTorch eager's step the same way under torch.profiler
# (bench/profile_gpt2_torch.py), when python3 has torch.
#
#   make profile-gpt2 [B=16] [T=1024] [PREC=bf16] [MODEL=d12] [D=B*T] [BIN=build/train_gpt2_cuda] [TORCH=0]
#   (or the same names as environment variables of `bash bench/profile_gpt2.sh`)
#
# train_gpt2 runs 3 steps under `ncu --clock-control none` (steps 1 and 2 hold the autotuning and
# first-use work; the third is summed). ncu serialises the kernels at the card's boost clock, so
# the sum is kernel time only: not the step's wall time (host gaps, overlap, a power-capped clock).
# D = B*T is one micro-step a step; D=131072 B=128 is the default run's micro-batch.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=${B:-16}; T=${T:-1024}; PREC=${PREC:-bf16}; MODEL=${MODEL:-d12}; D=${D:-$((B * T))}
BIN=${BIN:-build/train_gpt2_cuda}; TORCH=${TORCH:-1}; OUT=${OUT:-build/bench/profile}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
mkdir -p "$OUT"
[ -x "$NCU" ] || { echo "profile_gpt2: Nsight Compute (ncu) not found" >&2; exit 1; }
[ -x "$BIN" ] || { echo "profile_gpt2: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
csv="$OUT/ncu_${MODEL}_${PREC}_b$B.csv"
timeout 900 "$NCU" --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
  "$BIN" -e "$MODEL" -b "$B" -t "$T" -d "$D" -x 3 -v 0 -g 0 --precision "$PREC" --quiet 2>/dev/null > "$csv" \
  || { echo "profile_gpt2: ncu exited $? (see $csv)" >&2; exit 1; }
echo "== train_gpt2 $MODEL $PREC, B $B, T $T, $D tokens a step"
python3 bench/profile_gpt2_sum.py "$csv" | tee "$OUT/train_gpt2_${PREC}_b$B.txt"
if [ "$TORCH" = 1 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== PyTorch eager $MODEL $PREC, B $B, T $T"
  python3 bench/profile_gpt2_torch.py "$PREC" "$B" "$T" "$MODEL" | tee "$OUT/torch_${PREC}_b$B.txt"
else
  echo "PyTorch rows skipped (TORCH=0, or python3 has no torch with CUDA)"
fi
