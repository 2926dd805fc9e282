#!/usr/bin/env bash
# bench_tpcp.sh - tensor and context parallelism on two GPUs (make bench-tpcp): GPT-2 tokens/s and
# peak memory per GPU of train_gpt2 --tp 2 (sync, --async-tp, --sp, both) and --cp 2 (ring,
# allgather, alltoall; with --dp zero1 / zero2 over the cp ranks) against one GPU at T 1024, and
# --cp 2 at long contexts (B 1, T 16384 and 32768, model d12_32k: d12 with a 32768-row position
# table), next to PyTorch's own tensor and context parallelism on the same GPUs
# (bench/bench_tpcp_torch.py); then the forward and backward time of sync against async TP. The
# table is printed last (bench/bench_tpcp_table.py).
#
#   make bench-tpcp [STEPS=8] [LONG="16384 32768"] [BIN=build/train_gpt2_cuda] [ARGS="..."] [TORCH=0]
#   (or the same names as environment variables of `bash bench/bench_tpcp.sh`)
#
# bf16; T 1024 runs are B 8 (one micro-batch a step); tokens/s is global, the median over the steps
# after the second; memory is rank 0's peak allocated. LONG="" skips the long contexts. NVLink
# multicast stays off in every process. Logs in OUT (default build/bench/tpcp).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
STEPS=${STEPS:-8}; LONG=${LONG-16384 32768}; BIN=${BIN:-build/train_gpt2_cuda}; ARGS=${ARGS:-}; TORCH=${TORCH:-1}
OUT=${OUT:-build/bench/tpcp}
mkdir -p "$OUT"; rm -rf "$OUT"/bt_* "$OUT"/torch_* "$OUT/torch_tpcp.jsonl"   # this script's files only
have=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$have" -ge 2 ] || { echo "bench_tpcp: needs 2 GPUs, $have here" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench_tpcp: $BIN is not an executable (make build/train_gpt2_cuda)" >&2; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe || exit 1
if [ "$TORCH" = 1 ] && ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "bench_tpcp: python3 has no torch with CUDA: PyTorch rows skipped"; TORCH=0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"
bt() {   # bt NAME ARGS...: one bf16 run, its log.jsonl in $OUT/bt_NAME
  # shellcheck disable=SC2086  # ARGS is a list of flags
  timeout 300 "$BIN" "${@:2}" -v 0 -g 0 --precision bf16 -x "$STEPS" -o "$OUT/bt_$1" --quiet $ARGS > "$OUT/bt_$1.log" 2>&1 \
    || echo "bt_$1: exit $?: $(grep -m2 -iE 'error|out of memory' "$OUT/bt_$1.log")"
}
S=(-e d12 -b 8 -t 1024 -d 8192)
bt one_1024 "${S[@]}"
bt tp2_1024 --nproc 2 --tp 2 "${S[@]}"
bt tp2async_1024 --nproc 2 --tp 2 --async-tp "${S[@]}"
bt tp2sp_1024 --nproc 2 --tp 2 --sp "${S[@]}"
bt tp2spasync_1024 --nproc 2 --tp 2 --sp --async-tp "${S[@]}"
for m in ring allgather alltoall; do bt "cp2${m}_1024" --nproc 2 --cp 2 --cp-comm $m "${S[@]}"; done
for z in zero1 zero2; do bt "cp2${z}_1024" --nproc 2 --cp 2 --dp $z "${S[@]}"; done
for T in $LONG; do
  L=(-e d12_32k -b 1 -t "$T" -d "$T")
  bt "one_$T" "${L[@]}"
  for m in ring allgather; do bt "cp2${m}_$T" --nproc 2 --cp 2 --cp-comm $m "${L[@]}"; done
done
if [ "$TORCH" = 1 ]; then
  tq() {   # tq NAME CMD...: one PyTorch run, its JSON line appended to $OUT/torch_tpcp.jsonl
    timeout 300 "${@:2}" --steps "$STEPS" --warmup 3 --json-out "$OUT/torch_tpcp.jsonl" > "$OUT/torch_$1.log" 2>&1
    tail -1 "$OUT/torch_$1.log" | cut -c1-150
  }
  TR=(torchrun --nproc_per_node 2 bench/bench_tpcp_torch.py)
  tq single_1024 python3 bench/bench_tpcp_torch.py --mode single --B 8 --T 1024
  tq tp2_1024 "${TR[@]}" --mode tp --B 8 --T 1024
  for r in allgather alltoall; do tq "cp2${r}_1024" "${TR[@]}" --mode cp --rotate $r --B 8 --T 1024; done
  for T in $LONG; do
    tq "single_$T" python3 bench/bench_tpcp_torch.py --mode single --B 1 --T "$T"
    tq "cp2allgather_$T" "${TR[@]}" --mode cp --rotate allgather --B 1 --T "$T"
  done
fi
echo "GPT-2 bf16, $STEPS steps${ARGS:+, $ARGS}; 2 x $(cat "$OUT/gpu.txt"); $(date -u +%Y-%m-%d)"
python3 bench/bench_tpcp_table.py "$OUT" $LONG | tee "$OUT/summary.txt"
