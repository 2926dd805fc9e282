#!/usr/bin/env bash
# One call on the two-GPU machine (nvidia-h200-x2): ZeRO (--dp zero1|zero2) composed with tensor
# and context parallelism (issue 13), in under 300 s.
#   1. tests/tp_parity.py, --deterministic, GPT-2 124M (d12), B 4 x T 1024, PSTEPS steps, fp32 and
#      bf16 against one GPU on the same batch (fp32 loss within 1e-5 relative; bf16 within the bound
#      measured in the same call, 2 x the 1-GPU bf16 run's distance from fp32; gathered weights):
#        cp_zero1     --cp 2 --dp zero1       m and v in two shards over the cp ranks
#        cp_zero2     --cp 2 --dp zero2       + each micro-batch's gradients reduced to their owner
#        tp_zero1     --tp 2 --dp zero1       a ZeRO group of one rank per tp index (the norm's
#                                             whole/split parts, the padded tp buffer)
#        tp_sp_zero2  --tp 2 --sp --dp zero2  the replicated tensors' gradients summed over tp from
#                                             zero2's fp32 shard sum
#      and the checkpoint cases for --cp 2 --dp zero1 and --tp 2 --dp zero1 (fp32, CSTEPS steps, a
#      checkpoint every half): ckpt_file (the checkpoint is the 1-GPU file: params, m, v within
#      1e-4), resume_same (resumed in the layout: bit for bit the uninterrupted run), resume_1gpu
#      (one GPU resumes it on the 1-GPU losses), resume_from1 (the layout resumes the 1-GPU
#      checkpoint on its own losses)
#   2. speed, bf16, --cp 2, B 8 x T 1024, STEPS steps: ddp, zero1, zero2: tokens/s (median of the
#      steps after the second) and rank 0's peak allocated memory (the cp ranks are alike)
#   3. the summary: every PASS/FAIL and speed line again, then "zerotp_gpu: N passed, M failed"
# env: NOBUILD=1 uses the binaries of .carry/bins.tar.xz (bench/carry_bins.sh build/train_gpt2_cuda);
# OUT (default /tmp/bt_out); PSTEPS (default 20), CSTEPS (default 8), STEPS (default 8);
# SKIP_SPEED=1; BIN, and MODEL, PB, PT, PREC (default fp32,bf16) for part 1. A CPU smoke test of
# the script's logic (bf16 needs a GPU; python3 with numpy on the PATH):
#   make build/train_gpt2_cpu && BIN=bench/cpu_ranks_bin.sh MODEL=s2 PB=2 PT=16 PREC=fp32 SKIP_SPEED=1 NOBUILD=1 bench/zerotp_gpu.sh
# (the stand-in starts two CPU ranks and drops --dp, which tp/cp refuse on CPUs: it checks the
# plumbing and the summary, not ZeRO).
# Every command runs under `timeout`; NVLink multicast stays off in every process.
NAME=zerotp_gpu BUILD_S=280; source "$(dirname "$0")/tp_prelude.sh"   # env, OUT, data, BIN, T0/T1
LOG="$OUT/zerotp.txt"

# ---- 1. parity and the checkpoint cases ----
timeout 200 python3 tests/tp_parity.py "$BIN" "$OUT/zerotp" --model "${MODEL:-d12}" --B "${PB:-4}" --T "${PT:-1024}" --steps "${PSTEPS:-20}" \
  --modes cp_zero1,cp_zero2,tp_zero1,tp_sp_zero2 --precisions "${PREC:-fp32,bf16}" --ckpt-layouts cp_zero1,tp_zero1 --ckpt-steps "${CSTEPS:-8}" \
  --timeout 45 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ]; then echo "FAIL: tp_parity.py ran past 200 s (timeout)" | tee -a "$LOG"
elif [ "$rc" -ne 0 ] && ! grep -q "^FAIL" "$LOG"; then echo "FAIL: tp_parity.py exited $rc (see $LOG)" | tee -a "$LOG"; fi

# ---- 2. speed ----
speed() {   # speed NAME ARGS...: one bf16 run; its median tok/s after the second step, rank 0's peak
  local name=$1; shift
  rm -rf "$OUT/speed_$name"
  timeout 28 "$BIN" --nproc 2 "$@" -e d12 -b 8 -t 1024 -d 8192 -x "${STEPS:-8}" -v 0 -g 0 --precision bf16 --quiet \
    -o "$OUT/speed_$name" > "$OUT/speed_$name.log" 2>&1 || { echo "FAIL: speed $name: exit $? (see $OUT/speed_$name.log)"; return; }
  python3 - "$OUT/speed_$name/log.jsonl" "$name" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tps = [r["tok_per_s"] for r in rows if r["step"] > 2]
print(f"speed {sys.argv[2]}: {statistics.median(tps):,.0f} tok/s (median of steps 3..{rows[-1]['step']}), "
      f"peak {max(r['peak_allocated_mib'] for r in rows):.0f} MiB allocated per GPU (rank 0)")
EOF
}
if [ -z "${SKIP_SPEED:-}" ] && [ $(( $(date +%s) - T1 )) -gt 210 ]; then
  echo "speed: skipped (past 210 s: three runs would pass the 300 s budget)" | tee -a "$LOG"
elif [ -z "${SKIP_SPEED:-}" ]; then
  for dp in ddp zero1 zero2; do speed "cp2_$dp" --cp 2 --dp "$dp" | tee -a "$LOG"; done
fi

# ---- 3. summary ----
echo "---- summary ($(( $(date +%s) - T1 )) s) ----"
grep -E "^(PASS|FAIL)" "$LOG"
grep -E "^speed" "$LOG"
pass=$(grep -c "^PASS" "$LOG"); fail=$(grep -c "^FAIL" "$LOG")
echo "zerotp_gpu: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
