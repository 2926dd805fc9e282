"""tp_parity.py: tensor and context parallel training against one GPU on the same batch (2 GPUs).

    python3 tests/tp_parity.py BIN OUTDIR [--steps 20] [--model d12] [--B 4] [--T 1024]
                               [--modes tp,tp_sp,tp_async,cp_ring,cp_allgather,cp_alltoall]
                               [--precisions fp32,bf16]

For each precision it trains GPT-2 (d12 = 124M) once on one GPU (-b B, one micro-batch of B rows
of T tokens a step), then on two GPUs (--nproc 2) in each mode:
    tp            --tp 2                   (heads, MLP and vocabulary split; dp = 1)
    tp_sp         --tp 2 --sp              (+ sequence parallelism)
    tp_async      --tp 2 --async-tp        (collectives chunked and overlapped with the matmuls)
    cp_ring       --cp 2 --cp-comm ring    (zig-zag halves of every sequence; K/V around the ring)
    cp_allgather  --cp 2 --cp-comm allgather
    cp_alltoall   --cp 2 --cp-comm alltoall
with the same seed, data and global batch (B x T tokens), --deterministic, and compares
  - the loss of every step (log.jsonl): fp32 (TF32 off) within FP32_TOL = 1e-5 relative;
    bf16 within BF16_TOL (below);
  - the weights after the last step (--save: the shards gathered into one llm.c file), which checks
    the gather: fp32 within 1e-3, bf16 within 2e-2 relative norm (Adam divides by sqrt(v), so
    the order of a sum in an early step shows in the weights more than in the loss).
The bf16 bound is measured in the same run: a tp or cp run rounds other partial sums to bf16 than
one GPU does (the row-parallel layers' partial products are bf16 before their all-reduce, the
ring attention merges per-block outputs), which is a different bf16 rounding of the same fp32
math; the size of bf16 rounding on this model and batch is the 1-GPU bf16 run's distance from the
1-GPU fp32 run. BF16_TOL = max(2 x that worst relative difference over the steps, 5e-4); both
figures are printed. (fp32 and bf16 are both run when --precisions has both; with bf16 alone
the bound falls back to 5e-3.)
NCCL_NVLS_ENABLE=0 (and the other multicast switches) in every process. Prints one PASS/FAIL line
per comparison and exits 1 if any failed."""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

FP32_TOL = 1e-5
FP32_W_TOL = 1e-3
BF16_W_TOL = 2e-2
MODES = {
    "tp": ["--tp", "2"],
    "tp_sp": ["--tp", "2", "--sp"],
    "tp_async": ["--tp", "2", "--async-tp"],
    "cp_ring": ["--cp", "2", "--cp-comm", "ring"],
    "cp_allgather": ["--cp", "2", "--cp-comm", "allgather"],
    "cp_alltoall": ["--cp", "2", "--cp-comm", "alltoall"],
}
ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")


def run(cmd, log, timeout):
    try:
        with open(log, "w") as f:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, timeout=timeout)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    if rc != 0:
        print(f"FAIL: {' '.join(cmd)} exited {rc}; last lines of {log}:")
        print("".join(open(log).readlines()[-15:]))
    return rc == 0


def losses(d):
    return np.array([json.loads(l)["train_loss"] for l in open(os.path.join(d, "log.jsonl")) if l.strip()], dtype=np.float64)


def weights(path):
    raw = open(path, "rb").read()
    return np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)


def worst_rel(a, b):
    return float(np.max(np.abs(a - b) / np.abs(b))) if len(a) == len(b) and len(a) else float("inf")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--model", default="d12")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--timeout", type=int, default=120, help="seconds per run")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ok = True
    common = ["-e", a.model, "-b", str(a.B), "-t", str(a.T), "-d", str(a.B * a.T), "-x", str(a.steps), "-v", "0", "-g", "0",
              "-u", "2", "--seed", "7", "--quiet", "--deterministic"]
    ref = {}
    for prec in a.precisions.split(","):
        d = os.path.join(a.out, f"one_{prec}")
        if run([a.bin, *common, "--precision", prec, "-o", d, "--save", d + ".bin"], d + ".log", a.timeout):
            ref[prec] = (losses(d), weights(d + ".bin"))
    bf16_tol = 5e-3
    if "fp32" in ref and "bf16" in ref:
        noise = worst_rel(ref["bf16"][0], ref["fp32"][0])
        bf16_tol = max(2 * noise, 5e-4)
        print(f"bf16 bound: 1-GPU bf16 vs 1-GPU fp32 worst loss rel diff {noise:.2e} -> BF16_TOL {bf16_tol:.2e}")
    for prec in a.precisions.split(","):
        if prec not in ref:
            ok = False
            continue
        l1, w1 = ref[prec]
        tol, wtol = (FP32_TOL, FP32_W_TOL) if prec == "fp32" else (bf16_tol, BF16_W_TOL)
        for mode in a.modes.split(","):
            d = os.path.join(a.out, f"two_{prec}_{mode}")
            if not run([a.bin, "--nproc", "2", *MODES[mode], *common, "--precision", prec, "-o", d, "--save", d + ".bin"], d + ".log", a.timeout):
                ok = False
                continue
            l2, w2 = losses(d), weights(d + ".bin")
            el = worst_rel(l2, l1)
            ew = float(np.linalg.norm(w2 - w1) / np.linalg.norm(w1)) if w1.shape == w2.shape else float("inf")
            good = el < tol and ew < wtol
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}: {prec} {mode} 2 GPUs vs 1: {len(l2)} steps, worst loss rel diff {el:.2e} "
                  f"(bound {tol:.0e}), weights rel diff {ew:.2e} (bound {wtol:.0e}); final loss {l2[-1]:.5f} vs {l1[-1]:.5f}")
    print("tp_parity:", "all passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
