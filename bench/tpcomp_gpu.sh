#!/usr/bin/env bash
# One call on the two-GPU machine (nvidia-h200-x2): tensor and context parallelism composed with
# checkpoints, --init-from and samples (issue 13), in under 560 s.
#   1. tests/tp_parity.py, fp32, --deterministic, GPT-2 124M (d12), B 4 x T 1024:
#      - --tp 2 and --tp 2 --sp against one GPU over PSTEPS steps (the sp run checks the
#        replicated tensors' gradients summed as one span: one all-reduce a step)
#      - the checkpoint cases for --tp 2 and --cp 2 (CSTEPS steps, a checkpoint every half):
#        ckpt_file (the checkpoint is the 1-GPU file, params/m/v within 1e-3/1e-3/1e-2 relative),
#        resume_same (resumed in the same layout: bit for bit the uninterrupted run, losses and
#        last checkpoint), resume_1gpu (one GPU resumes it: the 1-GPU losses within 1e-5),
#        resume_from1 (the layout resumes the 1-GPU checkpoint: its losses within 1e-5),
#        init_from tp (--init-from with --tp 2: the 1-GPU first loss within 1e-5), sample tp
#        (-s with --tp 2: samples from the model gathered on rank 0)
#   2. speed, bf16, B 8 x T 1024, STEPS steps: --tp 2 and --tp 2 --sp tokens/s (median of the steps
#      after the second), to set beside bench/RESULTS.md's 438,503 and 286,786 tok/s (sp before
#      its replicated gradients went as one all-reduce)
#   3. the summary: every PASS/FAIL line again, then "tpcomp_gpu: N passed, M failed"
# env: NOBUILD=1 uses the binaries of .carry/bins.tar.xz (bench/carry_bins.sh); OUT (default
# /tmp/bt_out); PSTEPS (default 10), CSTEPS (default 8), STEPS (default 8); SKIP_SPEED=1; BIN, and
# MODEL, PB, PT for part 1 (a CPU smoke test of the script: a stand-in BIN whose --nproc 2 starts
# two CPU ranks, MODEL=s2 PB=2 PT=16 SKIP_SPEED=1 NOBUILD=1).
# Every command runs under `timeout`; NVLink multicast stays off in every process.
NAME=tpcomp_gpu BUILD_S=300; source "$(dirname "$0")/tp_prelude.sh"   # env, OUT, data, BIN, T0/T1

# ---- 1. parity and the checkpoint cases ----
timeout 430 python3 tests/tp_parity.py "$BIN" "$OUT/tpcomp" --model "${MODEL:-d12}" --B "${PB:-4}" --T "${PT:-1024}" --steps "${PSTEPS:-10}" \
  --modes tp,tp_sp --precisions fp32 --ckpt-layouts tp,cp --ckpt-steps "${CSTEPS:-8}" --timeout 60 2>&1 | tee "$OUT/tpcomp.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 124 ] && echo "FAIL: tp_parity.py ran past 430 s (timeout)" | tee -a "$OUT/tpcomp.txt"

# ---- 2. speed ----
speed() {   # speed NAME ARGS...: one bf16 run; its median tok/s after the second step
  local name=$1; shift
  rm -rf "$OUT/speed_$name"
  timeout 60 "$BIN" --nproc 2 "$@" -e d12 -b 8 -t 1024 -d 8192 -x "${STEPS:-8}" -v 0 -g 0 --precision bf16 --quiet \
    -o "$OUT/speed_$name" > "$OUT/speed_$name.log" 2>&1 || { echo "speed $name: exit $? (see $OUT/speed_$name.log)"; return; }
  python3 - "$OUT/speed_$name/log.jsonl" "$name" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tps = [r["tok_per_s"] for r in rows if r["step"] > 2]
print(f"speed {sys.argv[2]}: {statistics.median(tps):,.0f} tok/s (median of steps 3..{rows[-1]['step']}), peak {rows[-1]['peak_allocated_mib']:.0f} MiB")
EOF
}
if [ -z "${SKIP_SPEED:-}" ] && [ $(( $(date +%s) - T0 )) -gt 440 ]; then
  echo "speed: skipped (past 440 s: the call's 600 s would not hold both runs)" | tee -a "$OUT/tpcomp.txt"
elif [ -z "${SKIP_SPEED:-}" ]; then
  speed tp2 --tp 2 | tee -a "$OUT/tpcomp.txt"
  speed tp2_sp --tp 2 --sp | tee -a "$OUT/tpcomp.txt"
fi

# ---- 3. summary ----
echo "---- summary ----"
grep -E "^(PASS|FAIL)" "$OUT/tpcomp.txt"
grep -E "^speed" "$OUT/tpcomp.txt"
pass=$(grep -c "^PASS" "$OUT/tpcomp.txt"); fail=$(grep -c "^FAIL" "$OUT/tpcomp.txt")
echo "tpcomp_gpu: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
