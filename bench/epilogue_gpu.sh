#!/usr/bin/env bash
# One device-machine call for the fused matmul epilogues (issue 12): train_gpt2 bf16 GPT-2 124M with
# the epilogues on and off (BT_FUSED_EPILOGUES, BT_FUSED_DGELU: the same binary), alternating, then the GPU
# tests that cover them (matmul epilogues, the op table, GPT-2 parity), then torch.compile if time
# is left. Binaries and data are carried: here `bash bench/carry_bins.sh build/train_gpt2_cuda
# build/tests/test_kernels_gpu build/tests/test_ops_gpu build/tests/test_gpt2_gpu build/bench_kernels
# && bash bench/carry_data.sh`, there `bash bench/epilogue_gpu.sh` (env: BS="16 32 64", ROUNDS=2 at the
# first B, STEPS=12, BUDGET=360 seconds before the optional PyTorch runs, TORCH_B="32 64").
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT"
[ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
BS=${BS:-"16 32 64"}; ROUNDS=${ROUNDS:-2}; STEPS=${STEPS:-12}
# variants: off = BT_FUSED_EPILOGUES=0 (the separate kernels), on = the default, kd = on but the GELU
# gradient as a separate kernel (BT_FUSED_DGELU=0)
run_bt() {   # variant B round
  local env=""
  case $1 in off) env="BT_FUSED_EPILOGUES=0";; kd) env="BT_FUSED_DGELU=0";; esac
  env $env ./build/train_gpt2_cuda -e d12 -b "$2" -t 1024 -d $(($2 * 1024)) -x "$STEPS" -v 0 -g 0 \
    --precision bf16 -o "$OUT/bt_$1_b$2_r$3" --quiet 2>&1 | tail -1 | sed "s/^/$1 B=$2 round $3: /"
}
first=1
for b in $BS; do
  n=1; [ $first = 1 ] && n=$ROUNDS; first=0
  for r in $(seq 1 "$n"); do run_bt on "$b" "$r"; run_bt off "$b" "$r"; run_bt kd "$b" "$r"; done
done
summary() {
  python3 - "$OUT" <<'EOF'
import glob, json, os, re, statistics, sys
rows = {}
for p in glob.glob(os.path.join(sys.argv[1], "bt_*_b*_r*", "log.jsonl")):
    f, b, r = re.search(r"bt_([a-z]+)_b(\d+)_r(\d+)", p).groups()
    st = [json.loads(l) for l in open(p) if l.strip()]
    if len(st) > 3:
        rows.setdefault((int(b), f), []).append((statistics.median(s["tok_per_s"] for s in st[3:]), max(s["peak_reserved_mib"] for s in st)))
print("B   variant  tok/s (median of rounds)  rounds              peak MiB")
for (b, f) in sorted(rows):
    v = rows[(b, f)]
    print(f"{b:<3} {f:<8} {statistics.median(x[0] for x in v):>10.0f}  {' '.join(f'{x[0]:.0f}' for x in v):<32} {max(x[1] for x in v):8.0f}")
for b in sorted({k[0] for k in rows}):
    med = {f: statistics.median(x[0] for x in rows[(b, f)]) for (bb, f) in rows if bb == b}
    if "off" in med:
        print(f"B={b}: " + ", ".join(f"{f} / off = {med[f] / med['off']:.3f}" for f in sorted(med) if f != "off"))
t = os.path.join(sys.argv[1], "torch.jsonl")
for l in (open(t) if os.path.exists(t) else []):
    r = json.loads(l)
    print("torch", "compile" if r.get("compile") else "eager", "B", r.get("B"), r.get("tokens_per_s"), "tok/s", r.get("peak_reserved_mib"), "MiB")
EOF
}
summary | tee "$OUT/summary.txt"
echo "bench took $(( $(date +%s) - t0 )) s"
# the epilogue GEMMs alone next to what they replace (GPT-2 shapes at B 8)
[ -x build/bench_kernels ] && BT_BENCH_ONLY=matmul BT_BENCH_TORCH=0 build/bench_kernels 2>&1 | tee "$OUT/bench_kernels.txt" | grep -E "^\||ceilings" | tail -14
python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out /tmp/d12.bin --state-out /tmp/d12_state.bin 2>&1 | tail -2
export BT_PARITY_D12=/tmp/d12.bin:/tmp/d12_state.bin
BT_TEST_ONLY=matmul tests/run_all.sh build/tests/test_kernels_gpu 2>&1 | tee "$OUT/test_kernels.txt" | tail -12
BT_TEST_VERBOSE=1 BT_TEST_ONLY=matmul_epi build/tests/test_kernels_gpu 2>&1 | grep -E "^matmul_epi|info:" | head -30
tests/run_all.sh build/tests/test_ops_gpu build/tests/test_gpt2_gpu 2>&1 | tee "$OUT/test_gpu.txt" | tail -25
echo "tests done at $(( $(date +%s) - t0 )) s"
# the no-argument default (B picked to fit, -d 524288 by accumulation), shortened to 8 steps
timeout 120 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 -o "$OUT/default" 2>&1 | grep -E "^step|^B |auto micro" | sed -n '1,2p;$p' 
for B in ${TORCH_B:-32 64}; do
  [ $(( $(date +%s) - t0 )) -lt "${BUDGET:-360}" ] || break
  timeout 150 python3 bench/bench_gpt2_torch.py --config d12 --B "$B" --T 1024 --precision bf16 --compile --steps "$STEPS" --warmup 3 \
    --json-out "$OUT/torch.jsonl" 2>&1 | tail -1 | cut -c1-160
done
echo "=== summary ($(( $(date +%s) - t0 )) s)"; summary; grep -hE "passed, .* failed|parity" "$OUT/test_kernels.txt" "$OUT/test_gpu.txt" | tail -12
