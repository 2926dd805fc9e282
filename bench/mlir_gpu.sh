#!/usr/bin/env bash
# bt_mlir.h on a GPU machine that has no MLIR installed: one device-machine call (under 480 s, every
# step under its own timeout), a short table last. Prepare on the dev machine (which has MLIR):
#   make mlir-aot                                                   # PTX of the tests' chains: build/mlir_aot
#   make -j2 build/tests/test_mlir_gpu build/train_gpt2_cuda build/train_llama_cuda          # no MLIR
#   make -j2 MLIR=1 BUILD=build/mlir build/mlir/tests/test_mlir_gpu build/mlir/train_gpt2_cuda \
#        build/mlir/train_llama_cuda build/mlir/bench_mlir                                   # with MLIR
#   bash bench/carry_bins.sh mlir      # those binaries + build/mlir_aot -> .carry/bins.tar.xz
#   bash bench/carry_mlir.sh           # Debian's libMLIR/libLLVM 19 (+ deps, stubs) -> .carry/mlir.tar.xz
#                                      # (unpacked here into $MLIR_LIBS, default /tmp/bt_mlir_libs)
#   bash bench/carry_data.sh           # the Tiny Shakespeare shards -> .carry/data
# then on the GPU machine (carry .carry): NOBUILD=1 bash bench/mlir_gpu.sh
# (it never builds there, NOBUILD or not: that machine has no MLIR; the timeouts add up to 460 s)
# What runs:
#   1. the loader check: ldd of an MLIR-linked binary with the carried libraries (if they cannot
#      load there, e.g. glibc < 2.36, it prints ldd's answer and runs only the MLIR-free parts)
#   2. tests/test_mlir_gpu built with MLIR (PTX compiled at run time: the JIT path)
#   3. tests/test_mlir_gpu built without MLIR, with NO MLIR library visible: the ahead-of-time path
#      (kernels from build/mlir_aot, compiled in and from the cache directory)
#   4. compute-sanitizer memcheck on both (BT_TEST_QUICK=1)
#   5. train_gpt2, GPT-2 d12 bf16 B16 T1024: without and with --mlir (losses, tokens/s)
#   6. train_llama, l12 bf16 B16 T1024: without and with --mlir (tokens/s; RMSNorm + SwiGLU fused)
#   7. bench_mlir (GB/s vs the copy bandwidth, compile times cold/memory/disk) and bench_mlir_torch.py
# Env: OUT (default /tmp/bt_out), STEPS (default 10), QUICK=1 (bench_mlir and the torch bench with
# --quick, the default; QUICK=0: the full shapes; both bf16 only), SAN=0 skips the sanitizer.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT"
STEPS=${STEPS:-10}; QUICK=${QUICK:-1}; SAN=${SAN:-1}
q=$([ "$QUICK" = 1 ] && echo --quick)
t_start=$(date +%s)
since() { echo "[$(( $(date +%s) - t_start )) s]"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "host: $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME"), $(ldd --version | head -1), libstdc++ $(strings "$(ldconfig -p | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')" 2>/dev/null | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -V | tail -1)"
mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
[ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
CUDA=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
[ -f "$CUDA/nvvm/libdevice/libdevice.10.bc" ] || echo "warning: no libdevice under $CUDA/nvvm/libdevice (the JIT path needs it: BT_MLIR_CUDA_PATH)"

# ---- the carried MLIR libraries ----
# unpacked outside the repository (195 MB: it must never end up in a carried folder)
ML=${MLIR_LIBS:-/tmp/bt_mlir_libs}/lib
if [ ! -d "$ML" ] && [ -f .carry/mlir.tar.xz ]; then
  mkdir -p "$(dirname "$ML")" && XZ_OPT=-T0 tar -xJf .carry/mlir.tar.xz -C "$(dirname "$ML")"
fi
MLENV=(env "LD_LIBRARY_PATH=$ML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "BT_MLIR_CUDA_PATH=$CUDA" "BT_MLIR_CACHE_DIR=$OUT/mlir_cache")
rm -rf "$OUT/mlir_cache"
missing=""
for b in build/mlir/tests/test_mlir_gpu build/mlir/train_gpt2_cuda build/mlir/train_llama_cuda build/mlir/bench_mlir \
         build/tests/test_mlir_gpu build/train_gpt2_cuda build/train_llama_cuda; do
  [ -x "$b" ] || missing="$missing $b"
done
[ -n "$missing" ] && echo "missing binaries (see the header: carry_bins.sh mlir):$missing"
mlir_ok=0
if [ ! -d "$ML" ]; then
  echo "no .carry/mlir.tar.xz: the MLIR-linked binaries cannot load here (bash bench/carry_mlir.sh on the dev machine)"
elif [ -x build/mlir/train_llama_cuda ]; then
  if "${MLENV[@]}" build/mlir/train_llama_cuda -h > "$OUT/mlir_load.txt" 2>&1; then
    mlir_ok=1; echo "$(since) the MLIR-linked binaries load with the carried libraries"
  else
    echo "the MLIR-linked binaries do NOT load here; the loader said:"; cat "$OUT/mlir_load.txt"
    echo "ldd with LD_LIBRARY_PATH=$ML:"; "${MLENV[@]}" ldd build/mlir/train_llama_cuda 2>&1 | grep -E "not found|version|=> $ML" | head -20
  fi
fi
"${MLENV[@]}" ldd build/mlir/train_llama_cuda 2>/dev/null | grep -E "not found|version" | head -5

# ---- 2, 3: the tests: JIT (MLIR) and ahead of time (no MLIR visible) ----
if [ $mlir_ok = 1 ]; then
  echo "$(since) test_mlir_gpu (MLIR: PTX compiled at run time)"
  "${MLENV[@]}" timeout 80 build/mlir/tests/test_mlir_gpu > "$OUT/test_mlir_gpu_jit.txt" 2>&1; echo "exit $?"
  grep -E "^(FAILED|  FAIL|  SKIP|info)|passed, .* failed" "$OUT/test_mlir_gpu_jit.txt" | head -30
fi
if [ -x build/tests/test_mlir_gpu ]; then
  echo "$(since) test_mlir_gpu (no MLIR: kernels compiled ahead of time); its MLIR/LLVM libraries: $(env -u LD_LIBRARY_PATH ldd build/tests/test_mlir_gpu | grep -cE 'MLIR|LLVM') (want 0)"
  env -u LD_LIBRARY_PATH BT_MLIR_AOT_DIR=build/mlir_aot timeout 25 build/tests/test_mlir_gpu > "$OUT/test_mlir_gpu_aot.txt" 2>&1; echo "exit $?"
  grep -E "^(FAILED|  FAIL|  SKIP|info|ok)|passed, .* failed" "$OUT/test_mlir_gpu_aot.txt" | head -20
fi

# ---- 4: compute-sanitizer ----
if [ "$SAN" = 1 ]; then
  if [ $mlir_ok = 1 ]; then   # the kernels come from the disk cache test 2 filled: no compile under the sanitizer
    BT_TEST_QUICK=1 "${MLENV[@]}" timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 build/mlir/tests/test_mlir_gpu > "$OUT/san_mlir_jit.txt" 2>&1; rc=$?
    echo "$(since) sanitizer test_mlir_gpu (MLIR): exit $rc; $(grep 'ERROR SUMMARY' "$OUT/san_mlir_jit.txt" | tail -1); $(grep -E 'passed, .* failed' "$OUT/san_mlir_jit.txt" | tail -1)"
  fi
  if [ -x build/tests/test_mlir_gpu ]; then
    BT_TEST_QUICK=1 env -u LD_LIBRARY_PATH BT_MLIR_AOT_DIR=build/mlir_aot timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_mlir_gpu > "$OUT/san_mlir_aot.txt" 2>&1; rc=$?
    echo "$(since) sanitizer test_mlir_gpu (AOT): exit $rc; $(grep 'ERROR SUMMARY' "$OUT/san_mlir_aot.txt" | tail -1); $(grep -E 'passed, .* failed' "$OUT/san_mlir_aot.txt" | tail -1)"
  fi
fi

# ---- 5: train_gpt2 with and without --mlir (the same MLIR-linked binary; the plain one too) ----
gpt2() {   # gpt2 NAME BINARY [flags]: d12 bf16 B16 T1024, STEPS steps, the log in $OUT/gpt2_NAME
  local name=$1 bin=$2; shift 2
  [ -x "$bin" ] || return
  local envs=(env); case "$bin" in build/mlir/*) envs=("${MLENV[@]}") ;; esac
  "${envs[@]}" timeout 40 "$bin" -e d12 -b 16 -t 1024 -d 16384 -x "$STEPS" -v 0 -g 0 --precision bf16 -o "$OUT/gpt2_$name" --quiet "$@" \
    > "$OUT/gpt2_$name.txt" 2>&1; rc=$?
  echo "$(since) train_gpt2 $name: exit $rc; $(grep -E '^(step|done|mlir|error)' "$OUT/gpt2_$name.txt" | tail -3 | tr '\n' ' ')"
}
gpt2 plain build/train_gpt2_cuda
if [ $mlir_ok = 1 ]; then gpt2 mlir build/mlir/train_gpt2_cuda --mlir; fi

# ---- 6: train_llama with and without --mlir ----
llama() {  # llama NAME BINARY [flags]
  local name=$1 bin=$2; shift 2
  [ -x "$bin" ] || return
  local envs=(env); case "$bin" in build/mlir/*) envs=("${MLENV[@]}") ;; esac
  "${envs[@]}" timeout 40 "$bin" -e l12 -b 16 -t 1024 -x "$STEPS" --precision bf16 --quiet "$@" > "$OUT/llama_$name.txt" 2>&1; rc=$?
  echo "$(since) train_llama $name: exit $rc; $(grep -E '^(done|mlir|error)' "$OUT/llama_$name.txt" | tr '\n' ' ')"
}
llama plain build/train_llama_cuda
if [ $mlir_ok = 1 ]; then llama mlir build/mlir/train_llama_cuda --mlir; fi

# ---- 7: the chains: bt_mlir vs unfused vs hand-written vs PyTorch ----
if [ $mlir_ok = 1 ]; then
  "${MLENV[@]}" timeout 50 build/mlir/bench_mlir $q --dtype bf16 > "$OUT/bench_mlir.txt" 2>&1; rc=$?; echo "$(since) bench_mlir: exit $rc"
  cat "$OUT/bench_mlir.txt" | head -80
fi
timeout 50 python3 bench/bench_mlir_torch.py $q --dtype bf16 > "$OUT/bench_mlir_torch.txt" 2>&1; rc=$?; echo "$(since) bench_mlir_torch.py: exit $rc"
grep -E "^\|" "$OUT/bench_mlir_torch.txt" | head -40

# ---- the table ----
python3 - "$OUT" "$STEPS" <<'EOF'
import json, os, re, sys
out, steps = sys.argv[1], sys.argv[2]
def read(p):
    try: return open(os.path.join(out, p)).read()
    except OSError: return ""
def summary(p):
    m = re.findall(r"(\d+) passed, (\d+) failed, (\d+) skipped", read(p))
    return "%s passed, %s failed, %s skipped" % m[-1] if m else "not run"
def san(p):
    m = re.findall(r"ERROR SUMMARY: (\d+) error", read(p))
    return ("%s errors" % m[-1]) if m else "not run"
def gpt2(name):
    rows = []
    try: rows = [json.loads(l) for l in open(os.path.join(out, "gpt2_%s/log.jsonl" % name))]
    except (OSError, ValueError): pass
    rows = [r for r in rows if "train_loss" in r and r["train_loss"] is not None]
    if not rows: return None, None, "not run"
    tps = [r["tok_per_s"] for r in rows[2:]] or [r["tok_per_s"] for r in rows]
    return [r["train_loss"] for r in rows], sum(tps) / len(tps), "losses " + " ".join("%.4f" % r["train_loss"] for r in rows)
def llama(name):
    m = re.search(r"done: \d+ steps, loss ([\d.]+) -> ([\d.]+), (\d+) tok/s", read("llama_%s.txt" % name))
    return (float(m.group(2)), float(m.group(3))) if m else (None, None)
print("\n=== summary (bench/mlir_gpu.sh, %s steps)" % steps)
print("| what | result |\n| --- | --- |")
print("| test_mlir_gpu, JIT (MLIR-linked, carried libs) | %s |" % summary("test_mlir_gpu_jit.txt"))
print("| test_mlir_gpu, ahead of time (no MLIR) | %s |" % summary("test_mlir_gpu_aot.txt"))
print("| compute-sanitizer memcheck, JIT / AOT | %s / %s |" % (san("san_mlir_jit.txt"), san("san_mlir_aot.txt")))
lp, tp, sp = gpt2("plain"); lm, tm, sm = gpt2("mlir")
print("| train_gpt2 d12 bf16 B16 T1024 | plain %s tok/s, --mlir %s tok/s%s |" % (
    "%.0f" % tp if tp else "-", "%.0f" % tm if tm else "-", " (%.3fx)" % (tm / tp) if tp and tm else ""))
if lp and lm and len(lp) == len(lm):
    # the bf16 d12 parity bounds of tests/test_gpt2_gpu.cu: loss 1e-2, step losses 3e-2 (relative)
    e0 = abs(lp[0] - lm[0]) / abs(lp[0]); ew = max(abs(a - b) / abs(a) for a, b in zip(lp, lm))
    print("| train_gpt2 losses, plain vs --mlir | first %.1e, worst step %.1e relative: %s |" % (
        e0, ew, "within the bf16 parity bounds (1e-2, 3e-2)" if e0 < 1e-2 and ew < 3e-2 else "OUTSIDE the bf16 parity bounds (1e-2, 3e-2)"))
print("| train_gpt2 plain | %s |\n| train_gpt2 --mlir | %s |" % (sp, sm))
a, b = llama("plain"), llama("mlir")
print("| train_llama l12 bf16 B16 T1024 | plain %s tok/s, --mlir %s tok/s%s |" % (
    "%.0f" % a[1] if a[1] else "-", "%.0f" % b[1] if b[1] else "-", " (%.2fx)" % (b[1] / a[1]) if a[1] and b[1] else ""))
if a[0] is not None and b[0] is not None:
    print("| train_llama last loss, plain vs --mlir | %.4f vs %.4f |" % (a[0], b[0]))
m = re.search(r"device-to-device copy (\d+) GB/s", read("bench_mlir.txt"))
print("| bench_mlir copy bandwidth | %s GB/s |" % (m.group(1) if m else "not run"))
m = re.search(r"Llama-style MLP block.*", read("bench_mlir.txt"))
if m: print("| bench_mlir | %s |" % m.group(0))
EOF
echo "$(since) done"
