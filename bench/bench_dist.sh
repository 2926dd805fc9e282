#!/usr/bin/env bash
# bench_dist.sh - data parallelism on one host (make bench-dist): GPT-2 tokens/s and peak memory per
# GPU on 1 GPU and on NGPU GPUs (--dp ddp, zero1, zero2) next to PyTorch DDP (eager, and
# torch.compile for bf16) on the same GPUs; the scaling; the DDP bucket sizes of SWEEP; and the
# share of the gradient all-reduce hidden behind the backward pass (bench/bench_dist_allreduce.py
# times NCCL's all-reduce of the whole gradient alone). The table is printed last
# (bench/bench_dist_table.py).
#
#   make bench-dist [NGPU=2] [B=16] [T=1024] [MODEL=d12] [PREC="bf16 fp32"] [STEPS=14] [ROUNDS=1]
#                   [SWEEP="10 50 100"] [BIN=build/train_gpt2_cuda] [ARGS="..."] [TORCH=0]
#   (or the same names as environment variables of `bash bench/bench_dist.sh`)
#
#   B         rows per GPU and micro-batch; each step is one micro-batch on every GPU (-d NGPU*B*T)
#   ROUNDS    rounds of the 1-GPU and NGPU-GPU ddp runs, alternating (the table takes the median)
#   SWEEP     bucket sizes (MB) for a bf16 ddp run each; empty: none
#   ARGS      more train_gpt2 flags for every run (e.g. "--cuda-graph off", "--comm-dtype bf16")
# tokens/s: the median over the steps after the first 3 (global: all GPUs). NVLink multicast stays
# off in every process (NCCL_NVLS_ENABLE=0 and the two below). Logs in OUT (default build/bench/dist).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
NG=${NGPU:-2}; B=${B:-16}; T=${T:-1024}; MODEL=${MODEL:-d12}; PREC=${PREC:-bf16 fp32}; STEPS=${STEPS:-14}
ROUNDS=${ROUNDS:-1}; SWEEP=${SWEEP-10 50 100}; BIN=${BIN:-build/train_gpt2_cuda}; ARGS=${ARGS:-}; TORCH=${TORCH:-1}
OUT=${OUT:-build/bench/dist}
mkdir -p "$OUT"; rm -rf "$OUT"/bt_* "$OUT"/sweep_* "$OUT/torch.jsonl" "$OUT/allreduce.jsonl"   # this script's files only
have=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$have" -ge "$NG" ] || { echo "bench_dist: NGPU=$NG, but $have GPU(s) here" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench_dist: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
if [ "$TORCH" = 1 ] && ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "bench_dist: python3 has no torch with CUDA: PyTorch rows skipped"; TORCH=0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"
nvidia-smi topo -m 2>/dev/null | head -$((NG + 1))
run() {   # run DIR ARGS...: one train_gpt2 run, its log.jsonl in $OUT/DIR
  # shellcheck disable=SC2086  # ARGS is a list of flags
  timeout 600 "$BIN" -e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -v 0 -g 0 --quiet -o "$OUT/$1" "${@:2}" $ARGS > "$OUT/$1.txt" 2>&1 \
    || echo "$1: exit $?: $(tail -2 "$OUT/$1.txt")"
  tail -1 "$OUT/$1.txt" | cut -c1-150
}
torch_run() {   # torch_run NPROC [--compile]
  local launch=(python3); [ "$1" -gt 1 ] && launch=(torchrun --nproc_per_node "$1")
  timeout 600 "${launch[@]}" bench/bench_gpt2_torch.py --config "$MODEL" --B "$B" --T "$T" --precision "$p" --steps "$STEPS" \
    --warmup 3 --json-out "$OUT/torch.jsonl" "${@:2}" 2>&1 | tail -1 | cut -c1-150
}
for p in $PREC; do
  for r in $(seq 1 "$ROUNDS"); do
    run "bt_${p}_1_r$r" -d $((B * T)) --precision "$p"
    run "bt_${p}_${NG}_ddp_r$r" --nproc "$NG" --dp ddp -d $((NG * B * T)) --precision "$p"
  done
  for m in zero1 zero2; do run "bt_${p}_${NG}_${m}_r1" --nproc "$NG" --dp "$m" -d $((NG * B * T)) --precision "$p"; done
  if [ "$TORCH" = 1 ]; then
    torch_run 1; torch_run "$NG"
    [ "$p" = bf16 ] && { torch_run 1 --compile; torch_run "$NG" --compile; }
  fi
done
for mb in $SWEEP; do run "sweep_$mb" --nproc "$NG" --bucket-mb "$mb" -d $((NG * B * T)) --precision bf16; done
[ "$TORCH" = 1 ] && timeout 300 torchrun --nproc_per_node "$NG" bench/bench_dist_allreduce.py "$OUT/allreduce.jsonl" 2>&1 | tail -1
echo "GPT-2 $MODEL, B $B x T $T per GPU, $STEPS steps${ARGS:+, $ARGS}; $NG x $(cat "$OUT/gpu.txt"); $(date -u +%Y-%m-%d)"
python3 bench/bench_dist_table.py "$OUT" "$NG" | tee "$OUT/summary.txt"
