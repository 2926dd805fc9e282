#!/usr/bin/env bash
# One device-machine call: build, GPU tests (+ compute-sanitizer), PyTorch parity fixtures, and
# the train_gpt2 vs PyTorch benchmark, printing a short table last. Usage (on the GPU machine):
#   bench/gpu_session.sh test      build + make test-gpu + sanitizer + parity (tiny, d12)
#   bench/gpu_session.sh bench     GPT-2 124M tokens/s and peak memory: train_gpt2 vs PyTorch
#   (NOBUILD=1: use the binaries already in build/, e.g. built on the dev machine and carried)
#     (env: B, T, STEPS, PRECS, ROUNDS (alternating rounds), COMPILE= to skip torch.compile)
# Data shards come from .carry/data when it is there (bench/carry_data.sh copies them on a machine
# without the shared data folder), else from make (`make bench-gpt2` builds them first).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT"
mode=${1:-test}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
# binaries built on the dev machine and packed by bench/carry_bins.sh
[ -n "${NOBUILD:-}" ] && [ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
NVCC=nvcc; command -v nvcc >/dev/null || NVCC=/usr/local/cuda/bin/nvcc
GPU_TESTS=$(ls tests/test_*_gpu.cu | sed 's|tests/\(.*\)\.cu|build/tests/\1|')

if [ "$mode" = test ]; then
  [ -z "${NOBUILD:-}" ] && make -j16 NVCC_PATH=$NVCC build/train_gpt2_cuda $GPU_TESTS 2>&1 | grep -E "error|warning" | head -40
  nvidia-smi topo -m 2>/dev/null | head -8
  # the PyTorch reference states: tiny (checked in as a fixture: regenerated here into $OUT and
  # compared with the committed one, which the tests use) and GPT-2 124M (too big to keep)
  python3 tests/gpt2_ref.py --config tiny --model-out "$OUT/gpt2_tiny.bin" --state-out "$OUT/gpt2_tiny_state.bin" 2>&1 | tail -3
  python3 tests/compare_fixture.py tests/fixtures/gpt2_tiny_state.bin "$OUT/gpt2_tiny_state.bin" | tee "$OUT/fixture_check.txt"
  python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin 2>&1 | tail -3
  export BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin
  tests/run_all.sh $GPU_TESTS 2>&1 | tee "$OUT/test_gpu.txt"
  [ "${SAN:-1}" = 1 ] && for t in $GPU_TESTS; do
    BT_TEST_QUICK=1 BT_PARITY_D12= timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" > "$OUT/san_$(basename "$t").txt" 2>&1
    echo "sanitizer $(basename "$t"): exit $? $(grep -c 'Invalid' "$OUT/san_$(basename "$t").txt") invalid accesses; $(grep 'ERROR SUMMARY' "$OUT/san_$(basename "$t").txt")"
  done | tee "$OUT/sanitizer.txt"
  echo "=== summary"; grep -hE "parity|passed, .* failed" "$OUT/test_gpu.txt"; cat "$OUT/sanitizer.txt" "$OUT/fixture_check.txt" 2>/dev/null
fi

if [ "$mode" = bench ]; then
  B=${B:-16}; T=${T:-1024}; STEPS=${STEPS:-12}; PRECS=${PRECS:-"fp32 tf32 bf16"}
  [ -z "${NOBUILD:-}" ] && make -j16 NVCC_PATH=$NVCC build/train_gpt2_cuda 2>&1 | grep -E "error" | head
  # ROUNDS > 1 alternates train_gpt2 and eager PyTorch, so that a card whose clocks drift as it
  # heats up slows both sides alike (torch.compile runs once, in the first round)
  ROUNDS=${ROUNDS:-1}
  for p in $PRECS; do
    for r in $(seq 1 "$ROUNDS"); do
      nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | sed "s/^/$p round $r: sm clock, temp, power: /"
      ./build/train_gpt2_cuda -e d12 -b $B -t $T -d $((B * T)) -x $STEPS -v 0 -g 0 --precision $p -o "$OUT/bt_${p}_r$r" --quiet 2>&1 | tail -1
      python3 bench/bench_gpt2_torch.py --config d12 --B $B --T $T --precision $p --steps $STEPS --warmup 3 --json-out "$OUT/torch.jsonl" 2>&1 | tail -1 | cut -c1-160
      [ "$r" = 1 ] && [ -n "${COMPILE-1}" ] && python3 bench/bench_gpt2_torch.py --config d12 --B $B --T $T --precision $p --compile --steps $STEPS --warmup 3 --json-out "$OUT/torch.jsonl" 2>&1 | tail -1 | cut -c1-160
    done
  done
  python3 bench/summarize.py "$OUT" | tee "$OUT/summary.txt"
fi
