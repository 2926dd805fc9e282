#!/usr/bin/env bash
# One call on the two-GPU machine (nvidia-h200-x2): data parallelism tested and measured.
#   bench/dist_gpu.sh test    the GPU test binaries (two-device op table, collectives, DDP engine,
#                             faults), 2-GPU training against 1 GPU (tests/dist_parity.py), a killed rank
#   bench/dist_gpu.sh bench   GPT-2 124M T=1024 B=16 per GPU: train_gpt2 on 1 and 2 GPUs (fp32 with TF32
#                             off and bf16; ddp, zero1, zero2) next to PyTorch DDP (eager, torch.compile),
#                             the bucket-size sweep (+ PNG) and the share of the gradient communication
#                             hidden behind the backward pass
#   (env: NOBUILD=1 uses carried binaries; NGPU (ranks of the multi-GPU runs, default 2); STEPS, PRECS,
#   SWEEP="5 10 25 50 100")
# NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0 and the others below).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT" data
cp -n .carry/data/* data/ 2>/dev/null
[ -n "${NOBUILD:-}" ] && [ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
mode=${1:-test}
NG=${NGPU:-2}   # ranks of the multi-GPU runs (NGPU=8 on an eight-GPU machine)
BIN=./build/train_gpt2_cuda
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi topo -m 2>/dev/null | head -4
[ -z "${NOBUILD:-}" ] && make -j32 build/train_gpt2_cuda build/tests/test_ops_gpu build/tests/test_dist_gpu build/tests/test_parallel_gpu 2>&1 | grep -E "error" | head

if [ "$mode" = test ]; then
  for t in build/tests/test_dist_gpu build/tests/test_ops_gpu build/tests/test_parallel_gpu; do
    timeout 300 "$t" > "$OUT/$(basename "$t").txt" 2>&1; echo "$(basename "$t"): exit $? $(tail -1 "$OUT/$(basename "$t").txt")"
    grep -E "FAIL|info:" "$OUT/$(basename "$t").txt" | head -12
  done
  timeout 900 python3 tests/dist_parity.py "$BIN" "$OUT/parity" --steps ${STEPS:-10} 2>&1 | tee "$OUT/parity.txt" | grep -vE "^$"
  # a rank killed mid-step: the other must exit non-zero, naming it, within the timeout
  ( $BIN --nproc $NG -e d12 -b 8 -t 1024 -d $((NG * 8192)) -x 100000 -v 0 -g 0 --nccl-timeout 30 > "$OUT/fault.txt" 2>&1; echo "exit $?" >> "$OUT/fault.txt" ) &
  sleep 20   # NCCL up and training (an H200 pair runs ~40 steps a second here)
  victim=$(pgrep -f "train_gpt2_cuda --nproc $NG" | sort -n | tail -1)
  t0=$(date +%s); kill -9 "$victim" 2>/dev/null; wait
  echo "fault: killed pid $victim; the job ended $(( $(date +%s) - t0 )) s later: $(tail -1 "$OUT/fault.txt"); $(grep -m1 -E 'died|killed|failed' "$OUT/fault.txt")"
fi

if [ "$mode" = bench ]; then
  STEPS=${STEPS:-12}; B=16; T=1024
  for p in ${PRECS:-bf16 fp32}; do
    $BIN -e d12 -b $B -t $T -d $((B * T)) -x $STEPS -v 0 -g 0 --precision $p -o "$OUT/bt_${p}_1" --quiet 2>&1 | tail -1
    for m in ddp zero1 zero2; do
      $BIN --nproc $NG --dp $m -e d12 -b $B -t $T -d $((NG * B * T)) -x $STEPS -v 0 -g 0 --precision $p -o "$OUT/bt_${p}_${NG}_$m" --quiet 2>&1 | tail -2
    done
    python3 bench/bench_gpt2_torch.py --config d12 --B $B --T $T --precision $p --steps $STEPS --warmup 3 --json-out "$OUT/torch.jsonl" | tail -1 | cut -c1-120
    torchrun --nproc_per_node $NG bench/bench_gpt2_torch.py --config d12 --B $B --T $T --precision $p --steps $STEPS --warmup 3 --json-out "$OUT/torch.jsonl" 2>&1 | tail -1 | cut -c1-120
    if [ "$p" = bf16 ]; then
      python3 bench/bench_gpt2_torch.py --config d12 --B $B --T $T --precision $p --compile --steps $STEPS --warmup 3 --json-out "$OUT/torch.jsonl" | tail -1 | cut -c1-120
      torchrun --nproc_per_node $NG bench/bench_gpt2_torch.py --config d12 --B $B --T $T --precision $p --compile --steps $STEPS --warmup 3 --json-out "$OUT/torch.jsonl" 2>&1 | tail -1 | cut -c1-120
    fi
  done
  # the communication stream at the default priority instead of the highest (bt_dist.h)
  echo "ddp bf16, comm stream at default priority:"
  BT_DDP_PRIORITY=0 $BIN --nproc $NG -e d12 -b $B -t $T -d $((NG * B * T)) -x $STEPS -v 0 -g 0 --precision bf16 -o "$OUT/prio0" --quiet 2>&1 | tail -2
  for mb in ${SWEEP:-5 10 25 50 100}; do
    $BIN --nproc $NG --bucket-mb $mb -e d12 -b $B -t $T -d $((NG * B * T)) -x $STEPS -v 0 -g 0 --precision bf16 -o "$OUT/sweep_$mb" --quiet 2>&1 | tail -1
  done
  # hidden share: the 2-GPU step against the 1-GPU step (the same per-GPU work) is the exposed
  # communication; NCCL's all-reduce of the whole gradient alone is all of it
  torchrun --nproc_per_node $NG bench/allreduce_time.py "$OUT/allreduce.jsonl" 2>&1 | tail -1
  python3 bench/dist_summary.py "$OUT" "$NG" | tee "$OUT/summary.txt"
fi
