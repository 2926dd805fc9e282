#!/usr/bin/env bash
# llm.c's train_gpt2cu (GPT-2 124M d12 from scratch, bf16, T 1024), with and without cuDNN attention,
# at B 16, 32, 64: tokens/s and peak GPU memory, the third column of the end-to-end table next to
# train_gpt2 and PyTorch (bench/gpu_session.sh bench). One device-machine call, from the repository
# root, with .carry/llmc.tar.xz carried (bench/carry_llmc.sh builds it on the dev machine: the two
# binaries, built from a fetched llm.c that is never committed, and the token shards):
#   bash bench/llmc_gpu.sh
# env: BS="16 32 64"  VARIANTS="cudnn nocudnn"  RECOMPUTE="0 1" (llm.c's -r; its default is 1, which
#      recomputes GELU in the backward pass; ours and PyTorch keep it: -r 0 is the like-for-like row)
#      STEPS=20 (timed steps after WARM=3 are the median's)  TIMEOUT=240 (seconds a run)
#      LLMC_EXTRA="-ge 2": more llm.c flags (-ge 2 fuses GELU into the cuBLASLt matmul forward and
#      backward; llm.c's default is -ge 0 on every GPU)
#      WITH_OURS=1: also run our build/train_gpt2_cuda (from .carry/bins.tar.xz, bench/carry_bins.sh)
#      at the same settings under the same memory poller, alternating with llm.c
# Settings as bench/gpu_session.sh bench gives train_gpt2: AdamW (betas 0.9/0.95, eps 1e-8, weight
# decay 0.1), lr 6e-4, cosine with STEPS/10 warm-up steps to 0.1 of it, grad clip 1.0, one micro-
# batch a step (-d = B*T), no sampling, no checkpoints; llm.c evaluates the val loss before step 1
# and after the last (one batch each, -m 1, not timed: its step timer covers the training step only;
# the val file is the train shard: the val shard has fewer than 64*1024+1 tokens).
# tokens/s = B*T / the median of the step times llm.c prints ("| X ms |") after WARM steps.
# Peak memory, three readings: the max of nvidia-smi's used_memory of the run's compute apps, polled
# every 0.2 s in the background (the whole process: CUDA context, cuBLAS and cuDNN workspaces, all
# allocations), llm.c's own "device memory usage" line (cudaMemGetInfo after its up-front
# allocation, before the first step), and the sum of the allocations it lists (parameters, grads,
# AdamW m and v, master weights, activations). Everything runs under `timeout`; the table is last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/llmc_out}; mkdir -p "$OUT"
BS=${BS:-"16 32 64"}; VARIANTS=${VARIANTS:-"cudnn nocudnn"}; RECOMPUTE=${RECOMPUTE:-"0 1"}
STEPS=${STEPS:-20}; WARM=${WARM:-3}; TIMEOUT=${TIMEOUT:-240}; T=1024
read -ra EXTRA <<< "${LLMC_EXTRA:-}"
D=.carry/llmc
[ -f .carry/llmc.tar.xz ] || { echo "llmc_gpu: .carry/llmc.tar.xz missing (bash bench/carry_llmc.sh, then carry .carry)"; exit 1; }
tar -xJf .carry/llmc.tar.xz -C .carry || { echo "llmc_gpu: cannot unpack .carry/llmc.tar.xz"; exit 1; }
for f in "$D/train_gpt2cu_cudnn" "$D/train_gpt2cu_nocudnn" "$D/data/llmc_train.bin"; do
  [ -f "$f" ] || { echo "llmc_gpu: $f missing from .carry/llmc.tar.xz"; exit 1; }
done
python3 bench/llmc_data.py --check "$D/data/llmc_train.bin" || exit 1

# libraries the binaries link: libcublasLt.so.13, libnvrtc.so.13 and (cuDNN build) libcudnn.so.9.
# The toolkit's lib64 first, then the NVIDIA wheels PyTorch brings (site-packages/nvidia/...).
LIBDIRS=/usr/local/cuda/lib64
WHEELS=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null)
if [ -n "$WHEELS" ]; then
  for so in libcudnn.so.9 libcublasLt.so.13 libnvrtc.so.13; do
    d=$(find "$WHEELS" -name "$so" -printf '%h\n' 2>/dev/null | head -1)
    [ -n "$d" ] && LIBDIRS="$LIBDIRS:$d"
  done
fi
export LD_LIBRARY_PATH="$LIBDIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for v in cudnn nocudnn; do
  miss=$(ldd "$D/train_gpt2cu_$v" | grep "not found")
  [ -n "$miss" ] && echo "llmc_gpu: train_gpt2cu_$v: $miss"
  ldd "$D/train_gpt2cu_$v" | grep -E "cudnn|cublasLt|nvrtc" | sed "s/^/train_gpt2cu_$v: /"
done
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cudnn (wheel)", torch.backends.cudnn.version())' 2>/dev/null

if [ -n "${WITH_OURS:-}" ]; then
  [ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
  [ -x build/train_gpt2_cuda ] || { echo "llmc_gpu: WITH_OURS=1 needs build/train_gpt2_cuda (.carry/bins.tar.xz)"; exit 1; }
  mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
fi

# poll_mem FILE: every 0.2 s, the sum of the compute apps' used memory and the GPU's memory.used (MiB)
poll_mem() {
  while :; do
    a=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null | awk '{s += $1} END {print s + 0}')
    g=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    echo "$a ${g:-0}"
    sleep 0.2
  done > "$1"
}

# run_one NAME LOG CMD...: the command under timeout with the poller beside it; prints a result line
# NAME B rc tok_s median_ms smi_peak_mib smi_gpu_peak_mib llmc_usage_mib llmc_alloc_mib
run_one() {
  local name=$1 b=$2 log=$3; shift 3
  local base; base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  poll_mem "$log.mem" & local poller=$!
  timeout "$TIMEOUT" "$@" > "$log" 2>&1; local rc=$?
  kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null
  python3 - "$log" "$b" "$WARM" "$base" "$name" "$rc" <<'EOF'
import re, statistics, sys
log, b, warm, base, name, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4] or 0), sys.argv[5], sys.argv[6]
text = open(log, errors="replace").read()
ms = [float(m) for m in re.findall(r"^step\s+\d+/\d+ \|.*?\| ([0-9.]+) ms \|", text, re.M)]
timed = ms[warm:]
med = statistics.median(timed) if timed else float("nan")
tps = b * 1024 / med * 1000 if timed else float("nan")
apps = gpu = 0.0
for line in open(log + ".mem"):
    f = line.split()
    if len(f) == 2:
        apps, gpu = max(apps, float(f[0])), max(gpu, float(f[1]))
usage = re.findall(r"device memory usage: (\d+) MiB", text)
alloc = sum(int(x) for x in re.findall(r"allocat(?:ed|ing) (\d+) MiB for", text))
print(f"RESULT {name} {b} {rc} {tps:.0f} {med:.2f} {apps:.0f} {gpu - base:.0f} {usage[0] if usage else '-'} {alloc or '-'} {len(timed)}")
EOF
}

for b in $BS; do
  for v in $VARIANTS; do
    for r in $RECOMPUTE; do
      log="$OUT/llmc_${v}_B${b}_r${r}.txt"
      run_one "llm.c-$v-r$r" "$b" "$log" "$D/train_gpt2cu_$v" -i "$D/data/llmc_train.bin" -j "$D/data/llmc_train.bin" \
        -e d12 -b "$b" -t $T -d $((b * T)) -x "$STEPS" -l 6e-4 -u $((STEPS / 10)) -q 0.1 -c 0.1 -r "$r" \
        -v 100000 -m 1 -s 0 -h 0 -n 0 -z 0 "${EXTRA[@]}"
      grep -E "gelu_fusion|recompute|device memory usage|ERROR|rror" "$log" | head -6 | sed "s/^/  $v B$b r$r: /"
    done
  done
  if [ -n "${WITH_OURS:-}" ]; then
    log="$OUT/ours_B${b}.txt"
    run_one "train_gpt2" "$b" "$log" ./build/train_gpt2_cuda -e d12 -b "$b" -t $T -d $((b * T)) -x "$STEPS" -v 0 -g 0 \
      --precision bf16 -o "$OUT/bt_B$b"
  fi
done | tee "$OUT/results.txt"

echo
echo "| run | B | exit | tokens/s (median) | step ms | timed steps | peak MiB (nvidia-smi, process) | peak MiB (GPU used - idle) | llm.c device memory usage MiB | llm.c allocations MiB |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
grep "^RESULT" "$OUT/results.txt" | while read -r _ name b rc tps med apps gpu usage alloc n; do
  echo "| $name | $b | $rc | $tps | $med | $n | $apps | $gpu | $usage | $alloc |"
done | tee "$OUT/table.md"
