"""gpt2_torch.py: the PyTorch GPT-2 that BluTrain-C's train_gpt2.c is checked against.

One definition shared by tests/gpt2_ref.py (the parity fixture) and
bench/bench_gpt2_torch.py (the speed baseline): the model, its init, the
AdamW parameter groups, the precision switches, the recompute regions of
train_gpt2's --recompute (torch.utils.checkpoint), and the model file layout
(tests/gpt2_formats.md). Run `python3 tests/gpt2_torch.py --selfcheck` to check
the layout and parameter counts; that needs no torch.
"""
import contextlib
import dataclasses
import math
import struct
import sys
import warnings

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint
except ImportError:  # only --selfcheck works without torch
    torch = None

    class nn:  # lets the class statements below run; using them needs torch
        Module = object

# ----------------------------------------------------------------------------
# Config and file layout (pure Python)

@dataclasses.dataclass
class GPTConfig:
    max_seq_len: int         # maxT: rows of the position embedding
    vocab_size: int          # V: real tokens; the loss only sees these columns
    num_layers: int          # L
    num_heads: int           # H
    channels: int            # C (head size D = C / H)
    padded_vocab_size: int = 0  # Vp: V rounded up to a multiple of 128 unless given

    def __post_init__(self):
        if self.padded_vocab_size == 0:
            self.padded_vocab_size = (self.vocab_size + 127) // 128 * 128
        if self.channels % self.num_heads or self.padded_vocab_size < self.vocab_size:
            raise ValueError(f"bad GPT config {self}")


CONFIGS = {
    "tiny": GPTConfig(max_seq_len=64, vocab_size=1000, num_layers=2, num_heads=4, channels=64),
    "d12": GPTConfig(max_seq_len=1024, vocab_size=50257, num_layers=12, num_heads=12, channels=768),
    # gpt2.h's larger presets: GPT-2 medium, large, XL
    "d24": GPTConfig(max_seq_len=1024, vocab_size=50257, num_layers=24, num_heads=16, channels=1024),
    "d36": GPTConfig(max_seq_len=1024, vocab_size=50257, num_layers=36, num_heads=20, channels=1280),
    "d48": GPTConfig(max_seq_len=1024, vocab_size=50257, num_layers=48, num_heads=25, channels=1600),
}

# AdamW hyperparameters shared by the reference and the benchmark.
BETAS, ADAM_EPS, WEIGHT_DECAY = (0.9, 0.95), 1e-8, 0.1
MODEL_MAGIC, MODEL_VERSION = 20240326, 3   # llm.c's checkpoint header, fp32 payload
STATE_MAGIC, STATE_VERSION = 20240327, 1
HEADER_INTS = 256


def param_layout(cfg):
    """The model file's tensors in order: (file name, shape, parameter name in GPT, per_layer).
    A per_layer tensor is the L copies of blocks.{l}.<name> stacked on a new first axis."""
    Vp, maxT, L, C = cfg.padded_vocab_size, cfg.max_seq_len, cfg.num_layers, cfg.channels
    return [
        ("wte",      (Vp, C),          "wte.weight",        False),
        ("wpe",      (maxT, C),        "wpe.weight",        False),
        ("ln1w",     (L, C),           "ln1.weight",        True),
        ("ln1b",     (L, C),           "ln1.bias",          True),
        ("qkvw",     (L, 3 * C, C),    "attn.qkv.weight",   True),
        ("qkvb",     (L, 3 * C),       "attn.qkv.bias",     True),
        ("attprojw", (L, C, C),        "attn.proj.weight",  True),
        ("attprojb", (L, C),           "attn.proj.bias",    True),
        ("ln2w",     (L, C),           "ln2.weight",        True),
        ("ln2b",     (L, C),           "ln2.bias",          True),
        ("fcw",      (L, 4 * C, C),    "mlp.fc.weight",     True),
        ("fcb",      (L, 4 * C),       "mlp.fc.bias",       True),
        ("fcprojw",  (L, C, 4 * C),    "mlp.proj.weight",   True),
        ("fcprojb",  (L, C),           "mlp.proj.bias",     True),
        ("lnfw",     (C,),             "lnf.weight",        False),
        ("lnfb",     (C,),             "lnf.bias",          False),
    ]


def num_params(cfg):
    return sum(math.prod(shape) for _, shape, _, _ in param_layout(cfg))


def pack_header(*ints):
    """256 little-endian int32: the given ones first, the rest zero."""
    return struct.pack(f"<{HEADER_INTS}i", *ints, *[0] * (HEADER_INTS - len(ints)))


def read_model_header(f):
    """Reads and checks a model file header; returns its GPTConfig."""
    raw = f.read(4 * HEADER_INTS)
    if len(raw) != 4 * HEADER_INTS:
        raise ValueError(f"{f.name}: shorter than the {4 * HEADER_INTS}-byte header")
    h = struct.unpack(f"<{HEADER_INTS}i", raw)
    if h[0] != MODEL_MAGIC or h[1] != MODEL_VERSION:
        raise ValueError(f"{f.name}: magic/version {h[0]}/{h[1]}, expected {MODEL_MAGIC}/{MODEL_VERSION} (fp32)")
    return GPTConfig(max_seq_len=h[2], vocab_size=h[3], num_layers=h[4], num_heads=h[5],
                     channels=h[6], padded_vocab_size=h[7])

# ----------------------------------------------------------------------------
# The model (needs torch)

# train_gpt2's --recompute regions (gpt2.h, gpt2__block), each kept as its input x and remade in the
# backward: attn = x + attention(norm1(x)), mlp = x + mlp(norm2(x)), block = both in one region.
RECOMPUTE_MODES = ("none", "attn", "mlp", "block")


def remade(fn, *args):
    """fn(*args) kept as its inputs, run again in the backward: torch.utils.checkpoint with
    use_reentrant=False (the recompute runs in the forward's autocast) and preserve_rng_state=False
    (nothing in the regions draws random numbers: no RNG state to save and replay)"""
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)


def residual_block(block, x, *extra):
    """block.sublayer_attn(x, *extra) then block.sublayer_mlp, each x + sublayer(norm(x)), under
    block.recompute (regions remade as above)."""
    mode = block.recompute
    if mode == "block":
        return remade(block.sublayers, x, *extra)
    x = remade(block.sublayer_attn, x, *extra) if mode == "attn" else block.sublayer_attn(x, *extra)
    return remade(block.sublayer_mlp, x) if mode == "mlp" else block.sublayer_mlp(x)


class SelfAttention(nn.Module):
    def __init__(self, cfg, attention):
        super().__init__()
        self.num_heads, self.attention = cfg.num_heads, attention
        self.qkv = nn.Linear(cfg.channels, 3 * cfg.channels)
        self.proj = nn.Linear(cfg.channels, cfg.channels)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.num_heads, C // self.num_heads
        # (B,T,3C) -> q,k,v each (B,T,C) -> (B,H,T,D)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # "math": softmax(q k^T / sqrt(D) + causal mask) v, spelled out
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))       # (B,H,T,T)
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(future, float("-inf")).softmax(dim=-1) @ v  # (B,H,T,D)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.channels, 4 * cfg.channels)
        self.proj = nn.Linear(4 * cfg.channels, cfg.channels)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg, attention, recompute="none"):
        super().__init__()
        self.recompute = recompute
        self.ln1 = nn.LayerNorm(cfg.channels, eps=1e-5)
        self.attn = SelfAttention(cfg, attention)
        self.ln2 = nn.LayerNorm(cfg.channels, eps=1e-5)
        self.mlp = MLP(cfg)

    # pre-norm residual sublayers, the regions of residual_block
    def sublayer_attn(self, x):
        return x + self.attn(self.ln1(x))

    def sublayer_mlp(self, x):
        return x + self.mlp(self.ln2(x))

    def sublayers(self, x):
        return self.sublayer_mlp(self.sublayer_attn(x))

    def forward(self, x):
        return residual_block(self, x)


class GPT(nn.Module):
    """GPT-2. attention="math" (explicit, for the fp32 reference) or "sdpa" (fused); recompute one
    of RECOMPUTE_MODES (the same losses and gradients, less memory, more work)."""

    def __init__(self, cfg, attention="math", recompute="none"):
        super().__init__()
        if recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute {recompute!r}: expected one of {', '.join(RECOMPUTE_MODES)}")
        self.config = cfg
        self.wte = nn.Embedding(cfg.padded_vocab_size, cfg.channels)  # also the LM head
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.channels)
        self.blocks = nn.ModuleList(Block(cfg, attention, recompute) for _ in range(cfg.num_layers))
        self.lnf = nn.LayerNorm(cfg.channels, eps=1e-5)

    def forward(self, idx, targets=None):
        """idx, targets: (B,T) int64. Returns logits (B,T,Vp) and the mean loss (or None)."""
        B, T = idx.shape
        if T > self.config.max_seq_len:
            raise ValueError(f"T={T} exceeds max_seq_len={self.config.max_seq_len}")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied: x @ wte^T, all Vp columns
        loss = None
        if targets is not None:  # cross-entropy over the V real columns only
            V = self.config.vocab_size
            loss = F.cross_entropy(logits[..., :V].reshape(B * T, V), targets.reshape(B * T))
        return logits, loss


def init_weights(model, seed):
    """GPT-2 init, drawn on the CPU so every device gets the same weights:
    weights and embeddings N(0, 0.02), the two projections into the residual
    stream (modules named "proj") N(0, 0.02/sqrt(2L)), biases 0, layernorm 1/0."""
    g = torch.Generator().manual_seed(seed)
    resid_std = 0.02 / math.sqrt(2 * model.config.num_layers)

    def normal_(p, std):
        p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=g))

    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                normal_(m.weight, resid_std if name.endswith(".proj") else 0.02)
                m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                normal_(m.weight, 0.02)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()


def make_adamw(model, lr, fused=False):
    """torch.optim.AdamW; weight decay only on tensors with ndim >= 2 (weights, embeddings)."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=ADAM_EPS, fused=fused or None)


def configure(precision, device_type="cuda"):
    """Sets the TF32 switches for precision ("fp32", "tf32", "bf16") and returns a
    function giving the context to run the forward pass in: nothing, or bf16 autocast
    (fp32 master weights). Only the legacy allow_tf32 setters are used: they keep the
    old and new TF32 flags in agreement, which torch.compile checks."""
    if precision not in ("fp32", "tf32", "bf16"):
        raise ValueError(f"precision {precision!r}: expected fp32, tf32 or bf16")
    with warnings.catch_warnings():  # torch >= 2.9 warns that these setters are old
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext

# ----------------------------------------------------------------------------
# Model file I/O (tests/gpt2_formats.md)

def file_tensors(model, grads=False):
    """[(file name, tensor)] in file order, per-layer tensors stacked; grads=True gives .grad."""
    params = dict(model.named_parameters())
    pick = (lambda key: params[key].grad) if grads else (lambda key: params[key])
    out = []
    for name, shape, key, per_layer in param_layout(model.config):
        if per_layer:
            t = torch.stack([pick(f"blocks.{l}.{key}") for l in range(model.config.num_layers)])
        else:
            t = pick(key)
        assert tuple(t.shape) == shape, (name, tuple(t.shape), shape)
        out.append((name, t.detach()))
    return out


def write_floats(f, t):
    """Appends tensor t to f as little-endian fp32, row-major."""
    f.write(t.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4", copy=False).tobytes())


def write_model(path, model):
    c = model.config
    with open(path, "wb") as f:
        f.write(pack_header(MODEL_MAGIC, MODEL_VERSION, c.max_seq_len, c.vocab_size,
                            c.num_layers, c.num_heads, c.channels, c.padded_vocab_size))
        for _, t in file_tensors(model):
            write_floats(f, t)


def read_model(path, attention="math"):
    """Builds a GPT (on the CPU) from a model file, checking its header and size."""
    import numpy as np
    with open(path, "rb") as f:
        cfg = read_model_header(f)
        raw = f.read()
    if len(raw) != 4 * num_params(cfg):
        raise ValueError(f"{path}: {len(raw)} bytes after the header, expected {4 * num_params(cfg)} "
                         f"({num_params(cfg)} fp32) for {cfg}")
    data = np.frombuffer(raw, dtype="<f4")
    model = GPT(cfg, attention)
    params, offset = dict(model.named_parameters()), 0
    with torch.no_grad():
        for _, shape, key, per_layer in param_layout(cfg):
            n = math.prod(shape)
            t = torch.from_numpy(data[offset:offset + n].astype("float32")).view(shape)
            offset += n
            if per_layer:
                for l in range(cfg.num_layers):
                    params[f"blocks.{l}.{key}"].copy_(t[l])
            else:
                params[key].copy_(t)
    return model

# ----------------------------------------------------------------------------
# Self-check (no torch): python3 tests/gpt2_torch.py --selfcheck

def selfcheck():
    import io
    for name, cfg in CONFIGS.items():
        print(f"{name}: {cfg}")
        offset = 0
        for fname, shape, _, _ in param_layout(cfg):
            n = math.prod(shape)
            print(f"  {fname:9s} {str(list(shape)):18s} {n:>11,d} floats at float offset {offset:>11,d}")
            offset += n
        print(f"  total {num_params(cfg):,d} params; model file {4 * HEADER_INTS + 4 * num_params(cfg):,d} bytes")
    assert CONFIGS["d12"].padded_vocab_size == 50304 and CONFIGS["tiny"].padded_vocab_size == 1024
    assert num_params(CONFIGS["d12"]) == 124_475_904, num_params(CONFIGS["d12"])
    assert num_params(CONFIGS["d48"]) == 1_557_686_400, num_params(CONFIGS["d48"])   # gpt2.h: d48 1558M
    # header round trip through the reader
    c = CONFIGS["tiny"]
    f = io.BytesIO(pack_header(MODEL_MAGIC, MODEL_VERSION, c.max_seq_len, c.vocab_size,
                               c.num_layers, c.num_heads, c.channels, c.padded_vocab_size))
    f.name = "<memory>"
    assert read_model_header(f) == c and len(f.getvalue()) == 1024
    bad = io.BytesIO(pack_header(MODEL_MAGIC, 5))
    bad.name = "<memory>"
    try:
        read_model_header(bad)
        raise AssertionError("a version-5 header was accepted")
    except ValueError as e:
        print(f"rejected as expected: {e}")
    print("selfcheck OK")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selfcheck"]:
        selfcheck()
    else:
        sys.exit("usage: python3 tests/gpt2_torch.py --selfcheck")
