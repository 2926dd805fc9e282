"""bench_gpt2_torch.py: PyTorch's GPT-2 and Llama training speed and memory, the baseline train_gpt2.c
must beat (make bench-gpt2; data parallel under torchrun: make bench-dist).

    python3 bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --compile \
        --recompute none --json-out build/bench/torch_gpt2.jsonl

Trains the model of tests/gpt2_torch.py (GPT-2 presets: fused SDPA attention) or of
tests/llama_torch.py (llama.h's presets: SDPA with grouped-query attention) with fused AdamW;
--config dLwC is gpt2.h's shape of that name (L layers of width C, heads of 128), made and
initialized on the GPU;
one micro-batch of random tokens per step. --recompute attn|mlp|block wraps the regions
train_gpt2's --recompute remakes in torch.utils.checkpoint (tests/gpt2_torch.py, residual_block).
Each step (zero_grad, forward, backward, optimizer step) is timed with CUDA events and
synchronized; the first --warmup steps (torch.compile's compilation among them) are left out of
the timing but not out of the peak memory, which is what the process needs.
The last line printed is one JSON object, also appended to --json-out; an
out-of-memory run reports {"oom": true, ...} and exits 0.

Launched by torchrun (WORLD_SIZE > 1) it trains with DistributedDataParallel (NCCL, --bucket-mb
buckets, B rows per GPU): tokens_per_s is then the global rate and rank 0 reports.
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import gpt2_torch as g  # noqa: E402
import fp8_linear_torch as fp8_linear  # noqa: E402
import llama_torch as lt  # noqa: E402

assert not set(g.CONFIGS) & set(lt.CONFIGS), "a preset name in both families"
PRESETS = [*g.CONFIGS, *lt.CONFIGS]
SMALL = ("tiny", "ls2", "ls4")   # peak learning rate 1e-3; the others d12's 1e-4 (the speed does not depend on it)


def shape_config(name):
    """gpt2.h's "dLwC" names: L layers of width C (a multiple of 128), heads of 128, T 1024; else None"""
    m = re.fullmatch(r"d(\d+)w(\d+)", name)
    if not m or int(m[2]) % 128 or int(m[1]) < 1:
        return None
    return g.GPTConfig(max_seq_len=1024, vocab_size=50257, num_layers=int(m[1]), num_heads=int(m[2]) // 128, channels=int(m[2]))


def config_name(name):
    if name not in PRESETS and not shape_config(name):
        raise argparse.ArgumentTypeError(f"{name}: not a preset ({', '.join(PRESETS)}) nor dLwC")
    return name


def context(name):
    return lt.CONFIGS[name].maxT if name in lt.CONFIGS else (shape_config(name) or g.CONFIGS.get(name)).max_seq_len


def init_on_device(model, seed):
    """GPT-2's init drawn on the GPU (a dLwC model of billions: no CPU copy, no CPU draws): the same
    distributions as gpt2_torch.init_weights, other numbers (the speed and memory do not depend on them)"""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    resid_std = 0.02 / math.sqrt(2 * model.config.num_layers)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0.0, resid_std if name.endswith(".proj") else 0.02, generator=gen)
                m.bias.zero_()
            elif isinstance(m, torch.nn.Embedding):
                m.weight.normal_(0.0, 0.02, generator=gen)
            elif isinstance(m, torch.nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()


def build(args):
    """(the model of --config on the GPU, initialized; its vocabulary V)"""
    if args.config in lt.CONFIGS:
        cfg = lt.CONFIGS[args.config]
        with torch.device("cuda"):   # made and initialized on the GPU: no CPU copy of a 1B or 8B model
            model = lt.Llama(cfg, recompute=args.recompute)
        lt.init_weights(model, args.seed)
        return model, cfg.V
    cfg = shape_config(args.config)
    if cfg:
        with torch.device("cuda"):
            model = g.GPT(cfg, attention="sdpa", recompute=args.recompute)
        init_on_device(model, args.seed)
        return model, cfg.vocab_size
    cfg = g.CONFIGS[args.config]
    model = g.GPT(cfg, attention="sdpa", recompute=args.recompute)
    g.init_weights(model, args.seed)
    return model.to("cuda"), cfg.vocab_size


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=config_name, default="d12",
                   help="GPT-2 or Llama preset, or dLwC: L layers of width C (default d12)")
    p.add_argument("--B", type=int, default=16)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp8"], default="bf16",
                   help="fp8: GPT-2's block linears through torch._scaled_mm, delayed scaling (bench/fp8_linear_torch.py)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--recompute", choices=g.RECOMPUTE_MODES, default="none",
                   help="regions remade in the backward, as train_gpt2's --recompute (default none)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--json-out", help="append the result line to this file")
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP bucket size under torchrun (default 25)")
    return p.parse_args()


def world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def run(args, result):
    """Trains and fills in result; raises on out-of-memory."""
    fp8 = args.precision == "fp8"   # bf16 autocast, the block linears through _scaled_mm
    autocast = g.configure("bf16" if fp8 else args.precision, "cuda")
    model, vocab = build(args)
    model.train()
    if fp8:
        if args.config in lt.CONFIGS:
            sys.exit("--precision fp8: GPT-2's models only (bench/fp8_linear_torch.py)")
        states = fp8_linear.convert(model)
    opt = g.make_adamw(model, 1e-3 if args.config in SMALL else 1e-4, fused=True)
    if world() > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()],
                                                          bucket_cap_mb=args.bucket_mb)
    fwd = torch.compile(model) if args.compile else model
    result["params"] = sum(p.numel() for p in model.parameters())

    # A few batches of random tokens, rotated; y is x shifted by one as in real data.
    gen = torch.Generator(device="cuda").manual_seed(args.seed + int(os.environ.get("RANK", "0")))
    data = torch.randint(0, vocab, (4, args.B, args.T + 1), device="cuda", generator=gen)
    batches = [(d[:, :-1].contiguous(), d[:, 1:].contiguous()) for d in data]

    times_ms, losses = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        start.record()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = fwd(x, y)[1]  # drop the logits now: holding them would inflate the peak
        loss.backward()
        opt.step()
        if fp8:
            for st in states:
                st.update()
        end.record()
        end.synchronize()
        if step >= args.warmup:
            times_ms.append(start.elapsed_time(end))
        losses.append(loss.item())
    median = statistics.median(times_ms)
    result.update(median_ms=round(median, 3), mean_ms=round(statistics.mean(times_ms), 3),
                  min_ms=round(min(times_ms), 3), max_ms=round(max(times_ms), 3),
                  tokens_per_s=round(world() * args.B * args.T / (median / 1000.0), 1),
                  loss_first=round(losses[0], 6), loss_last=round(losses[-1], 6))


def is_oom(e):
    # torch.compile may wrap the allocator's error in its own exception type
    msg = str(e).lower()
    return (isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in msg
            or "cublas_status_alloc_failed" in msg)


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_gpt2_torch.py needs a CUDA GPU")
    if world() > 1:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group("nccl")
    if args.steps < 1 or args.warmup < 0 or not 1 <= args.T <= context(args.config):
        sys.exit(f"need --steps >= 1, --warmup >= 0 and 1 <= --T <= {context(args.config)} ({args.config}'s context)")
    result = {"impl": "pytorch", "config": args.config, "family": "llama" if args.config in lt.CONFIGS else "gpt2",
              "B": args.B, "T": args.T, "precision": args.precision, "compile": args.compile,
              "recompute": args.recompute, "steps": args.steps,
              "warmup": args.warmup, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "world": world(), "bucket_mb": args.bucket_mb if world() > 1 else None,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "oom": False}
    torch.cuda.reset_peak_memory_stats()
    try:
        run(args, result)
    except Exception as e:  # noqa: BLE001 -- only out-of-memory is turned into a result
        if not is_oom(e):
            raise
        result["oom"] = True
        result["error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    mib = 1024 * 1024
    result["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / mib, 1)
    result["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / mib, 1)
    line = json.dumps(result)
    if int(os.environ.get("RANK", "0")) == 0:
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(line + "\n")
        print(line)
    if world() > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
