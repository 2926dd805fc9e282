#!/usr/bin/env bash
# One call on the two-GPU machine (nvidia-h200-x2): tensor and context parallelism of train_gpt2
# tested and measured against one GPU and against PyTorch's own, in under 480 s.
#   1. tests/tp_parity.py: GPT-2 124M, B 4 x T 1024, 20 steps, fp32 and bf16, one GPU against
#      --tp 2, --tp 2 --sp, --tp 2 --async-tp, --cp 2 with each --cp-comm (per-step losses)
#   2. tokens/s and peak memory per GPU (rank 0's allocator), bf16, T 1024, B 8 (one micro-batch):
#      1 GPU, tp=2 (sync, async, sp, sp+async), cp=2 (ring, allgather, alltoall); the forward and
#      backward time of a step (train_gpt2's fwd_ms / bwd_ms, compute-stream events) for sync
#      against async TP: what async hides is the difference
#   3. long contexts, B 1: T 16384 and 32768 on 1 GPU and with cp=2 (ring, allgather), model
#      d12_32k (d12's shape with a 32768-row position table: the only change is wpe)
#   4. PyTorch (bench/bench_tpcp_torch.py): tp=2 at T 1024, cp=2 (allgather, alltoall rotation) at
#      T 1024, 16384 and 32768, 1 GPU at each T
#   5. the table (last)
# env: NOBUILD=1 uses the binaries of .carry/bins.tar.xz (bench/carry_bins.sh); OUT (default
# /tmp/bt_out); STEPS (bench steps, default 8); PSTEPS (parity steps, default 20);
# PARITY_PRECS (default "fp32,bf16"); SKIP_PARITY=1, SKIP_TORCH=1; BUDGET (seconds, default 470:
# a command that would start with less than 15 s left is skipped and said so).
# NVLink multicast stays off in every process (the three variables below).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT" data
cp -n .carry/data/* data/ 2>/dev/null
[ -n "${NOBUILD:-}" ] && [ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
BIN=./build/train_gpt2_cuda
[ -z "${NOBUILD:-}" ] && make -j32 build/train_gpt2_cuda 2>&1 | grep -E "error" | head
[ -x "$BIN" ] || { echo "tpcp_gpu: no $BIN (build it, or NOBUILD=1 with .carry/bins.tar.xz)"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
T0=$(date +%s); BUDGET=${BUDGET:-470}; STEPS=${STEPS:-8}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# limited NAME SECONDS CMD...: CMD under a timeout of min(SECONDS, the time left), or skipped
limited() {
  local name=$1 secs=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 15 ]; then echo "$name: skipped (time budget)"; return 0; fi
  [ "$secs" -gt "$l" ] && secs=$l
  timeout "$secs" "$@"; local rc=$?
  [ $rc -ne 0 ] && echo "$name: exit $rc$([ $rc -eq 124 ] && echo ' (timeout)')"
  return 0
}

# ---- 1. parity ----
if [ -z "${SKIP_PARITY:-}" ]; then
  limited parity 220 python3 tests/tp_parity.py "$BIN" "$OUT/tp_parity" --steps "${PSTEPS:-20}" --timeout 40 \
    --precisions "${PARITY_PRECS:-fp32,bf16}" 2>&1 | tee "$OUT/tp_parity.txt"
fi

# ---- 2./3. train_gpt2 ----
bt() {   # bt NAME SECONDS ARGS...: one run, its log.jsonl in $OUT/bt_NAME
  local name=$1 secs=$2; shift 2
  rm -rf "$OUT/bt_$name"
  limited "bt_$name" "$secs" "$BIN" "$@" -v 0 -g 0 --precision bf16 -x "$STEPS" -o "$OUT/bt_$name" --quiet > "$OUT/bt_$name.log" 2>&1
  grep -E "^error|rank [0-9].*error|out of memory" "$OUT/bt_$name.log" | head -3
}
S=(-e d12 -b 8 -t 1024 -d 8192)
bt one_1024 40 "${S[@]}"
bt tp2_1024 40 --nproc 2 --tp 2 "${S[@]}"
bt tp2async_1024 40 --nproc 2 --tp 2 --async-tp "${S[@]}"
bt tp2sp_1024 40 --nproc 2 --tp 2 --sp "${S[@]}"
bt tp2spasync_1024 40 --nproc 2 --tp 2 --sp --async-tp "${S[@]}"
for m in ring allgather alltoall; do bt "cp2${m}_1024" 40 --nproc 2 --cp 2 --cp-comm $m "${S[@]}"; done
for T in 16384 32768; do
  L=(-e d12_32k -b 1 -t $T -d $T)
  bt "one_$T" 60 "${L[@]}"
  for m in ring allgather; do bt "cp2${m}_$T" 60 --nproc 2 --cp 2 --cp-comm $m "${L[@]}"; done
done

# ---- 4. PyTorch ----
TJ="$OUT/torch_tpcp.jsonl"; rm -f "$TJ"
tq() { local name=$1; shift; limited "torch_$name" 90 "$@" --steps "$STEPS" --warmup 3 --json-out "$TJ" > "$OUT/torch_$name.log" 2>&1; tail -1 "$OUT/torch_$name.log" | cut -c1-160; }
if [ -z "${SKIP_TORCH:-}" ]; then
  TR=(torchrun --nproc_per_node 2 bench/bench_tpcp_torch.py)
  tq single_1024 python3 bench/bench_tpcp_torch.py --mode single --B 8 --T 1024
  tq tp2_1024 "${TR[@]}" --mode tp --B 8 --T 1024
  for r in allgather alltoall; do tq "cp2${r}_1024" "${TR[@]}" --mode cp --rotate $r --B 8 --T 1024; done
  for T in 16384 32768; do
    tq "single_$T" python3 bench/bench_tpcp_torch.py --mode single --B 1 --T $T
    tq "cp2allgather_$T" "${TR[@]}" --mode cp --rotate allgather --B 1 --T $T
  done
fi

# ---- 5. the table ----
python3 - "$OUT" <<'EOF'
import json, os, statistics, sys
out = sys.argv[1]
def bt(name):
    p = os.path.join(out, f"bt_{name}", "log.jsonl")
    if not os.path.exists(p):
        log = os.path.join(out, f"bt_{name}.log")
        txt = open(log).read() if os.path.exists(log) else ""
        return {"status": "OOM" if "out of memory" in txt.lower() else "failed/skipped"}
    rows = [json.loads(l) for l in open(p) if l.strip()]
    rows = rows[2:] or rows                     # the first steps warm up (matmul plans, NCCL)
    r = {"tok": statistics.median(x["tok_per_s"] for x in rows), "mib": max(x["peak_allocated_mib"] for x in rows),
         "ms": statistics.median(x["ms"] for x in rows)}
    if "fwd_ms" in rows[0]:
        r["fwd"] = statistics.median(x["fwd_ms"] for x in rows); r["bwd"] = statistics.median(x["bwd_ms"] for x in rows)
    return r
torch = {}
tj = os.path.join(out, "torch_tpcp.jsonl")
for l in (open(tj) if os.path.exists(tj) else []):
    j = json.loads(l)
    key = ("single" if j["mode"] == "single" else f"{j['mode']}2{j['rotate'] or ''}") + f"_{j['T']}"
    torch[key] = j
def fmt(r):
    return f"{r['tok']:>10.0f} {r['mib']:>9.0f}" if "tok" in r else f"{r['status']:>20}"
print("\n=== train_gpt2 tensor / context parallelism, GPT-2 124M, bf16 (tok/s: global; MiB: rank 0's peak) ===")
print(f"{'run':<26}{'tok/s':>10} {'peak MiB':>9} {'vs 1 GPU':>9}   {'PyTorch tok/s':>13} {'MiB':>7} {'ours/torch':>10}")
tmap = {"one": "single", "tp2": "tp2", "cp2allgather": "cp2allgather", "cp2alltoall": "cp2alltoall", "cp2ring": "cp2alltoall"}
for T, names in ((1024, ["one", "tp2", "tp2async", "tp2sp", "tp2spasync", "cp2ring", "cp2allgather", "cp2alltoall"]),
                 (16384, ["one", "cp2ring", "cp2allgather"]), (32768, ["one", "cp2ring", "cp2allgather"])):
    base = bt(f"one_{T}")
    for n in names:
        r = bt(f"{n}_{T}")
        ratio = f"{r['tok'] / base['tok']:>8.2f}x" if "tok" in r and "tok" in base else f"{'-':>9}"
        tk = tmap.get(n); t = torch.get(f"{tk}_{T}") if tk else None
        tcol = ""
        if t:
            if t.get("tokens_per_s"):
                tcol = f"   {t['tokens_per_s']:>13.0f} {t['peak_allocated_mib']:>7.0f} {r['tok'] / t['tokens_per_s'] if 'tok' in r else float('nan'):>9.2f}x"
            else:
                tcol = f"   {'OOM' if t.get('oom') else 'error':>13} ({t.get('error', '')[:40]})"
        print(f"{n + ' T=' + str(T):<26}{fmt(r)} {ratio}{tcol}")
print("(PyTorch column: tp2 = torch.distributed.tensor.parallel on the blocks; cp2* = context_parallel with that K/V rotation;"
      " ring rows are set against torch's alltoall rotation, its ring-style pass-KV)")
print("\n=== async TP: compute-stream time per stage of a step (T=1024, B 8; medians) ===")
print(f"{'stage':<10}{'tp2 sync':>10}{'tp2 async':>11}{'hidden':>9}   {'tp2+sp sync':>12}{'tp2+sp async':>13}{'hidden':>9}")
a, b, c, d = bt("tp2_1024"), bt("tp2async_1024"), bt("tp2sp_1024"), bt("tp2spasync_1024")
for st in ("fwd", "bwd", "ms"):
    cell = lambda r: r.get(st, float("nan"))
    print(f"{st + ' ms' if st != 'ms' else 'step ms':<10}{cell(a):>10.2f}{cell(b):>11.2f}{cell(a) - cell(b):>9.2f}   "
          f"{cell(c):>12.2f}{cell(d):>13.2f}{cell(c) - cell(d):>9.2f}")
print("(hidden = sync - async: the collective time async TP overlaps with its matmuls; negative = the chunked GEMMs cost more than they hide)")
EOF
echo "tpcp_gpu: done in $(( $(date +%s) - T0 )) s"
