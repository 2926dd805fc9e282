#!/usr/bin/env bash
# Where a training step's GPU time goes: every kernel of one micro-step of GPT-2 124M timed by
# Nsight Compute (duration only, clocks left alone), summed per kernel name. Kernel time only:
# the gap between the sum and the step's wall time is host overhead and idle GPU.
# Usage (GPU machine): bench/profile_step.sh [precision] [B] [T]   (NOBUILD=1: no make)
set -uo pipefail
P=${1:-bf16}; B=${2:-16}; T=${3:-1024}
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT"
mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null   # the shards (bench/carry_data.sh)
[ -n "${NOBUILD:-}" ] || make -s build/train_gpt2_cuda >/dev/null   # NOBUILD=1: the binary as carried (bench/carry_bins.sh)
# step 1 warms up (allocator, cuBLAS plans); profile the kernels of step 2 only
BIN="./build/train_gpt2_cuda -e d12 -b $B -t $T -d $((B * T)) -x 2 -v 0 -g 0 --precision $P --quiet"
n1=$(ncu --clock-control none --metrics gpu__time_duration.sum --csv $BIN 2>/dev/null | grep -c '"gpu__time_duration.sum"')
half=$((n1 / 2))
ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip $half $BIN 2>/dev/null > "$OUT/ncu_$P.csv"
python3 - "$OUT/ncu_$P.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
tot = collections.Counter(); cnt = collections.Counter()
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    name = r["Kernel Name"].split("(")[0].split("<")[0][:60]
    v = float(r["Metric Value"].replace(",", "")); unit = r.get("Metric Unit", "nsecond")
    v *= {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    tot[name] += v; cnt[name] += 1
s = sum(tot.values())
print(f"kernel time of one micro-step: {s:.1f} ms over {sum(cnt.values())} launches")
for k, v in tot.most_common(25):
    print(f"{v:8.2f} ms {100 * v / s:5.1f}% {cnt[k]:5d}x  {k}")
PY
