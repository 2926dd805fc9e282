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
    cp_zero1      --cp 2 --dp zero1        (AdamW state sharded over the two cp ranks)
    cp_zero2      --cp 2 --dp zero2        (+ the gradients reduced to their owners, fp32 shard sums)
    tp_zero1      --tp 2 --dp zero1        (a ZeRO group of one: the whole tp buffer is the shard)
    tp_sp_zero2   --tp 2 --sp --dp zero2   (the replicated tensors' gradients summed over tp from
                                            the fp32 shard sum)
(the zero modes are not in the default list) with the same seed, data and global batch (B x T tokens), --deterministic, and compares
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
With --ckpt-layouts tp,cp,cp_zero1,tp_zero1 (fp32, --deterministic, CKPT_STEPS steps, a checkpoint every half)
it then checks that checkpoints compose with each layout L (--tp 2, --cp 2, --cp 2 --dp zero1,
--tp 2 --dp zero1):
  ckpt_file    L's checkpoint of the middle step is the 1-GPU run's file: params, adamw.m and
               adamw.v each within CKPT_TOL (relative norm; printed) of the 1-GPU checkpoint
  resume_same  L resumed from it in L: the later steps' losses, norms and lrs print the same, and
               the last checkpoint is the uninterrupted L run's bit for bit (tests/resume_check.py)
  resume_1gpu  one GPU resumed from L's checkpoint: the 1-GPU run's losses within FP32_TOL, its
               last checkpoint within CKPT_TOL
  resume_from1 L resumed from the 1-GPU checkpoint: L's losses within FP32_TOL
and, with tp in the list, --init-from (the 1-GPU checkpoint) with --tp 2 against one GPU (the
first loss within FP32_TOL) and -s with --tp 2 (a sample every CKPT_STEPS/2 steps from the model
gathered on rank 0: the run ends well and prints them; whether the greedy text equals one GPU's
is printed). CKPT_TOL = 1e-4 for params, m and v (relative norm): measured on two H200s
(2026-11-23, d12, 3 steps) at most 7.4e-7 (params), 2.9e-6 (m), 3.2e-6 (v); the CPU test
(tests/test_tp_gpt2.c, same bound) measures 8e-6 for all three on a small model after two steps.
NCCL_NVLS_ENABLE=0 (and the other multicast switches) in every process. Prints one PASS/FAIL line
per comparison and exits 1 if any failed."""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resume_check  # noqa: E402  (tests/resume_check.py: bit-for-bit resume checks)

FP32_TOL = 1e-5
FP32_W_TOL = 1e-3
BF16_W_TOL = 2e-2
CKPT_TOL = {"params": 1e-4, "adamw.m": 1e-4, "adamw.v": 1e-4}
LAYOUTS = {"tp": ["--tp", "2"], "cp": ["--cp", "2"], "cp_zero1": ["--cp", "2", "--dp", "zero1"], "tp_zero1": ["--tp", "2", "--dp", "zero1"]}
MODES = {
    "tp": ["--tp", "2"],
    "tp_sp": ["--tp", "2", "--sp"],
    "tp_async": ["--tp", "2", "--async-tp"],
    "cp_ring": ["--cp", "2", "--cp-comm", "ring"],
    "cp_allgather": ["--cp", "2", "--cp-comm", "allgather"],
    "cp_alltoall": ["--cp", "2", "--cp-comm", "alltoall"],
}
ZERO_MODES = {
    "cp_zero1": ["--cp", "2", "--dp", "zero1"],
    "cp_zero2": ["--cp", "2", "--dp", "zero2"],
    "tp_zero1": ["--tp", "2", "--dp", "zero1"],
    "tp_sp_zero2": ["--tp", "2", "--sp", "--dp", "zero2"],
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


def ckpt_path(d, step):
    return os.path.join(d, f"ckpt_{step:09d}.safetensors")


def ckpt_tensors(path):
    f, h, data = resume_check.header(path)
    out = {}
    for name in CKPT_TOL:
        (b, e) = h[name]["data_offsets"]
        f.seek(data + b)
        out[name] = np.frombuffer(f.read(e - b), dtype="<f4").astype(np.float64)
    return out


def ckpt_rel(a, b):
    """per tensor: relative norm of a's difference from b (inf when a shape differs)"""
    ta, tb = ckpt_tensors(a), ckpt_tensors(b)
    return {k: float(np.linalg.norm(ta[k] - tb[k]) / max(np.linalg.norm(tb[k]), 1e-30)) if ta[k].shape == tb[k].shape else float("inf")
            for k in CKPT_TOL}


def ckpt_within(rel):
    return all(rel[k] < CKPT_TOL[k] for k in CKPT_TOL)


def ckpt_fmt(rel):
    return ", ".join(f"{k} {v:.2e}" for k, v in rel.items())


def report(good, what):
    print(f"{'PASS' if good else 'FAIL'}: {what}")
    return good


def greedy(log):
    text = open(log, errors="replace").read()
    a = text.find("--- sample (greedy) ---")
    b = text.find("--- sample (top-", a)
    return text[a:b] if a >= 0 and b > a else None


def ckpt_cases(a, layouts):
    """checkpoints, --init-from and -s across layouts (the module docstring); True when all passed"""
    ok = True
    half = a.ckpt_steps // 2
    common = ["-e", a.model, "-b", str(a.B), "-t", str(a.T), "-d", str(a.B * a.T), "-x", str(a.ckpt_steps), "-v", "0", "-g", "0",
              "-u", "2", "--seed", "7", "--quiet", "--deterministic", "--precision", "fp32", "--ckpt-every", str(half)]

    def fresh(tag):   # a resumed run appends to its log: every run starts from empty directories
        d = os.path.join(a.out, tag)
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(d + ".ck", ignore_errors=True)
        return d

    def train(tag, nproc, extra):
        d = fresh(tag)
        cmd = [a.bin, *(["--nproc", str(nproc)] if nproc > 1 else []), *common, *extra, "-o", d, "--ckpt-dir", d + ".ck"]
        return d if run(cmd, d + ".log", a.timeout) else None

    one = train("ck_one", 1, [])
    if not one:
        return report(False, "ckpt: the 1-GPU run failed")
    l1 = losses(one)
    for lay in layouts:
        L = LAYOUTS[lay]
        u = train(f"ck_{lay}", 2, L)
        if not u:
            ok = False
            continue
        lu = losses(u)
        rel = ckpt_rel(ckpt_path(u + ".ck", half), ckpt_path(one + ".ck", half))
        ok &= report(ckpt_within(rel), f"ckpt_file {lay}: the checkpoint of step {half} vs the 1-GPU one: {ckpt_fmt(rel)}")
        r = train(f"ck_{lay}_same", 2, [*L, "--resume", ckpt_path(u + ".ck", half)])
        if r:
            rc = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "resume_check.py"), "--after", str(half),
                                 "--log-a", os.path.join(u, "log.jsonl"), "--log-b", os.path.join(r, "log.jsonl"),
                                 "--ckpt-a", ckpt_path(u + ".ck", a.ckpt_steps), "--ckpt-b", ckpt_path(r + ".ck", a.ckpt_steps)],
                                capture_output=True, text=True)
            print(rc.stdout.strip())
            ok &= report(rc.returncode == 0, f"resume_same {lay}: resumed after step {half} in {' '.join(L)}, bit for bit the uninterrupted run")
        else:
            ok = False
        s1 = train(f"ck_{lay}_to1", 1, ["--resume", ckpt_path(u + ".ck", half)])
        if s1:
            el = worst_rel(losses(s1), l1[half:])
            rel = ckpt_rel(ckpt_path(s1 + ".ck", a.ckpt_steps), ckpt_path(one + ".ck", a.ckpt_steps))
            ok &= report(el < FP32_TOL and ckpt_within(rel), f"resume_1gpu {lay}: 1 GPU from its checkpoint: worst loss rel diff {el:.2e} "
                         f"(bound {FP32_TOL:.0e}); last checkpoint vs the 1-GPU run's: {ckpt_fmt(rel)}")
        else:
            ok = False
        x = train(f"ck_{lay}_from1", 2, [*L, "--resume", ckpt_path(one + ".ck", half)])
        if x:
            el = worst_rel(losses(x), lu[half:])
            ok &= report(el < FP32_TOL, f"resume_from1 {lay}: {' '.join(L)} from the 1-GPU checkpoint: worst loss rel diff {el:.2e} (bound {FP32_TOL:.0e})")
        else:
            ok = False
    if "tp" in layouts:
        src = ckpt_path(one + ".ck", half)
        init = ["-b", str(a.B), "-t", str(a.T), "-d", str(a.B * a.T), "-x", "1", "-v", "0", "-g", "0", "-u", "2", "--seed", "7",
                "--deterministic", "--precision", "fp32"]
        lo = []
        for nproc, extra in ((1, []), (2, ["--tp", "2"])):
            d = fresh(f"init_{nproc}")
            cmd = [a.bin, *(["--nproc", "2"] if nproc > 1 else []), *init, *extra, "--init-from", src, "-o", d]
            lo.append(losses(d) if run(cmd, d + ".log", a.timeout) else None)
        good = all(x is not None and len(x) == 1 for x in lo) and worst_rel(lo[1], lo[0]) < FP32_TOL
        ok &= report(good, f"init_from tp: --init-from the 1-GPU checkpoint with --tp 2: first loss "
                     f"{lo[1][0] if lo[1] is not None else float('nan'):.6f} vs one GPU's {lo[0][0] if lo[0] is not None else float('nan'):.6f}")
        texts, counts = [], []
        for nproc, extra in ((1, []), (2, ["--tp", "2"])):
            d = fresh(f"sample_{nproc}")
            cmd = [a.bin, *(["--nproc", "2"] if nproc > 1 else []), "-e", a.model, "-b", str(a.B), "-t", str(a.T), "-d", str(a.B * a.T),
                   "-x", str(a.ckpt_steps), "-v", "0", "-u", "2", "--seed", "7", "--quiet", "--deterministic", "--precision", "fp32",
                   "-s", str(half), "-g", "16", *extra, "-o", d]
            good = run(cmd, d + ".log", a.timeout)
            texts.append(greedy(d + ".log") if good else None)
            counts.append(open(d + ".log", errors="replace").read().count("--- sample (greedy) ---") if good else 0)
        ok &= report(counts[1] == 2 and texts[1] is not None, f"sample tp: -s {half} with --tp 2 over {a.ckpt_steps} steps: {counts[1]} greedy samples "
                     f"(2 expected: one during the run, one at the end); the first one's text equals one GPU's: {texts[0] == texts[1]}")
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--model", default="d12")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--modes", default=",".join(MODES), help="of " + ",".join([*MODES, *ZERO_MODES]))
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--timeout", type=int, default=120, help="seconds per run")
    p.add_argument("--ckpt-layouts", default="", help="of " + ",".join(LAYOUTS) + ": the checkpoint cases (module docstring) in these layouts")
    p.add_argument("--ckpt-steps", type=int, default=8, help="steps of a checkpoint case's run (a checkpoint every half)")
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
        for mode in filter(None, a.modes.split(",")):
            d = os.path.join(a.out, f"two_{prec}_{mode}")
            if not run([a.bin, "--nproc", "2", *{**MODES, **ZERO_MODES}[mode], *common, "--precision", prec, "-o", d, "--save", d + ".bin"], d + ".log", a.timeout):
                ok = False
                continue
            l2, w2 = losses(d), weights(d + ".bin")
            el = worst_rel(l2, l1)
            ew = float(np.linalg.norm(w2 - w1) / np.linalg.norm(w1)) if w1.shape == w2.shape else float("inf")
            good = el < tol and ew < wtol
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}: {prec} {mode} 2 GPUs vs 1: {len(l2)} steps, worst loss rel diff {el:.2e} "
                  f"(bound {tol:.0e}), weights rel diff {ew:.2e} (bound {wtol:.0e}); final loss {l2[-1]:.5f} vs {l1[-1]:.5f}")
    if a.ckpt_layouts:
        ok &= ckpt_cases(a, a.ckpt_layouts.split(","))
    print("tp_parity:", "all passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
