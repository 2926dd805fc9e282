"""fp8_linear_torch.py: the PyTorch mirror of train_gpt2's --precision fp8, for bench_gpt2_torch.py
--precision fp8. GPT-2's four block linears (qkv, attention projection, MLP fc and projection) run
their three products through torch._scaled_mm, the rest of the model under bf16 autocast:

    forward   y  = x w^T + b      x, w in e4m3, bf16 out, the bias added by the product, fast
                                  accumulation (train_gpt2's default --fp8-accum fast-dx, torchao's too)
    backward  gx = gy w           gy in e5m2, w in e4m3, fast accumulation (fast-dx: a sum over the
                                  layer's output width)
              gw = gy^T x         gy in e5m2, x in e4m3 (fp32 into the master weight's gradient),
                                  promoted accumulation (a sum over the batch's tokens)

with docs/fp8.md's delayed recipe: per tensor (x, w, gy of each linear) a cast q = fp8(t / s),
saturating, s = (the largest amax of the last `history` steps) / fmax, fmax 448 (e4m3) or 57344
(e5m2); each cast takes the max of its tensor's amax into the state, and update() once per
optimizer step pushes it into the history. Before a tensor's history holds an amax (the first step)
its casts use its own amax. _scaled_mm wants its second operand column-major, so the backward makes
the transposed copies (w^T's and x^T's) that cuBLASLt's FP8 layouts need, as train_gpt2's casts do.
"""
import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMAX = {E4M3: 448.0, E5M2: 57344.0}


class Scale:
    """One tensor's delayed-scaling state: the amax since the last update and the last n amaxes."""

    def __init__(self, history, device):
        self.hist = torch.zeros(history, device=device)
        self.amax = torch.zeros((), device=device)
        self.primed = False

    def cast(self, t, dtype):
        """(t / s in dtype, saturated; s as a 0-d fp32 tensor)"""
        amax = t.detach().abs().amax().float()
        torch.maximum(self.amax, amax, out=self.amax)
        ref = self.hist.max() if self.primed else amax
        s = torch.clamp(ref, min=1e-12) / FMAX[dtype]
        q = (t.float() / s).clamp(-FMAX[dtype], FMAX[dtype]).to(dtype)
        return q, s

    def update(self):
        self.hist = torch.roll(self.hist, 1)
        self.hist[0] = self.amax
        self.amax.zero_()
        self.primed = True


class LinearState:
    def __init__(self, history, device):
        self.x, self.w, self.gy = Scale(history, device), Scale(history, device), Scale(history, device)

    def update(self):
        for s in (self.x, self.w, self.gy):
            s.update()


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, st):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, sx = st.x.cast(x2, E4M3)
        wq, sw = st.w.cast(w, E4M3)
        y = torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, bias=b.to(torch.bfloat16), out_dtype=torch.bfloat16,
                             use_fast_accum=True)
        ctx.save_for_backward(xq, wq, sx, sw)
        ctx.st, ctx.shape, ctx.dtype = st, shape, x.dtype
        return y.reshape(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, gy):
        xq, wq, sx, sw = ctx.saved_tensors
        gy2 = gy.reshape(-1, gy.shape[-1])
        gq, sg = ctx.st.gy.cast(gy2, E5M2)
        gx = torch._scaled_mm(gq, wq.t().contiguous().t(), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16,
                              use_fast_accum=True)
        gw = torch._scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), scale_a=sg, scale_b=sx, out_dtype=torch.bfloat16)
        return gx.reshape(ctx.shape).to(ctx.dtype), gw.float(), gy2.float().sum(0), None


def convert(model, history=16):
    """Routes the four block linears of tests/gpt2_torch.py's GPT through _Fp8Linear; returns the
    states, whose update() the training loop calls after each optimizer step."""
    states = []
    for block in model.blocks:
        for lin in (block.attn.qkv, block.attn.proj, block.mlp.fc, block.mlp.proj):
            st = LinearState(history, lin.weight.device)
            lin.forward = (lambda m, s: lambda x: _Fp8Linear.apply(x, m.weight, m.bias, s))(lin, st)
            states.append(st)
    return states
