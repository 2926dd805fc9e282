"""bench_kernels_torch.py - PyTorch's kernels at the shapes bench_kernels.cu times ours, for ratios
(make bench-kernels).

Rows (GPT-2 124M training shapes: B 8, T 1024, C 768, V 50257 padded to 50304, bf16 unless said),
each in eager mode and under torch.compile (default mode, dynamic=False) where that compiles:
  gelu, gelu_backward            F.gelu(approximate="tanh") on [8192, 3072]
  layernorm, layernorm_backward  F.layer_norm over 768 (weight, bias bf16, eps 1e-5) on [8192, 768]
  softmax, softmax_backward      F.softmax(dim=-1) on [6144, 1024]
  cross_entropy, _backward       F.cross_entropy(logits [8192, 50304], int64 targets): all 50304
                                 columns (a slice to 50257 would add a copy that a model with padded
                                 logits does not make); ours reads the 50257 real ones
  sum columns                    torch.sum(dim=0, dtype=f32) of [8192, 768] and [8192, 3072] (a bias
                                 gradient; ours does it inside the matmul epilogue rows)
  sum (full)                     torch.sum(dtype=f32) of 124475904 bf16
  sumsq (grad norm)              torch.linalg.vector_norm(dtype=f32) of 124475904 bf16 (ours: the
                                 sum of squares of one flat bf16 gradient), and torch._foreach_norm
                                 over GPT-2's 148 gradient tensors (what clip_grad_norm_ runs)
  adamw                          torch.optim.AdamW(fused=True, lr 1e-4, betas 0.9/0.95, eps 1e-8,
                                 wd 0.1) step on 124475904 f32 parameters with f32 gradients (fused
                                 AdamW wants the parameter's dtype: 28 bytes a parameter, ours 26
                                 with bf16 gradients), as one flat tensor and as GPT-2's 148 tensors;
                                 also the foreach (PyTorch's default) eager step; compiled: the
                                 foreach AdamW step under torch.compile
Backward rows time torch.autograd.grad(out, inputs, grad_out, retain_graph=True): the backward
kernels alone (no forward), under compile those AOTAutograd generated.

Method, as bench_kernels.cu: inputs random normal (targets uniform), rotated among enough copies
that a round touches more than 2 x 50 MB of L2; 3 warm-up calls, then 25 calls each between a pair
of CUDA events; the median. Before the timed calls the stream is held by torch.cuda._sleep long
enough for the CPU to queue all 25 calls, so Python and autograd overhead is not timed (ours is
launched from C with a few us each): the rows are GPU time, as ours. "bytes" is the least traffic
the op needs, counted as bench_kernels.cu counts it; GB/s and % of a device-to-device copy timed
here (1 GiB, bytes read + written) follow.

Output: one tab-separated line per row for bench/kernel_ratio.py,
  torchk <TAB> name <TAB> eager|compile <TAB> shape <TAB> median_us <TAB> bytes <TAB> note
a line "torchk_ceiling <TAB> copy_gbs <TAB> <GB/s>", then a markdown table.
Usage: python3 bench/bench_kernels_torch.py [--only gelu,layernorm,softmax,cross_entropy,sum,adamw]
       [--no-compile] [--reps 25]; exits 0 with "no GPU" when CUDA is not there.
"""
import argparse
import sys

B, T, C, V, VP = 8, 1024, 768, 50257, 50304
N = B * T
NPARAM = 124475904
L2_BYTES = 50e6
MAXCOPIES = 8
GROUPS = ("gelu", "layernorm", "softmax", "cross_entropy", "sum", "adamw")


def gpt2_param_shapes():
    """GPT-2 124M's 148 parameter tensors (wte padded to 50304, tied to the head): 124475904"""
    s = [(VP, C), (T, C)]
    for _ in range(12):
        s += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    return s + [(C,), (C,)]


def ncopies(bytes_):
    return min(int(2 * L2_BYTES / bytes_) + 1, MAXCOPIES)


class Bench:
    def __init__(self, torch, reps):
        self.torch, self.reps, self.rows = torch, reps, []
        self.sleep_cycles_per_ms = self._calibrate_sleep()
        self.copy_gbs = self._copy_gbs()

    def _calibrate_sleep(self):
        t = self.torch
        a, b = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        t.cuda._sleep(1000000)
        a.record()
        t.cuda._sleep(10000000)
        b.record()
        t.cuda.synchronize()
        return 10000000 / max(a.elapsed_time(b), 1e-3)

    def median_us(self, fn, nc=1):
        """fn(i) for copy i: 3 warm-ups, then reps calls between CUDA events queued behind a sleep"""
        t = self.torch
        import time
        for w in range(3):
            fn(w % nc)
        t.cuda.synchronize()
        c0 = time.perf_counter()
        fn(0)
        cpu_ms = (time.perf_counter() - c0) * 1e3   # host time to queue one call (GPU time at most)
        t.cuda.synchronize()
        ev = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(self.reps)]
        t.cuda._sleep(int(self.sleep_cycles_per_ms * min(2 * cpu_ms * self.reps + 1, 2000)))
        for r, (a, b) in enumerate(ev):
            a.record()
            fn(r % nc)
            b.record()
        t.cuda.synchronize()
        ms = sorted(a.elapsed_time(b) for a, b in ev)
        return 1000.0 * ms[self.reps // 2]

    def _copy_gbs(self):
        t = self.torch
        n = 1 << 30
        a = t.ones(n, dtype=t.uint8, device="cuda")
        b = t.empty_like(a)
        us = self.median_us(lambda i: b.copy_(a))
        del a, b
        return 2.0 * n / (us * 1e-6) / 1e9

    def row(self, name, mode, shape, us, bytes_, note=""):
        self.rows.append((name, mode, shape, us, bytes_, note))
        print(f"torchk\t{name}\t{mode}\t{shape}\t{us:.1f}\t{bytes_:.0f}\t{note}", flush=True)

    def try_row(self, name, mode, shape, fn, nc, bytes_, note=""):
        """times fn, or prints why it could not run (a compile that fails is a row left out)"""
        try:
            us = self.median_us(fn, nc)
        except Exception as e:  # torch.compile or a backend refusing: say so, go on
            print(f"torchk_skip\t{name}\t{mode}\t{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", flush=True)
            return
        self.row(name, mode, shape, us, bytes_, note)


def modes(torch, compile_on):
    """(mode name, wrapper) pairs: eager, and torch.compile when asked"""
    out = [("eager", lambda f: f)]
    if compile_on:
        out.append(("compile", lambda f: torch.compile(f, dynamic=False)))
    return out


def guarded(group, mode, body):
    """runs one mode of a group; a failure there (a compile error, out of memory) is reported as
    a skipped row and the next mode or group goes on"""
    try:
        body()
    except Exception as e:
        msg = str(e).splitlines()[0][:160] if str(e) else ""
        print(f"torchk_skip\t{group}\t{mode}\t{type(e).__name__}: {msg}", flush=True)


def randn(torch, shape, dtype, seed, std=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", dtype=torch.float32, generator=g) * std).to(dtype)


def bench_elementwise(bn, torch, compile_on, name, fn, rows, cols, seed, std=1.0):
    """name (forward) and name_backward of y = fn(x) over a bf16 [rows, cols]: 4 bytes an element
    forward (x read, y written), 6 backward (x or y and dy read, dx written)"""
    n = rows * cols
    nc = ncopies(4.0 * n)
    shape = f"[{rows}, {cols}] bf16"

    def one(mode, wrap):
        f = wrap(fn)
        x = [randn(torch, (rows, cols), torch.bfloat16, seed + i, std).requires_grad_() for i in range(nc)]
        g = [randn(torch, (rows, cols), torch.bfloat16, seed + 10 + i) for i in range(nc)]
        y = [f(xi) for xi in x]
        bn.try_row(name, mode, shape, lambda i: f(x[i]), nc, 4.0 * n)
        bn.try_row(name + "_backward", mode, shape, lambda i: torch.autograd.grad(y[i], x[i], g[i], retain_graph=True), nc, 6.0 * n)
    for mode, wrap in modes(torch, compile_on):
        guarded(name, mode, lambda: one(mode, wrap))


def bench_gelu(bn, torch, F, compile_on):
    bench_elementwise(bn, torch, compile_on, "gelu", lambda x: F.gelu(x, approximate="tanh"), N, 4 * C, 40)


def bench_layernorm(bn, torch, F, compile_on):
    n = N * C
    nc = ncopies(4.0 * n)
    shape = f"[{N}, {C}] bf16"
    w = randn(torch, (C,), torch.bfloat16, 3).requires_grad_()
    b = randn(torch, (C,), torch.bfloat16, 4).requires_grad_()

    def one(mode, wrap):
        f = wrap(lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5))
        x = [randn(torch, (N, C), torch.bfloat16, 10 + i).requires_grad_() for i in range(nc)]
        g = [randn(torch, (N, C), torch.bfloat16, 30 + i) for i in range(nc)]
        y = [f(xi, w, b) for xi in x]
        bn.try_row("layernorm", mode, shape, lambda i: f(x[i], w, b), nc, 4.0 * n + 8.0 * N)
        bn.try_row("layernorm_backward", mode, shape,
                   lambda i: torch.autograd.grad(y[i], (x[i], w, b), g[i], retain_graph=True), nc, 6.0 * n + 8.0 * N)
    for mode, wrap in modes(torch, compile_on):
        guarded("layernorm", mode, lambda: one(mode, wrap))


def bench_softmax(bn, torch, F, compile_on):
    bench_elementwise(bn, torch, compile_on, "softmax", lambda x: F.softmax(x, dim=-1), B * 12 * 64, T, 60, 2.0)


def bench_cross_entropy(bn, torch, F, compile_on):
    shape = f"[{N}, {VP}] bf16, all columns"
    tg = torch.randint(0, V, (N,), device="cuda", generator=torch.Generator(device="cuda").manual_seed(7))

    def one(mode, wrap):
        f = wrap(lambda lg, tg: F.cross_entropy(lg, tg))
        lg = randn(torch, (N, VP), torch.bfloat16, 70, 2.0).requires_grad_()
        loss = f(lg, tg)
        bn.try_row("cross_entropy", mode, shape, lambda i: f(lg, tg), 1, 2.0 * N * V + 8.0 * N)
        bn.try_row("cross_entropy_backward", mode, shape, lambda i: torch.autograd.grad(loss, lg, retain_graph=True), 1,
                   2.0 * N * V + 2.0 * N * VP)
    for mode, wrap in modes(torch, compile_on):
        guarded("cross_entropy", mode, lambda: one(mode, wrap))
        torch.cuda.empty_cache()


def bench_sum(bn, torch, F, compile_on):
    def columns(mode, wrap, cols):
        n = N * cols
        nc = ncopies(2.0 * n)
        f = wrap(lambda x: torch.sum(x, dim=0, dtype=torch.float32))
        x = [randn(torch, (N, cols), torch.bfloat16, 80 + i) for i in range(nc)]
        bn.try_row("sum columns", mode, f"[{N}, {cols}] bf16 -> [{cols}] f32", lambda i: f(x[i]), nc, 2.0 * n + 4.0 * cols)

    def full(mode, wrap, g):
        shape = f"{NPARAM} params, g bf16"
        fs = wrap(lambda x: torch.sum(x, dtype=torch.float32))
        fn = wrap(lambda x: torch.linalg.vector_norm(x, dtype=torch.float32))
        bn.try_row("sum (full)", mode, shape, lambda i: fs(g), 1, 2.0 * NPARAM)
        bn.try_row("sumsq (grad norm)", mode, shape, lambda i: fn(g), 1, 2.0 * NPARAM, "vector_norm (sqrt of the sum of squares)")

    for cols in (C, 4 * C):
        for mode, wrap in modes(torch, compile_on):
            guarded("sum", mode, lambda: columns(mode, wrap, cols))
    g = randn(torch, (NPARAM,), torch.bfloat16, 92)
    for mode, wrap in modes(torch, compile_on):
        guarded("sum", mode, lambda: full(mode, wrap, g))
    del g
    gs = [randn(torch, s, torch.bfloat16, 200 + k) for k, s in enumerate(gpt2_param_shapes())]
    bn.try_row("sumsq (grad norm)", "eager", f"{NPARAM} params in 148 tensors, g bf16", lambda i: torch._foreach_norm(gs), 1,
               2.0 * NPARAM, "_foreach_norm over GPT-2's tensors (clip_grad_norm_)")
    del gs
    torch.cuda.empty_cache()


def bench_adamw(bn, torch, F, compile_on):
    kw = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    def one(mode, impl, label, shapes):
        ps = [randn(torch, s, torch.float32, 300 + k).requires_grad_() for k, s in enumerate(shapes)]
        for k, p in enumerate(ps):
            p.grad = randn(torch, p.shape, torch.float32, 600 + k)
        opt = torch.optim.AdamW(ps, fused=impl == "fused", foreach=impl == "foreach", **kw)
        if mode == "eager":
            step, note = opt.step, f"{impl}=True, f32 grads"
        else:
            step = torch.compile(lambda: opt.step(), dynamic=False)
            note = "foreach AdamW step under torch.compile, f32 grads"
        # the fused row is the eager twin of the compiled one; the foreach eager row (PyTorch's
        # default on CUDA) gets a shape label of its own
        shape = f"{NPARAM} params ({label}{', foreach' if impl == 'foreach' and mode == 'eager' else ''}), g f32"
        bn.try_row("adamw", mode, shape, lambda i: step(), 1, 28.0 * NPARAM, note)

    runs = [("eager", "fused"), ("eager", "foreach")] + ([("compile", "foreach")] if compile_on else [])
    for label, shapes in (("one tensor", [(NPARAM,)]), ("148 tensors", gpt2_param_shapes())):
        for mode, impl in runs:
            guarded("adamw", mode, lambda: one(mode, impl, label, shapes))
            torch.cuda.empty_cache()


def print_table(bn):
    print(f"\nceiling: D2D copy {bn.copy_gbs:.0f} GB/s (read + write)")
    print("\n| torch kernel | mode | shape | median us | GB/s | % of copy | note |\n| --- | --- | --- | ---: | ---: | ---: | --- |")
    for name, mode, shape, us, bytes_, note in bn.rows:
        gbs = bytes_ / (us * 1e-6) / 1e9
        print(f"| {name} | {mode} | {shape} | {us:.1f} | {gbs:.0f} | {100 * gbs / bn.copy_gbs:.0f}% | {note} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups: " + ",".join(GROUPS))
    ap.add_argument("--no-compile", action="store_true", help="eager rows only")
    ap.add_argument("--reps", type=int, default=25)
    a = ap.parse_args()
    groups = [s for s in a.only.split(",") if s]
    bad = [s for s in groups if s not in GROUPS]
    if bad:
        ap.error(f"unknown group(s) {','.join(bad)}; expected some of {','.join(GROUPS)}")
    if a.reps < 1:
        ap.error(f"--reps {a.reps}: expected at least 1")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("bench_kernels_torch: no GPU (PyTorch is not installed)")
        return 0
    if not torch.cuda.is_available():
        print("bench_kernels_torch: no GPU (torch.cuda.is_available() is False)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    bn = Bench(torch, a.reps)
    p = torch.cuda.get_device_properties(0)
    print(f"device: {p.name}, {p.multi_processor_count} SMs; torch {torch.__version__}; copy {bn.copy_gbs:.0f} GB/s")
    print(f"torchk_ceiling\tcopy_gbs\t{bn.copy_gbs:.1f}", flush=True)
    fns = dict(gelu=bench_gelu, layernorm=bench_layernorm, softmax=bench_softmax, cross_entropy=bench_cross_entropy,
               sum=bench_sum, adamw=bench_adamw)
    for gname in groups:
        fns[gname](bn, torch, F, not a.no_compile)
        torch.cuda.synchronize()
    print_table(bn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
