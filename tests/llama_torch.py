"""llama_torch.py: a PyTorch mirror of llama.h's Llama, the baseline of train_gpt2 -e l125m and up
(bench/bench_gpt2_torch.py --config l125m; make bench-gpt2 MODEL=l125m).

Written against llama.h, not taken from transformers (it is checked against LlamaForCausalLM):
the same config fields and presets (llama.h's LLAMA__CFG table, argument for argument), the same
parameters (wqkv [(H + 2 Hkv) D, C]: q's H D rows, k's Hkv D, v's Hkv D; w13 [2F, C]: gate's F
rows, then up's F), llama_init's distribution (the bits differ: ours draws from Philox), and
    x = emb[idx]
    per layer  x += wo sdpa(rope(q), rope(k), v),   [q | k | v] = wqkv rmsnorm(x) attn_norm
               x += w2 (silu(gate) * up),           [gate | up] = w13 rmsnorm(x) mlp_norm
    loss = cross-entropy over the V real columns of head rmsnorm(x) norm   (head = emb when tied)
Attention is F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) on the Hkv key/value
heads as they come out of wqkv (no repeat_kv copy); RoPE is rotate_half (pairs i, i + D/2) with
theta and Llama 3.1's "llama3" frequency scaling; train_gpt2's --recompute regions are
gpt2_torch.py's residual_block (attn: rmsnorm + attention + add, mlp: rmsnorm + MLP + add).

    python3 tests/llama_torch.py --selfcheck   presets against llama.h's table, parameter counts (no torch)
    python3 tests/llama_torch.py --check       against transformers' LlamaForCausalLM in fp32 on the CPU
        (an untied config, and a tied one with llama3 scaling whose T crosses the original context):
        logits and loss within 1e-5; then every recompute mode's loss and gradients equal to none's,
        bit for bit, for this model and gpt2_torch's GPT (needs torch and transformers)
"""
import dataclasses
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402  (residual_block, RECOMPUTE_MODES; torch or its stand-in)

torch = gpt2_torch.torch
nn = gpt2_torch.nn
if torch is not None:
    import torch.nn.functional as F

# ----------------------------------------------------------------------------
# Config and presets (pure Python)

@dataclasses.dataclass
class LlamaConfig:
    L: int       # layers
    H: int       # query heads
    Hkv: int     # key/value heads (divides H)
    C: int       # channels; head dim D = C / H
    F: int       # the MLP's hidden width
    V: int       # vocabulary: the loss sees these columns
    maxT: int    # context
    tie: int = 0                    # 1: the head is the embedding
    theta: float = 500000.0         # RoPE base
    factor: float = 0.0             # llama3 scaling when > 0
    low_freq_factor: float = 0.0
    high_freq_factor: float = 0.0
    original_max_position_embeddings: int = 0
    eps: float = 1e-5               # RMSNorm's epsilon
    Vp: int = 0                     # V rounded up to 128 (the embedding's and head's rows) unless given

    def __post_init__(self):
        if self.Vp == 0:
            self.Vp = (self.V + 127) // 128 * 128
        D = self.C // self.H if self.H else 0
        if self.H % self.Hkv or self.C % self.H or D % 2 or self.Vp < self.V:
            raise ValueError(f"bad Llama config {self}")


def _cfg(L, H, Hkv, C, F, V, maxT, tie, theta, factor, lo, hi, orig):
    """llama.h's LLAMA__CFG, the same arguments in the same order"""
    return LlamaConfig(L, H, Hkv, C, F, V, maxT, tie, float(theta), float(factor), float(lo), float(hi), orig)


CONFIGS = {
    "l125m": _cfg(12, 12, 4, 768, 2048, 50257, 1024, 1, 500000, 0, 0, 0, 0),
    "l125m_128k": _cfg(12, 12, 4, 768, 2048, 128256, 1024, 1, 500000, 0, 0, 0, 0),
    "llama3.2-1b": _cfg(16, 32, 8, 2048, 8192, 128256, 131072, 1, 500000, 32, 1, 4, 8192),
    "llama3-8b": _cfg(32, 32, 8, 4096, 14336, 128256, 8192, 0, 500000, 0, 0, 0, 0),
    "llama3.1-8b": _cfg(32, 32, 8, 4096, 14336, 128256, 131072, 0, 500000, 8, 1, 4, 8192),
    "ls4": _cfg(4, 4, 2, 128, 384, 50257, 256, 1, 500000, 0, 0, 0, 0),
    "ls2": _cfg(2, 4, 2, 64, 192, 50257, 128, 1, 500000, 0, 0, 0, 0),
}


def num_params(c):
    """llama_num_params: per layer two norms, wqkv, wo, w13, w2; the embedding (and an untied head); the
    final norm. The padded rows count."""
    D = c.C // c.H
    layer = 2 * c.C + (c.H + 2 * c.Hkv) * D * c.C + c.C * c.H * D + 2 * c.F * c.C + c.C * c.F
    return c.Vp * c.C * (1 if c.tie else 2) + c.L * layer + c.C

# ----------------------------------------------------------------------------
# The model (needs torch)

def rope_inv_freq(c):
    """bt_rope_inv_freq: the D/2 fp32 inverse frequencies theta^(-2i/D); with llama3 scaling
    (factor > 0), wavelength w = 2 pi / f against lo = Lmax / low_freq_factor, hi = Lmax /
    high_freq_factor (Lmax the original context): w < hi keeps f, w > lo gives f / factor, in
    between (1 - s) f / factor + s f with s = (Lmax / w - low_freq_factor) / (high - low)."""
    D = c.C // c.H
    f = 1.0 / (c.theta ** (torch.arange(0, D, 2, dtype=torch.int64, device="cpu").float() / D))
    if c.factor > 0:
        Lmax = c.original_max_position_embeddings
        w = 2 * math.pi / f
        s = (Lmax / w - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor)
        mid = (1 - s) * f / c.factor + s * f
        f = torch.where(w < Lmax / c.high_freq_factor, f, torch.where(w > Lmax / c.low_freq_factor, f / c.factor, mid))
    return f


def rope(x, cos, sin):
    """x [B, T, heads, D]; cos, sin [T, D] of the fp32 angles p inv_freq[i] (each twice: pairs i, i + D/2):
    y[i] = x[i] cos - x[i + D/2] sin, y[i + D/2] = x[i + D/2] cos + x[i] sin. cos and sin are rounded to
    x's dtype first, as transformers does (llama.h rotates in fp32, one rounding: ~1 bf16 ulp apart)."""
    cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    """llama_layer: attn_norm, wqkv, wo, mlp_norm, w13, w2 (no biases)"""

    def __init__(self, c, recompute="none"):
        super().__init__()
        D = c.C // c.H
        self.c, self.recompute = c, recompute
        self.attn_norm = nn.Parameter(torch.ones(c.C))
        self.wqkv = nn.Linear(c.C, (c.H + 2 * c.Hkv) * D, bias=False)
        self.wo = nn.Linear(c.H * D, c.C, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(c.C))
        self.w13 = nn.Linear(c.C, 2 * c.F, bias=False)
        self.w2 = nn.Linear(c.F, c.C, bias=False)

    # the residual sublayers, the regions of gpt2_torch.residual_block
    def sublayer_attn(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        D = c.C // c.H
        qkv = self.wqkv(F.rms_norm(x, (c.C,), self.attn_norm, c.eps)).view(B, T, c.H + 2 * c.Hkv, D)
        q, k, v = qkv.split([c.H, c.Hkv, c.Hkv], dim=2)   # [B, T, heads, D] views
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # query head h reads key/value head h / (H / Hkv) inside the kernel
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=c.Hkv != c.H)   # [B, H, T, D]
        return x + self.wo(y.transpose(1, 2).reshape(B, T, c.H * D))

    def sublayer_mlp(self, x):
        gate, up = self.w13(F.rms_norm(x, (self.c.C,), self.mlp_norm, self.c.eps)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)

    def sublayers(self, x, cos, sin):
        return self.sublayer_mlp(self.sublayer_attn(x, cos, sin))

    def forward(self, x, cos, sin):
        return gpt2_torch.residual_block(self, x, cos, sin)


class Llama(nn.Module):
    """llama.h's model; recompute one of gpt2_torch.RECOMPUTE_MODES. Made on the default device (a
    torch.device context makes it on the GPU directly)."""

    def __init__(self, c, recompute="none"):
        super().__init__()
        if recompute not in gpt2_torch.RECOMPUTE_MODES:
            raise ValueError(f"recompute {recompute!r}: expected one of {', '.join(gpt2_torch.RECOMPUTE_MODES)}")
        self.config = c
        self.emb = nn.Embedding(c.Vp, c.C)
        self.layers = nn.ModuleList(Layer(c, recompute) for _ in range(c.L))
        self.norm = nn.Parameter(torch.ones(c.C))
        self.head = None if c.tie else nn.Linear(c.C, c.Vp, bias=False)
        # computed on the CPU (the same fp32 bits wherever the model is made), then beside the weights
        self.register_buffer("inv_freq", rope_inv_freq(c).to(self.norm.device), persistent=False)

    def forward(self, idx, targets=None):
        """idx, targets: (B,T) int64. Returns logits (B,T,Vp) and the mean loss (or None)."""
        c = self.config
        B, T = idx.shape
        if T > c.maxT:
            raise ValueError(f"T={T} exceeds the context of {c.maxT}")
        angle = torch.arange(T, device=idx.device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]   # [T, D/2]
        angle = torch.cat((angle, angle), dim=-1)
        cos, sin = angle.cos(), angle.sin()
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        h = F.rms_norm(x, (c.C,), self.norm, c.eps)
        logits = F.linear(h, self.emb.weight if c.tie else self.head.weight)
        loss = None
        if targets is not None:  # cross-entropy over the V real columns only
            loss = F.cross_entropy(logits[..., :c.V].reshape(B * T, c.V), targets.reshape(B * T))
        return logits, loss


def init_weights(model, seed):
    """llama_init's distribution: every matrix and the embedding N(0, 0.02), the norms 1, the
    embedding's and head's padded rows 0. Drawn on the parameters' device (fast for 8B; the same seed
    on the same kind of device gives the same weights)."""
    c = model.config
    with torch.no_grad():
        g = torch.Generator(device=model.norm.device).manual_seed(seed)
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=g)
        for t in (model.emb.weight, None if c.tie else model.head.weight):
            if t is not None:
                t[c.V:].zero_()

# ----------------------------------------------------------------------------
# Self-check (no torch) and the check against transformers

def selfcheck():
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "llama.h")).read()
    table = {m[0]: _cfg(*(float(v) if "." in v or "e" in v else int(v) for v in m[1].replace(" ", "").split(",")))
             for m in re.findall(r'\{"([^"]+)", LLAMA__CFG\(([^)]*)\)', src)}
    assert table == CONFIGS, f"llama.h's presets differ from CONFIGS:\n{table}\n{CONFIGS}"
    for name, c in CONFIGS.items():
        print(f"{name}: {c}\n  {num_params(c):,d} parameters")
    # train_gpt2 -e NAME prints these (M, two decimals); the 1B and 8B: Meta's published counts
    for name, n in (("ls2", 3.32e6), ("ls4", 7.23e6), ("l125m", 114.15e6), ("l125m_128k", 174.02e6)):
        assert abs(num_params(CONFIGS[name]) - n) < 0.005e6, (name, num_params(CONFIGS[name]))
    assert num_params(CONFIGS["llama3.2-1b"]) == 1_235_814_400, num_params(CONFIGS["llama3.2-1b"])
    assert num_params(CONFIGS["llama3-8b"]) == 8_030_261_248, num_params(CONFIGS["llama3-8b"])
    print(f"selfcheck OK ({len(table)} presets as in llama.h)")


def from_hf(hf, c):
    """the mirror with a LlamaForCausalLM's weights (q, k, v stacked into wqkv, gate and up into w13)"""
    m = Llama(c)
    sd = hf.state_dict()
    with torch.no_grad():
        m.emb.weight.zero_()
        m.emb.weight[:c.V] = sd["model.embed_tokens.weight"]
        for l, y in enumerate(m.layers):
            p = f"model.layers.{l}."
            y.attn_norm.copy_(sd[p + "input_layernorm.weight"])
            y.wqkv.weight.copy_(torch.cat([sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]))
            y.wo.weight.copy_(sd[p + "self_attn.o_proj.weight"])
            y.mlp_norm.copy_(sd[p + "post_attention_layernorm.weight"])
            y.w13.weight.copy_(torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]))
            y.w2.weight.copy_(sd[p + "mlp.down_proj.weight"])
        m.norm.copy_(sd["model.norm.weight"])
        if not c.tie:
            m.head.weight.zero_()
            m.head.weight[:c.V] = sd["lm_head.weight"]
    return m


def same_backward(make, idx, tg, what):
    """every recompute mode's loss and gradients against none's, bit for bit; returns the failures"""
    ref = None
    bad = 0
    for mode in gpt2_torch.RECOMPUTE_MODES:
        model = make(mode)
        loss = model(idx, tg)[1]
        loss.backward()
        got = (loss.detach(), {n: p.grad for n, p in model.named_parameters()})
        if ref is None:
            ref = got
            continue
        diff = [n for n in ref[1] if not torch.equal(ref[1][n], got[1][n])]
        ok = torch.equal(ref[0], got[0]) and not diff
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what} recompute {mode}: loss {got[0].item():.6f}"
              + (f", gradients differ: {diff[:3]}" if diff else ", every gradient equal to none's"))
    return bad


def check():
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    bad = 0
    for tied in (0, 1):
        c = LlamaConfig(L=4, H=8, Hkv=2, C=256, F=512, V=1000, maxT=128, tie=tied)
        kw = dict(vocab_size=c.V, hidden_size=c.C, intermediate_size=c.F, num_hidden_layers=c.L, num_attention_heads=c.H,
                  num_key_value_heads=c.Hkv, max_position_embeddings=c.maxT, rms_norm_eps=c.eps, rope_theta=c.theta,
                  tie_word_embeddings=bool(tied), hidden_act="silu", attention_bias=False, mlp_bias=False)
        if tied:   # T 64 crosses the original context of 32
            c.factor, c.low_freq_factor, c.high_freq_factor, c.original_max_position_embeddings = 8.0, 1.0, 4.0, 32
            kw["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 32}
        hfc = HFConfig(**kw)
        hfc._attn_implementation = "eager"
        torch.manual_seed(1 + tied)
        hf = LlamaForCausalLM(hfc).float().eval()
        with torch.no_grad():   # the norms random too, so that a misplaced tensor shows
            for n, p in hf.named_parameters():
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if n.endswith("norm.weight") else 0.02 * torch.randn_like(p))
        idx = torch.randint(0, c.V, (2, 64))
        tg = torch.randint(0, c.V, (2, 64))
        ref = hf(input_ids=idx).logits.detach()
        ref_loss = F.cross_entropy(ref.reshape(-1, c.V), tg.reshape(-1))
        m = from_hf(hf, c)
        assert sum(p.numel() for p in m.parameters()) == num_params(c)
        logits, loss = m(idx, tg)
        e = ((logits[..., :c.V] - ref).norm() / ref.norm()).item()
        el = abs(loss.item() - ref_loss.item()) / abs(ref_loss.item())
        ok = e <= 1e-5 and el <= 1e-5
        bad += not ok
        what = "tied, llama3 rope scaling" if tied else "untied"
        print(f"{'ok  ' if ok else 'FAIL'} {what}: logits relative error {e:.2e}, loss {loss.item():.6f} vs "
              f"{ref_loss.item():.6f} (relative {el:.2e}; tolerance 1e-5)")

        def make(mode, c=c, hf=hf):
            m = from_hf(hf, c)
            for y in m.layers:
                y.recompute = mode
            return m
        bad += same_backward(make, idx, tg, f"Llama ({what})")

    gc = gpt2_torch.CONFIGS["tiny"]

    def make_gpt(mode):
        m = gpt2_torch.GPT(gc, attention="sdpa", recompute=mode)
        gpt2_torch.init_weights(m, 1337)
        return m
    idx = torch.randint(0, gc.vocab_size, (2, 64))
    bad += same_backward(make_gpt, idx, torch.randint(0, gc.vocab_size, (2, 64)), "GPT-2 tiny")
    print("check OK" if not bad else f"check FAILED: {bad}")
    return bad


if __name__ == "__main__":
    if sys.argv[1:] == ["--selfcheck"]:
        selfcheck()
    elif sys.argv[1:] == ["--check"]:
        sys.exit(1 if check() else 0)
    else:
        sys.exit("usage: python3 tests/llama_torch.py --selfcheck | --check")
