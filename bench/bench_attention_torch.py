"""bench_attention_torch.py - part of make bench-kernels (bench_kernels.cu runs it): PyTorch's causal
attention at the shape bench_kernels.cu times, for its ratios:
torch.nn.functional.scaled_dot_product_attention(is_causal=True) forward and backward, on q, k, v
viewed out of one [B, T, 3, H, D] buffer (the GPT-2 layout, as ours reads them).
Rows bf16 and f32 run with TF32 off; row tf32 is f32 data with
torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 set (what train_gpt2's
tf32 mode is compared with). Medians of CUDA-event timings after warm-up. Prints one line per row:
  sdpa <row> fwd_us=<median> bwd_us=<median> backend=<what torch picked, if it says>
Usage: python3 bench/bench_attention_torch.py --B 16 --H 12 --T 1024 --D 64 [--reps 25]
--sweep: bf16 over the shapes bench_kernels.cu sweeps (B 16, H 12; T 512..4096 at D 64, T 1024 and
4096 at D 128; causal and not), with the default backend, flash and cuDNN forced, one line each:
  sweep T=<T> D=<D> causal=<0|1> backend=<default|flash|cudnn> fwd_us=<median> bwd_us=<median> picked=<node>
--gqa: bf16 grouped-query causal attention (Hkv key/value heads for H query heads) at Llama shapes
(--Hkv with it: only the shape --B --H --Hkv --T --D), one line per backend (gqa() says which):
  gqa B=<B> H=<H> Hkv=<Hkv> T=<T> D=<D> backend=<name> fwd_us=<median> bwd_us=<median> picked=<node> maxdiff=<x>
  gqa B=<B> H=<H> Hkv=<Hkv> T=<T> D=<D> backend=<name> unavailable: <why>"""
import argparse
import os
import time
import contextlib
import warnings
import torch
import torch.nn.functional as F


def settle():
    """idle the GPU before a row, as bench_kernels.cu does before its attention rows (after large
    GEMMs the SM clock stays lowered for a while); BT_BENCH_SETTLE_MS, default 500"""
    torch.cuda.synchronize()
    time.sleep(int(os.environ.get("BT_BENCH_SETTLE_MS", "500")) / 1000.0)


def median_us(fn, reps, warm=3):
    settle()
    for _ in range(warm):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return 1000.0 * t[reps // 2]


SWEEP = [(t, 64, c) for c in (1, 0) for t in (512, 1024, 2048, 4096)] + [(t, 128, c) for c in (1, 0) for t in (1024, 4096)]


def sweep(reps):
    from torch.nn.attention import sdpa_kernel, SDPBackend
    dev = "cuda"
    B, H = 16, 12
    for T, D, causal in SWEEP:
        g = torch.Generator(device=dev).manual_seed(1)
        qkv = torch.randn(B, T, 3, H, D, device=dev, dtype=torch.bfloat16, generator=g)
        q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
        go = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g)
        for name, backends in (("default", None), ("flash", [SDPBackend.FLASH_ATTENTION]), ("cudnn", [SDPBackend.CUDNN_ATTENTION])):
            try:
                ctx = sdpa_kernel(backends) if backends else contextlib.nullcontext()
                with ctx:
                    def fwd():
                        with torch.no_grad():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                    out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    picked = type(out.grad_fn).__name__.replace("ScaledDotProduct", "").replace("Backward0", "")

                    def bwd():
                        torch.autograd.grad(out, (q, k, v), go, retain_graph=True)

                    f = median_us(fwd, reps)
                    b = median_us(bwd, reps)
                print(f"sweep T={T} D={D} causal={causal} backend={name} fwd_us={f:.1f} bwd_us={b:.1f} picked={picked}", flush=True)
                del out
            except Exception as e:  # a backend that refuses the shape or layout
                print(f"sweep T={T} D={D} causal={causal} backend={name} unavailable: {str(e).splitlines()[0][:120]}", flush=True)
        del qkv, q, k, v, go
        torch.cuda.empty_cache()


# (B, H, Hkv, T, D): l125m's step (make bench-gpt2 MODEL=l125m B=16), Llama 3.2 1B's at B 8, T 1024
# (MODEL=llama3.2-1b B=8) and at B 4, T 2048
GQA = [(16, 12, 4, 1024, 64), (8, 32, 8, 1024, 64), (4, 32, 8, 2048, 64)]


def gqa(shapes, reps):
    """q, k, v: views of one bf16 [B, T, H + 2 Hkv, D] buffer (llama.h's wqkv output; q's H heads,
    k's Hkv, v's Hkv), as [B, heads, T, D]. Backends: SDPA(enable_gqa=True) with the default choice,
    flash, cuDNN and memory-efficient forced, and "expanded": K and V repeated to H heads before the
    timing (transformers' repeat_kv, what llama.h does today before its attention; the copy is not
    timed) under the default choice. maxdiff: the largest |out - expanded's out|, which shows a
    backend that takes the call but ignores the grouping. A backend that refuses prints its reason
    (PyTorch's warnings, then the error)."""
    from torch.nn.attention import sdpa_kernel, SDPBackend
    forced = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for B, H, Hkv, T, D in shapes:
        g = torch.Generator(device="cuda").manual_seed(1)
        qkv = torch.randn(B, T, H + 2 * Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
        q, k, v = (t.transpose(1, 2).detach().requires_grad_() for t in qkv.split([H, Hkv, Hkv], dim=2))
        kx, vx = (t.detach().repeat_interleave(H // Hkv, dim=1).requires_grad_() for t in (k, v))
        go = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
        with torch.no_grad():
            ref = F.scaled_dot_product_attention(q, kx, vx, is_causal=True)
        tag = f"gqa B={B} H={H} Hkv={Hkv} T={T} D={D}"
        for name in ("default", "flash", "cudnn", "efficient", "expanded"):
            kk, vv, grouped = (kx, vx, False) if name == "expanded" else (k, v, True)
            said = []
            try:
                with warnings.catch_warnings(record=True) as said, \
                        (sdpa_kernel([forced[name]]) if name in forced else contextlib.nullcontext()):
                    warnings.simplefilter("always")

                    def fwd():
                        with torch.no_grad():
                            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=grouped)

                    out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=grouped)
                    node = type(out.grad_fn).__name__.replace("ScaledDotProduct", "").replace("Backward0", "")
                    picked = node if "Attention" in node else "math"   # the math path ends in an ordinary op

                    def bwd():
                        torch.autograd.grad(out, (q, kk, vv), go, retain_graph=True)

                    f = median_us(fwd, reps)
                    b = median_us(bwd, reps)
                diff = (out.detach().float() - ref.float()).abs().max().item()
                print(f"{tag} backend={name} fwd_us={f:.1f} bwd_us={b:.1f} picked={picked} maxdiff={diff:.3g}", flush=True)
                del out
            except RuntimeError as e:
                why = [str(w.message) for w in said if "disabled" not in str(w.message) and "not used because" not in str(w.message)]
                why = "; ".join(why + [str(e).splitlines()[0]]).replace("\n", " ")
                print(f"{tag} backend={name} unavailable: {why[:300]}", flush=True)
        del qkv, q, k, v, kx, vx, go, ref
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--H", type=int, default=12)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--gqa", action="store_true")
    ap.add_argument("--Hkv", type=int, help="with --gqa: key/value heads of the one shape to time")
    a = ap.parse_args()
    if a.sweep:
        sweep(a.reps)
        return
    if a.gqa:
        if a.Hkv is not None and (a.Hkv < 1 or a.H % a.Hkv):
            ap.error(f"--Hkv {a.Hkv} must divide --H {a.H}")
        gqa(GQA if a.Hkv is None else [(a.B, a.H, a.Hkv, a.T, a.D)], a.reps)
        return
    dev = "cuda"
    for name, dt, tf32 in (("bf16", torch.bfloat16, False), ("f32", torch.float32, False), ("tf32", torch.float32, True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        g = torch.Generator(device=dev).manual_seed(1)
        qkv = torch.randn(a.B, a.T, 3, a.H, a.D, device=dev, dtype=dt, generator=g)
        q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
        go = torch.randn(a.B, a.H, a.T, a.D, device=dev, dtype=dt, generator=g)
        scale = a.D ** -0.5

        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        backend = type(out.grad_fn).__name__.replace("ScaledDotProduct", "").replace("Backward0", "") if out.grad_fn is not None else "?"

        def bwd():
            torch.autograd.grad(out, (q, k, v), go, retain_graph=True)

        f = median_us(fwd, a.reps)
        b = median_us(bwd, a.reps)
        print(f"sdpa {name} fwd_us={f:.1f} bwd_us={b:.1f} backend={backend}", flush=True)
        del qkv, q, k, v, go, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
