#!/usr/bin/env bash
# prelude of a device-call script (source it from the repository root on the GPU machine): $OUT for
# the files that come back, el (seconds since the start), the carried binaries and data unpacked,
# med (bench/runs/med.sh), and the GPU's name, driver, clock and temperature with the UTC time.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
source bench/runs/med.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date -u
# att_row [VAR=value ...] BINARY [args]: one line of the attention sweep's fwd and bwd us at T 512,
# 1024 and 4096 (B 16, H 12, D 64, causal; PyTorch off), for alternating A/B rounds
att_row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
# cudnn_rows N: the T 1024 causal row of the sweep beside PyTorch's SDPA backends, N runs in one call
cudnn_rows() { for r in $(seq 1 "$1"); do
  BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
  echo "with torch r$r:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt; done; }
# default_runs N: the default GPU run (8 steps), N times: median tokens/s and the last step's loss
default_runs() { for r in $(seq 1 "$1"); do
  timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default$r.txt 2>&1
  echo "default run r$r: $(med < $OUT/default$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default$r.txt | cut -c1-28)"; done; }
