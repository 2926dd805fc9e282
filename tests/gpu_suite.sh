#!/usr/bin/env bash
# gpu_suite.sh - every test that needs a GPU, one command, one summary table last (make test-gpu).
#
#   make test-gpu [SAN=0] [PARTS="unit resume"] [JOBS=16] [NOBUILD=1]      (or bash tests/gpu_suite.sh,
#                                                       the same settings as environment variables)
# Builds what it runs with make -k -jJOBS (default 16; a binary that fails to build is a failed check
# and the rest still runs), unless NOBUILD=1 (the binaries already in build/).
#
# Parts (PARTS: a space-separated subset, default all), each skipped, and said so, without what it needs:
#   fixtures   the PyTorch references (torch): tests/gpt2_ref.py regenerates the tiny fixture, which
#              tests/compare_fixture.py compares with the committed one, and writes GPT-2 124M's state
#              for test_gpt2_gpu's d12 parity (BT_PARITY_D12)
#   unit       every build/tests/test_*_gpu (tests/run_all.sh)
#   sanitizer  each of them under compute-sanitizer memcheck, quick mode (SAN=0 skips it)
#   resume     train_gpt2's checkpoints, bit for bit (tests/resume_check.py): GPT-2 124M bf16 (its
#              weights in two halves: --weight-copy halves, the default; against separate), fp32 and
#              fp8 resumed after step 4 (fp8 also: graph against eager, losses near bf16's), --offload
#              adamw against the state on the GPU bit for bit (halves and separate), --grad-dtype bf16
#              resumed (its losses near f32 gradients', less memory; auto the same bits; auto resuming
#              an f32 run stays f32; fp8 with bf16 gradients resumed), --grads lazy (the default) near
#              flat with less memory, two fresh --deterministic runs, kill -9 then --resume auto, the
#              CUDA graph run against --cuda-graph off; with 2+ GPUs --dp ddp / zero1 / zero2 resumed,
#              a 2-GPU checkpoint refused on one GPU, --init-from it on one GPU
#   interop    tests/hf_interop.py (transformers both ways, on the GPU and the CPU), tests/llama_parity.py
#              (llama.h's LlamaForCausalLM files, logits, loss and gradients, CPU and GPU) and
#              tests/ckpt_interop.py (safetensors both ways, with build/tests/test_ckpt)
#   eval       --eval-mc against transformers (tests/mc_torch.py, fp32, TF32 off) on the 64-item fixture:
#              GPT-2 124M trained 20 steps and exported, scored by --eval-only on the GPU (fp32, then bf16
#              for the record), and the s2 preset's initial weights on the CPU (the fixture test_eval reads)
#   examples   the README's build lines, the nvcc one included (tests/readme_commands.sh --gpu)
#   dist       2+ GPUs: tests/dist_parity.py (2 GPUs against 1; ddp, zero1, zero2; fp32, bf16), its
#              --graph cases (graph against eager, bit for bit), a rank killed mid-run
#   tp         2+ GPUs: tests/tp_parity.py, tp / cp modes against 1 GPU, checkpoints across tp and cp
#   tpzero     2+ GPUs: tests/tp_parity.py, ZeRO with tp / cp, checkpoints across those layouts
#   mlir       test_mlir_gpu built with MLIR (build/mlir: make MLIR=1 BUILD=build/mlir ...) and with the
#              kernels compiled ahead of time (build/mlir_aot: make mlir-aot), and both under memcheck;
#              built here when MLIR is installed, else run when those builds exist (MLIR_LIBS: a
#              folder of the MLIR/LLVM libraries for a machine without them)
# Data: data/ when it holds the Tiny Shakespeare shards and the tokenizer files, else make them.
# Logs in OUT (default /tmp/bt_gpu_suite); the 1.5 GB checkpoints in CKPT_DIR (default
# /tmp/bt_gpu_suite_ckpt), removed at the end. NVLink multicast stays off in every process.
# Exit status 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
B=${BUILD:-build}; OUT=${OUT:-/tmp/bt_gpu_suite}; C=${CKPT_DIR:-/tmp/bt_gpu_suite_ckpt}
PARTS=${PARTS:-fixtures unit sanitizer resume interop eval examples dist tp tpzero mlir}; SAN=${SAN:-1}
BIN=$B/train_gpt2_cuda
mkdir -p "$OUT"; rm -rf "$C"; mkdir -p "$C"
CUDA=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
GPU_TESTS=$(ls tests/test_*_gpu.cu | sed "s|tests/\(.*\)\.cu|$B/tests/\1|")
NG=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
[ "$NG" -ge 1 ] || { echo "gpu_suite: no GPU (nvidia-smi -L lists none)"; exit 1; }
has_py() { python3 -c "import $1" 2>/dev/null; }
want() { [[ " $PARTS " == *" $1 "* ]]; }
T0=$(date +%s)

# ---- the tally: passed / failed / skipped per part ----
declare -A NP NF NS
ORDER=()
tally() {   # tally PART PASSED FAILED SKIPPED
  [[ -v NP[$1] ]] || { ORDER+=("$1"); NP[$1]=0; NF[$1]=0; NS[$1]=0; }
  NP[$1]=$((NP[$1] + $2)); NF[$1]=$((NF[$1] + $3)); NS[$1]=$((NS[$1] + $4))
}
check() {   # check PART WHAT CONDITION-EXIT-STATUS: one check, printed
  if [ "$3" = 0 ]; then tally "$1" 1 0 0; echo "PASS $1: $2"; else tally "$1" 0 1 0; echo "FAIL $1: $2"; fi
}
skip() { tally "$1" 0 0 1; echo "SKIP $1: $2"; }
counts() {   # counts PART FILE: add the last "N passed, N failed[, N skipped]" line of FILE
  local l; l=$(grep -oE '[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?' "$2" | tail -1)
  if [ -z "$l" ]; then tally "$1" 0 1 0; echo "FAIL $1: $2 has no summary line"; return; fi
  read -r p _ f _ s _ <<< "${l//,/}"
  tally "$1" "$p" "$f" "${s:-0}"
}
passfail() {   # passfail PART FILE: add FILE's PASS / FAIL lines (tests/dist_parity.py, tests/tp_parity.py)
  local p f; p=$(grep -c '^PASS' "$2"); f=$(grep -c '^FAIL' "$2")
  [ $((p + f)) -gt 0 ] || f=1
  tally "$1" "$p" "$f" 0
}

# ---- build (MAKEFLAGS cleared: when make test-gpu runs this, this make is not its sub-make) ----
mk() { MAKEFLAGS='' make -k -j"${JOBS:-16}" "$@"; }
if [ -z "${NOBUILD:-}" ]; then
  if [ -e "${LLVM_DIR:-/usr/lib/llvm-19}/include/mlir-c/IR.h" ] && want mlir; then
    { mk mlir-aot && mk MLIR=1 BUILD=build/mlir build/mlir/tests/test_mlir_gpu; } > "$OUT/build_mlir.txt" 2>&1
    check build "the MLIR builds of test_mlir_gpu (make mlir-aot; MLIR=1 BUILD=build/mlir)" $?
  fi
  # shellcheck disable=SC2086  # GPU_TESTS is a list
  mk BUILD="$B" "$BIN" $GPU_TESTS "$B/hf_logits_cuda" "$B/llama_logits_cuda" "$B/llama_logits" "$B/tests/test_ckpt" > "$OUT/build.txt" 2>&1
  rc=$?; [ $rc = 0 ] || grep -E 'error|\*\*\*' "$OUT/build.txt" | head -20
  check build "make -k -j${JOBS:-16} $BIN, the CUDA tests, $B/hf_logits_cuda, $B/llama_logits(_cuda), $B/tests/test_ckpt" $rc
fi
DATA=(data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe)
for f in "${DATA[@]}"; do [ -f "$f" ] || { make -s "${DATA[@]}" || exit 1; break; }; done

# ---- fixtures ----
if want fixtures; then
  if has_py torch; then
    timeout 300 python3 tests/gpt2_ref.py --config tiny --model-out "$OUT/gpt2_tiny.bin" --state-out "$OUT/gpt2_tiny_state.bin" > "$OUT/fixture_tiny.txt" 2>&1
    timeout 60 python3 tests/compare_fixture.py tests/fixtures/gpt2_tiny_state.bin "$OUT/gpt2_tiny_state.bin" | tee -a "$OUT/fixture_tiny.txt"
    check fixtures "the tiny fixture regenerated (tests/gpt2_ref.py) against the committed one" "${PIPESTATUS[0]}"
    timeout 600 python3 tests/gpt2_ref.py --config d12 --B 4 --T 64 --model-out "$C/d12.bin" --state-out "$C/d12_state.bin" > "$OUT/fixture_d12.txt" 2>&1
    rc=$?; check fixtures "GPT-2 124M reference state written (for test_gpt2_gpu's d12 parity)" $rc
    [ $rc = 0 ] && export BT_PARITY_D12=$C/d12.bin:$C/d12_state.bin
  else
    skip fixtures "python3 has no torch"
  fi
fi

# ---- unit: the CUDA test binaries ----
if want unit; then
  # shellcheck disable=SC2086  # GPU_TESTS is a list
  tests/run_all.sh $GPU_TESTS 2>&1 | tee "$OUT/unit.txt"
  counts unit "$OUT/unit.txt"
fi

# ---- sanitizer ----
SANITIZER=$(command -v compute-sanitizer || echo "$CUDA/bin/compute-sanitizer")
memcheck() {   # memcheck PART NAME BINARY [ENV...]: BINARY (quick mode) under memcheck; API errors are the
  # tests' own (test_alloc_gpu asks for 1 PiB on purpose), so only memory errors count
  local part=$1 name=$2 bin=$3; shift 3
  env BT_TEST_QUICK=1 BT_PARITY_D12= "$@" timeout 900 "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$bin" > "$OUT/san_$name.txt" 2>&1
  local rc=$?   # before the message's $(...), which sets $? itself
  check "$part" "memcheck $name: $(grep -m1 'ERROR SUMMARY' "$OUT/san_$name.txt")" $rc
}
if want sanitizer; then
  if [ "$SAN" != 1 ]; then skip sanitizer "SAN=$SAN"
  elif [ ! -x "$SANITIZER" ]; then skip sanitizer "no compute-sanitizer"
  else for t in $GPU_TESTS; do memcheck sanitizer "$(basename "$t")" "$t"; done; fi
fi

# ---- resume: train_gpt2's checkpoints ----
ck() { printf '%s/ckpt_%09d.safetensors' "$1" "$2"; }
resume_check() {   # resume_check WHAT ARGS...: tests/resume_check.py, one check
  timeout 120 python3 tests/resume_check.py "${@:2}" > "$OUT/resume_check.txt" 2>&1
  local rc=$?   # before the message's $(...), which sets $? itself
  check resume "$1: $(tail -1 "$OUT/resume_check.txt")" $rc
}
train() {   # train NAME ARGS...: one train_gpt2 run, its log in $OUT/NAME
  timeout 300 "$BIN" "${@:2}" -o "$OUT/$1" > "$OUT/$1.txt" 2>&1 || echo "run $1: exit $?: $(tail -2 "$OUT/$1.txt")"
}
resume_pair() {   # resume_pair NAME WHAT ARGS...: a run checkpointing every 4 steps against one resumed
  local n=$1; shift  # from its step 4: later losses and the last checkpoint bit for bit
  train "${n}_a" "${@:2}" --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/${n}_a"
  train "${n}_b" "${@:2}" --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/${n}_b" --resume "$(ck "$C/${n}_a" 4)"
  resume_check "$1 resumed after step 4" --after 4 --log-a "$OUT/${n}_a/log.jsonl" --log-b "$OUT/${n}_b/log.jsonl" \
    --ckpt-a "$(ck "$C/${n}_a" "$S")" --ckpt-b "$(ck "$C/${n}_b" "$S")"
  rm -rf "$C/${n}_b"
}
near_and_less() {   # near_and_less A B BOUND WHAT: run B's train losses within BOUND of run A's at every step, its peak lower
  python3 - "$OUT/$1/log.jsonl" "$OUT/$2/log.jsonl" "$OUT/$1.txt" "$OUT/$2.txt" "$3" > "$OUT/$2_vs_$1.txt" 2>&1 <<'PY'
import json, re, sys
a, b = ([json.loads(l)["train_loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
mem = [int(re.findall(r"peak memory (\d+) MiB", open(p).read())[-1]) for p in sys.argv[3:5]]
d = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"largest train loss difference over {len(a)} steps: {d:.4f}; peak {mem[1]} MiB against {mem[0]} MiB")
sys.exit(0 if d < float(sys.argv[5]) and mem[1] < mem[0] else 1)
PY
  local rc=$?
  check resume "$4: $(tail -1 "$OUT/$2_vs_$1.txt")" $rc
}
if want resume; then
  S=8; D12=(-e d12 -b 16 -t 1024 -d 32768 -x "$S" -v 4 -m 2 -g 0 --deterministic --quiet)
  for p in bf16 fp32; do resume_pair "$p" "d12 $p" "${D12[@]}" --precision $p; done
  rm -rf "$C/fp32_a"
  # --precision fp8 (the block linears in FP8, delayed scaling): resumed bit for bit (fp8.state and
  # fp8.primed too), the CUDA graph (captured once the states are primed, after step 1) against eager,
  # and the losses within 0.1 of bf16's at every step (CPU: 0.0033 on s2; this is d12's first record)
  resume_pair fp8 "d12 fp8" "${D12[@]}" --precision fp8
  train fp8_eager "${D12[@]}" --precision fp8 --cuda-graph off --ckpt-dir "$C/fp8_eager"
  resume_check "fp8: the CUDA graph run against --cuda-graph off" --after 0 --log-a "$OUT/fp8_a/log.jsonl" \
    --log-b "$OUT/fp8_eager/log.jsonl" --ckpt-a "$(ck "$C/fp8_a" "$S")" --ckpt-b "$(ck "$C/fp8_eager" "$S")"
  python3 - "$OUT/bf16_a/log.jsonl" "$OUT/fp8_a/log.jsonl" > "$OUT/fp8_vs_bf16.txt" 2>&1 <<'PY'
import json, sys
a, b = ([json.loads(l)["train_loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"largest |fp8 - bf16| train loss over {len(a)} steps: {d:.4f} (bf16 {a[-1] if a else '-'}, fp8 {b[-1] if b else '-'} at the end)")
sys.exit(0 if d < 0.1 and b[-1] < b[0] else 1)
PY
  rc=$?
  check resume "d12 fp8 losses near bf16's: $(tail -1 "$OUT/fp8_vs_bf16.txt")" $rc
  rm -rf "$C/fp8_a" "$C/fp8_eager"
  # --grad-dtype bf16 (one micro-batch a step): resumed bit for bit; its losses within 0.05 of the
  # f32 gradients' at every step, its peak memory below theirs (the buffer: 2 bytes a parameter less);
  # auto (the default) is bf16 there: the same bits; auto resuming an f32 run goes on in f32, bit for
  # bit; fp8 with bf16 gradients resumed bit for bit
  D12_1=(-e d12 -b 16 -t 1024 -d 16384 -x "$S" -v 4 -m 2 -g 0 --deterministic --quiet --precision bf16)
  resume_pair gbf16 "d12 --grad-dtype bf16" "${D12_1[@]}" --grad-dtype bf16
  train gauto "${D12_1[@]}"
  resume_check "--grad-dtype auto with one micro-batch a step against bf16" --after 0 --log-a "$OUT/gbf16_a/log.jsonl" \
    --log-b "$OUT/gauto/log.jsonl"
  train gf32 "${D12_1[@]}" --grad-dtype f32 --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/gf32"
  train gf32_auto "${D12_1[@]}" --ckpt-every 4 --ckpt-keep 0 --ckpt-dir "$C/gf32_auto" --resume "$(ck "$C/gf32" 4)"
  resume_check "--grad-dtype auto resuming an f32 run stays f32" --after 4 --log-a "$OUT/gf32/log.jsonl" \
    --log-b "$OUT/gf32_auto/log.jsonl" --ckpt-a "$(ck "$C/gf32" "$S")" --ckpt-b "$(ck "$C/gf32_auto" "$S")"
  rm -rf "$C/gf32" "$C/gf32_auto"
  resume_pair gbf16_fp8 "d12 fp8, bf16 gradients" "${D12_1[@]/bf16/fp8}" --grad-dtype bf16
  rm -rf "$C/gbf16_fp8_a"
  train gf32_flat "${D12_1[@]}" --grad-dtype f32 --grads flat   # the buffers' dtypes compared whole (lazy ones hold none at the peak)
  train gflat "${D12_1[@]}" --grads flat
  near_and_less gf32_flat gflat 0.05 "d12 bf16 gradients near f32's, less memory (one flat buffer each)"
  # --grads lazy (the default: each block's gradients held from their first write to the update;
  # every run above and below has them, the graph runs against eager ones bit for bit) against one
  # flat buffer: the same gradients (test_optim), a norm summed per block (float rounding apart),
  # so losses within 0.001 at every step; with one micro-batch a step, less memory at the peak
  near_and_less gflat gauto 0.001 "d12 --grads lazy near flat, less memory"
  rm -rf "$C/gbf16_a"
  train bf16_fresh "${D12[@]}" --precision bf16
  resume_check "two fresh --deterministic bf16 runs" --after 0 --log-a "$OUT/bf16_a/log.jsonl" --log-b "$OUT/bf16_fresh/log.jsonl"
  train bf16_eager "${D12[@]}" --precision bf16 --cuda-graph off --ckpt-dir "$C/eager"
  resume_check "the CUDA graph run against --cuda-graph off" --after 0 --log-a "$OUT/bf16_a/log.jsonl" \
    --log-b "$OUT/bf16_eager/log.jsonl" --ckpt-a "$(ck "$C/bf16_a" "$S")" --ckpt-b "$(ck "$C/eager" "$S")"
  rm -rf "$C/eager"
  # --weight-copy separate (a bf16 copy of its own, ties to even) against the default halves (the
  # fp32 weights' high halves, ties away from zero): losses within 0.01 at every step, 2 bytes a
  # parameter less at the peak with halves
  train bf16_sep "${D12[@]}" --precision bf16 --weight-copy separate --ckpt-dir "$C/sep"
  near_and_less bf16_sep bf16_a 0.01 "d12 --weight-copy halves near separate, less memory"
  # --offload adamw: AdamW's m and v in pinned host memory, streamed through the GPU: the same bits
  # (its gradients one flat buffer: against --grads flat, whose gradient norm is summed the same
  # way), with the weights in halves (the default: each chunk's two halves streamed) and separate
  train bf16_flat "${D12[@]}" --precision bf16 --grads flat --ckpt-dir "$C/flat"
  train offload "${D12[@]}" --precision bf16 --offload adamw --ckpt-dir "$C/offload"
  resume_check "--offload adamw (halves) against the state on the GPU" --after 0 --log-a "$OUT/bf16_flat/log.jsonl" \
    --log-b "$OUT/offload/log.jsonl" --ckpt-a "$(ck "$C/flat" "$S")" --ckpt-b "$(ck "$C/offload" "$S")"
  rm -rf "$C/offload" "$C/flat"
  train bf16_sep_flat "${D12[@]}" --precision bf16 --weight-copy separate --grads flat --ckpt-dir "$C/sep_flat"
  train offload_sep "${D12[@]}" --precision bf16 --offload adamw --weight-copy separate --ckpt-dir "$C/offload_sep"
  resume_check "--offload adamw --weight-copy separate against the state on the GPU" --after 0 --log-a "$OUT/bf16_sep_flat/log.jsonl" \
    --log-b "$OUT/offload_sep/log.jsonl" --ckpt-a "$(ck "$C/sep_flat" "$S")" --ckpt-b "$(ck "$C/offload_sep" "$S")"
  rm -rf "$C/offload_sep" "$C/sep" "$C/sep_flat"
  # kill -9 at a random step after the first checkpoint, then --resume auto
  k=$((3 + RANDOM % (S - 4)))
  "$BIN" "${D12[@]}" --precision bf16 --ckpt-every 2 --ckpt-dir "$C/kill" -o "$OUT/kill" > "$OUT/kill.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do
    [ "$(cat "$OUT/kill/log.jsonl" 2>/dev/null | wc -l)" -ge "$k" ] && break
    kill -0 "$pid" 2>/dev/null || break; sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  killed=$(cat "$OUT/kill/log.jsonl" 2>/dev/null | wc -l)
  train kill2 "${D12[@]}" --precision bf16 --ckpt-every 2 --ckpt-dir "$C/kill" --resume auto
  from=$(grep -o 'after step [0-9]*' "$OUT/kill2.txt" | grep -o '[0-9]*$'); from=${from:-0}
  resume_check "kill -9 after step $killed, --resume auto (from step $from)" --after "$from" --log-a "$OUT/bf16_a/log.jsonl" \
    --log-b "$OUT/kill2/log.jsonl" --ckpt-a "$(ck "$C/bf16_a" "$S")" --ckpt-b "$(ck "$C/kill" "$S")"
  rm -rf "$C/kill" "$C/bf16_a"
  # the Llama preset through the same trainer: resumed bit for bit, the CUDA graph against eager
  L125=(-e l125m -b 16 -t 1024 -d 32768 -x "$S" -v 4 -m 2 -g 0 --deterministic --quiet --precision bf16)
  resume_pair llama "Llama l125m bf16" "${L125[@]}"
  train llama_eager "${L125[@]}" --cuda-graph off --ckpt-dir "$C/llama_eager"
  resume_check "Llama l125m: the CUDA graph run against --cuda-graph off" --after 0 --log-a "$OUT/llama_a/log.jsonl" \
    --log-b "$OUT/llama_eager/log.jsonl" --ckpt-a "$(ck "$C/llama_a" "$S")" --ckpt-b "$(ck "$C/llama_eager" "$S")"
  rm -rf "$C/llama_a" "$C/llama_eager"
  L125_FP8=(-e l125m -b 16 -t 1024 -d 32768 -x "$S" -v 4 -m 2 -g 0 --deterministic --quiet --precision fp8)
  resume_pair llama_fp8 "Llama l125m fp8" "${L125_FP8[@]}"
  rm -rf "$C/llama_fp8_a"
  if [ "$NG" -ge 2 ]; then
    D2=(--nproc 2 -e d12 -b 8 -t 1024 -d 32768 -x "$S" -v 4 -m 2 -g 0 --deterministic --quiet --precision bf16)
    for m in ddp zero1 zero2; do resume_pair "$m" "2 GPUs --dp $m" "${D2[@]}" --dp $m; done
    timeout 300 "$BIN" -e d12 -b 8 -t 1024 -d 32768 -x "$S" -v 4 -m 2 -g 0 --deterministic --precision bf16 \
      --resume "$(ck "$C/zero1_a" 4)" > "$OUT/world1.txt" 2>&1
    rc=$?; named=$(grep -c 'train.world' "$OUT/world1.txt")
    check resume "a 2-GPU checkpoint resumed on 1 GPU is refused (exit $rc, naming train.world)" $(( rc == 1 && named > 0 ? 0 : 1 ))
    train weights1 -b 16 -t 1024 -d 16384 -x 3 -v 0 -g 0 --init-from "$(ck "$C/zero1_a" "$S")"
    [ "$(grep -c . "$OUT/weights1/log.jsonl" 2>/dev/null)" = 3 ]
    check resume "--init-from a 2-GPU zero1 checkpoint, 3 steps on 1 GPU" $?
    rm -rf "$C"/ddp_a "$C"/zero1_a "$C"/zero2_a
  else
    skip resume "the 2-GPU resumes: $NG GPU"
  fi
fi

# ---- interop: Hugging Face and safetensors ----
if want interop; then
  if has_py transformers && has_py safetensors && has_py numpy; then
    for d in cuda cpu; do
      timeout 900 python3 tests/hf_interop.py --train "$BIN" --logits "$B/hf_logits_cuda" --device $d --out "$C/hf_$d" > "$OUT/hf_$d.txt" 2>&1
      counts interop "$OUT/hf_$d.txt"; grep -E '^FAIL' "$OUT/hf_$d.txt"; tail -1 "$OUT/hf_$d.txt"
    done
    timeout 900 python3 tests/llama_parity.py --no-build --cpu "$B/llama_logits" --cuda "$B/llama_logits_cuda" --out "$C/llama" > "$OUT/llama_parity.txt" 2>&1
    counts interop "$OUT/llama_parity.txt"; grep -E '^FAIL' "$OUT/llama_parity.txt"; tail -2 "$OUT/llama_parity.txt" | head -1
  else
    skip interop "tests/hf_interop.py, tests/llama_parity.py: python3 has no transformers, safetensors or numpy"
  fi
  if has_py safetensors && has_py torch; then
    rm -rf "$C/st" && mkdir -p "$C/st"
    { python3 tests/ckpt_interop.py write "$C/st" && BT_CKPT_INTEROP_DIR=$C/st "$B/tests/test_ckpt" && python3 tests/ckpt_interop.py check "$C/st"; } \
      > "$OUT/ckpt_interop.txt" 2>&1
    rc=$?; counts interop "$OUT/ckpt_interop.txt"; tail -1 "$OUT/ckpt_interop.txt"
    [ $rc = 0 ] || check interop "tests/ckpt_interop.py with $B/tests/test_ckpt (see $OUT/ckpt_interop.txt)" $rc
  else
    skip interop "tests/ckpt_interop.py: python3 has no safetensors or torch"
  fi
fi

# ---- eval: the multiple-choice score against transformers ----
if want eval; then
  if has_py transformers && has_py torch; then
    MC=tests/fixtures/mc_wikitext.jsonl E=$C/eval
    rm -rf "$E"; mkdir -p "$E"
    { "$BIN" -e d12 -x 20 -g 0 -v 0 --export-hf "$E/d12" &&
      "$BIN" --eval-only --init-from "$E/d12" --precision fp32 -v 0 --eval-mc $MC -o "$E/fp32" &&
      python3 tests/mc_torch.py --model "$E/d12" --set $MC --tokenizer data --ours "$E/fp32/eval_mc.jsonl" --device cuda; } > "$OUT/eval_gpu.txt" 2>&1
    rc=$?; grep -E 'accuracy|PASS|FAIL' "$OUT/eval_gpu.txt"; check eval "--eval-mc on the GPU (fp32) against transformers, GPT-2 124M after 20 steps" $rc
    { "$BIN" --eval-only --init-from "$E/d12" -v 0 --eval-mc $MC -o "$E/bf16" &&
      python3 tests/mc_torch.py --model "$E/d12" --set $MC --tokenizer data --ours "$E/bf16/eval_mc.jsonl" --device cuda --tol 1; } > "$OUT/eval_bf16.txt" 2>&1
    grep -E 'accuracy|PASS|FAIL' "$OUT/eval_bf16.txt"   # bf16: the differences recorded, not checked
    { "$BIN" --device cpu -e s2 -x 0 -g 0 -v 0 --export-hf "$E/s2" &&
      "$BIN" --device cpu --eval-only -e s2 -v 0 --eval-mc $MC -o "$E/s2cpu" &&
      python3 tests/mc_torch.py --model "$E/s2" --set $MC --tokenizer data --device cpu --out "$OUT/mc_wikitext_s2_hf.json" \
        --ours "$E/s2cpu/eval_mc.jsonl"; } > "$OUT/eval_cpu.txt" 2>&1
    rc=$?; grep -E 'accuracy|PASS|FAIL' "$OUT/eval_cpu.txt"; check eval "--eval-mc on the CPU against transformers, s2 preset (the fixture: $OUT/mc_wikitext_s2_hf.json)" $rc
  else
    skip eval "tests/mc_torch.py: python3 has no transformers or torch"
  fi
fi

# ---- examples: the README's commands, its nvcc line with a GPU ----
if want examples; then
  tests/readme_commands.sh --gpu > "$OUT/examples.txt" 2>&1
  cat "$OUT/examples.txt"
  counts examples "$OUT/examples.txt"
fi

# ---- dist, tp, tpzero: two GPUs ----
if want dist; then
  if [ "$NG" -lt 2 ]; then skip dist "$NG GPU"
  else
    timeout 1200 python3 tests/dist_parity.py "$BIN" "$OUT/dist_parity" --steps 10 2>&1 | tee "$OUT/dist_parity.txt"
    passfail dist "$OUT/dist_parity.txt"
    timeout 600 python3 tests/dist_parity.py "$BIN" "$OUT/dist_graph" --graph 2>&1 | tee "$OUT/dist_graph.txt"
    passfail dist "$OUT/dist_graph.txt"
    # a rank killed mid-run: the other stops, naming it, and the job exits non-zero within 90 s
    "$BIN" --nproc 2 -e d12 -b 8 -t 1024 -d 16384 -x 100000 -v 0 -g 0 --nccl-timeout 30 > "$OUT/fault.txt" 2>&1 &
    launcher=$!
    sleep 25
    victim=$(pgrep -P "$launcher" | sort -n | tail -1)   # the launcher's children are the ranks
    t0=$(date +%s); [ -n "$victim" ] && kill -9 "$victim"
    for _ in $(seq 1 900); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$launcher" 2>/dev/null; then   # still running: this check fails, and the job goes
      for r in $(pgrep -P "$launcher"); do kill -9 "$r"; done; kill -9 "$launcher"
    fi
    wait "$launcher"; rc=$?
    said=$(grep -m1 -E 'died|killed|failed' "$OUT/fault.txt")
    ok=$(( rc != 0 && ${#said} > 0 ? 0 : 1 ))
    check dist "rank 1 killed: the job ended $(( $(date +%s) - t0 )) s later, exit $rc: ${said:-no rank named}" $ok
  fi
fi
if want tp; then
  if [ "$NG" -lt 2 ]; then skip tp "$NG GPU"
  else
    timeout 1800 python3 tests/tp_parity.py "$BIN" "$OUT/tp_parity" --steps 10 --timeout 90 --ckpt-layouts tp,cp 2>&1 | tee "$OUT/tp_parity.txt"
    passfail tp "$OUT/tp_parity.txt"
  fi
fi
if want tpzero; then
  if [ "$NG" -lt 2 ]; then skip tpzero "$NG GPU"
  else
    timeout 1800 python3 tests/tp_parity.py "$BIN" "$OUT/tp_zero" --steps 10 --timeout 90 --modes cp_zero1,cp_zero2,tp_zero1,tp_sp_zero2 \
      --ckpt-layouts cp_zero1,tp_zero1 2>&1 | tee "$OUT/tp_zero.txt"
    passfail tpzero "$OUT/tp_zero.txt"
  fi
fi

# ---- mlir: the JIT (MLIR-linked) and ahead-of-time builds of test_mlir_gpu ----
if want mlir; then
  ML=(env "BT_MLIR_CUDA_PATH=$CUDA" "BT_MLIR_CACHE_DIR=$C/mlir_cache")
  [ -n "${MLIR_LIBS:-}" ] && ML+=("LD_LIBRARY_PATH=$MLIR_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  if [ -x build/mlir/tests/test_mlir_gpu ]; then
    "${ML[@]}" timeout 300 build/mlir/tests/test_mlir_gpu > "$OUT/mlir_jit.txt" 2>&1
    counts mlir "$OUT/mlir_jit.txt"; tail -1 "$OUT/mlir_jit.txt"
    [ "$SAN" = 1 ] && [ -x "$SANITIZER" ] && memcheck mlir test_mlir_gpu_jit build/mlir/tests/test_mlir_gpu "${ML[@]:1}"
  else
    skip mlir "no build/mlir/tests/test_mlir_gpu (make MLIR=1 BUILD=build/mlir build/mlir/tests/test_mlir_gpu)"
  fi
  if [ -d build/mlir_aot ] && [ -x "$B/tests/test_mlir_gpu" ]; then
    env -u LD_LIBRARY_PATH BT_MLIR_AOT_DIR=build/mlir_aot timeout 300 "$B/tests/test_mlir_gpu" > "$OUT/mlir_aot.txt" 2>&1
    counts mlir "$OUT/mlir_aot.txt"; tail -1 "$OUT/mlir_aot.txt"
    [ "$SAN" = 1 ] && [ -x "$SANITIZER" ] && memcheck mlir test_mlir_gpu_aot "$B/tests/test_mlir_gpu" BT_MLIR_AOT_DIR=build/mlir_aot
  else
    skip mlir "no build/mlir_aot (make mlir-aot, on a machine with MLIR)"
  fi
fi
rm -rf "$C"

# ---- the summary ----
echo
echo "=== gpu_suite on $NG x $(head -1 "$OUT/gpu.txt" | cut -d, -f1), $(date -u +%Y-%m-%d), $(( $(date +%s) - T0 )) s (logs: $OUT)"
tp=0; tf=0; ts=0
printf '| %-9s | %6s | %6s | %7s |\n| --- | ---: | ---: | ---: |\n' part passed failed skipped
for p in "${ORDER[@]}"; do
  printf '| %-9s | %6d | %6d | %7d |\n' "$p" "${NP[$p]}" "${NF[$p]}" "${NS[$p]}"
  tp=$((tp + NP[$p])); tf=$((tf + NF[$p])); ts=$((ts + NS[$p]))
done
echo "gpu_suite: $tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]
