"""bench_mlir_torch.py: the chains of bench/bench_mlir.cu in PyTorch, eager and torch.compile (make bench-mlir).

    python3 bench/bench_mlir_torch.py [--quick] [--dtype bf16|f32]

The same chains, shapes, input ranges and byte counts as bench_mlir.cu (the minimal traffic: every
input read once and the output written once forward; inputs, the output gradient and the input
gradients backward), timed the same way: CUDA events around each call, 5 warm-up calls (torch.compile
compiles in them), the median of 20, inputs rotated over 4 sets. Prints one markdown row per chain,
dtype and pass with GB/s and the share of the device-to-device copy bandwidth measured here.
"""
import argparse
import datetime
import statistics

import torch
import torch.nn.functional as F

NSETS, WARMUP, REPS = 4, 5, 20


def layernorm(x, w, b):
    xc = x - x.mean(-1, keepdim=True)
    var = (xc * xc).mean(-1, keepdim=True)
    return xc / torch.sqrt(var + 1e-5) * w + b


def rmsnorm(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w


def softmax_ops(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def gelu(x):
    return F.gelu(x, approximate="tanh")


# name, function, input kinds (full / col), (B, T, C), uniform range: as bench_mlir.cu's cases
CHAINS = [
    ("layernorm", layernorm, ["full", "col", "col"], (8, 1024, 768), (-2, 2)),
    ("residual_layernorm", lambda x, r, w, b: layernorm(x + r, w, b), ["full", "full", "col", "col"], (8, 1024, 768), (-2, 2)),
    ("rmsnorm", rmsnorm, ["full", "col"], (8, 1024, 768), (-2, 2)),
    ("bias_gelu", lambda x, b: gelu(x + b), ["full", "col"], (8, 1024, 3072), (-3, 3)),
    ("swiglu", lambda a, b: F.silu(a) * b, ["full", "full"], (8, 1024, 3072), (-3, 3)),
    ("softmax_ops", softmax_ops, ["full"], (8, 1024, 1024), (-3, 3)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), ["full"], (4, 1024, 50304), (-3, 3)),
]


def copy_gbs():
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    best = 1e30
    for i in range(8):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        if i > 1:
            best = min(best, s.elapsed_time(e))
    return 2 * a.numel() * 4 / (best * 1e6)


def time_calls(fn, sets, grads, backward):
    ms = []
    for it in range(WARMUP + REPS):
        ins = sets[it % NSETS]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        if backward:
            y = fn(*ins)
            y.backward(grads[it % NSETS])
        else:
            with torch.no_grad():
                fn(*ins)
        e.record()
        torch.cuda.synchronize()
        if backward:
            for t in ins:
                t.grad = None
        if it >= WARMUP:
            ms.append(s.elapsed_time(e))
    return statistics.median(ms)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="T / 4")
    p.add_argument("--dtype", choices=["bf16", "f32"])
    args = p.parse_args()
    copy = copy_gbs()
    print(f"bench_mlir_torch: {torch.cuda.get_device_name()}, {datetime.date.today()}, torch {torch.__version__}; "
          f"device-to-device copy {copy:.0f} GB/s\n")
    print("| chain | dtype | pass | shape | eager ms | eager GB/s | compile ms | compile GB/s |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for dname, dt in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        if args.dtype and args.dtype != dname:
            continue
        for name, fn, kinds, (B, T, C), (lo, hi) in CHAINS:
            T = T // 4 if args.quick else T
            sets = []
            for _ in range(NSETS):
                ins = []
                for k in kinds:
                    shape = (B, T, C) if k == "full" else (C,)
                    ins.append((torch.rand(shape, device="cuda") * (hi - lo) + lo).to(dt).requires_grad_())
                sets.append(ins)
            grads = [torch.randn((B, T, C), device="cuda", dtype=dt) for _ in range(NSETS)]
            in_bytes = sum(t.numel() * t.element_size() for t in sets[0])
            out_bytes = grads[0].numel() * grads[0].element_size()
            compiled = torch.compile(fn)
            for backward in (0, 1):
                nbytes = in_bytes + out_bytes + (2 * in_bytes + out_bytes if backward else 0)
                te = time_calls(fn, sets, grads, backward)
                tc = time_calls(compiled, sets, grads, backward)
                print(f"| {name} | {dname} | {'f+b' if backward else 'fwd'} | [{B},{T},{C}] | {te:.3f} | "
                      f"{nbytes / (te * 1e6):.1f} ({100 * nbytes / (te * 1e6) / copy:.0f}%) | {tc:.3f} | "
                      f"{nbytes / (tc * 1e6):.1f} ({100 * nbytes / (tc * 1e6) / copy:.0f}%) |")


if __name__ == "__main__":
    main()
