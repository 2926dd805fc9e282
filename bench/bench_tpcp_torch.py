"""bench_tpcp_torch.py: PyTorch's own tensor and context parallelism on GPT-2, the counterpart of
train_gpt2 --tp / --cp (make bench-tpcp runs both: bench/bench_tpcp.sh).

    torchrun --nproc_per_node 2 bench/bench_tpcp_torch.py --mode tp --B 8 --T 1024 --json-out OUT.jsonl
    torchrun --nproc_per_node 2 bench/bench_tpcp_torch.py --mode cp --rotate allgather --B 1 --T 16384
    python3 bench/bench_tpcp_torch.py --mode single --B 1 --T 16384     (one GPU, the same model)

The model is tests/gpt2_torch.py's (the one bench/bench_gpt2_torch.py trains), bf16 autocast,
AdamW, random tokens; a config d12 with maxT = max(1024, T) (the position table grows, as
train_gpt2's d12_32k preset does). Its attention runs q, k, v as local heads of the projection
(so a column split of qkv gives each rank whole heads: the qkv rows are ordered per rank at init).
  tp  torch.distributed.tensor.parallel: in every block qkv and fc ColwiseParallel, the two
      projections RowwiseParallel (Megatron's split); embeddings, layernorms and the head stay
      replicated (train_gpt2 also splits the vocabulary: its head and loss are vocabulary-parallel).
  cp  torch.distributed.tensor.experimental.context_parallel over all ranks: tokens, targets and
      positions sharded along the sequence (load-balanced), SDPA replaced by ring attention with
      --rotate allgather or alltoall; the gradients averaged over the ranks by DDP.
Each step (zero_grad, forward, backward, optimizer) is timed with CUDA events after --warmup
steps; the last line is one JSON object (tokens_per_s = B x T / median step; peak memory of
rank 0), appended to --json-out. Out of memory or a missing torch feature is reported in the JSON
({"oom": true} / {"error": ...}) and the script exits 0, so a benchmark script goes on.
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set here
when unset: NVLink multicast stays off.
"""
import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys

for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(k, "0" if k == "NCCL_NVLS_ENABLE" else "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import gpt2_torch as g  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["single", "tp", "cp"], default="tp")
    p.add_argument("--rotate", choices=["allgather", "alltoall"], default="allgather", help="cp: how K/V move")
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--json-out")
    return p.parse_args()


def attention_local_heads(self, x):
    """SelfAttention.forward on whatever heads this rank holds: qkv's output is [q | k | v] of them."""
    B, T, _ = x.shape
    D = self.head_dim
    q, k, v = self.qkv(x).chunk(3, dim=-1)
    h = q.shape[-1] // D
    q, k, v = (t.reshape(B, T, h, D).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.proj(y.transpose(1, 2).reshape(B, T, h * D))


def forward_loss(model, idx, targets, pos):
    """GPT.forward with explicit positions (context parallelism shards them with the tokens)."""
    x = model.wte(idx) + model.wpe(pos)
    for block in model.blocks:
        x = block(x)
    logits = F.linear(model.lnf(x), model.wte.weight)
    V = model.config.vocab_size
    return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.reshape(-1))


def order_qkv_rows(model, tp):
    """qkv rows [q; k; v] -> per rank [q_r; k_r; v_r], so that a contiguous row split is whole heads."""
    with torch.no_grad():
        for blk in model.blocks:
            C = blk.attn.qkv.weight.shape[1]
            idx = torch.arange(3 * C).view(3, tp, C // tp).transpose(0, 1).reshape(-1)
            blk.attn.qkv.weight.copy_(blk.attn.qkv.weight[idx])
            blk.attn.qkv.bias.copy_(blk.attn.qkv.bias[idx])


def build(args, world):
    cfg = dataclasses.replace(g.CONFIGS["d12"], max_seq_len=max(1024, args.T))
    model = g.GPT(cfg, attention="sdpa")
    g.init_weights(model, args.seed)
    for blk in model.blocks:
        blk.attn.head_dim = cfg.channels // cfg.num_heads
        blk.attn.forward = attention_local_heads.__get__(blk.attn)
    if args.mode == "tp":
        order_qkv_rows(model, world)
    return model.to("cuda").train(), cfg


def run(args, world, result):
    from torch.distributed.device_mesh import init_device_mesh
    model, cfg = build(args, world)
    ctx = None
    if args.mode == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("tp",))
        for blk in model.blocks:
            parallelize_module(blk, mesh, {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(),
                                           "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()})
    elif args.mode == "cp":
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import set_rotate_method
        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
        set_rotate_method(args.rotate)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
        ctx = (context_parallel, mesh)
    inner = model.module if hasattr(model, "module") else model   # DDP's (cp)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=1e-4, betas=(0.9, 0.95),
                            foreach=args.mode != "tp")   # tp: DTensor and plain parameters side by side
    result["params"] = sum(p.numel() for p in inner.parameters())
    gen = torch.Generator(device="cuda").manual_seed(args.seed)   # the same tokens on every rank
    data = torch.randint(0, cfg.vocab_size, (2, args.B, args.T + 1), device="cuda", generator=gen)
    pos = torch.arange(args.T, device="cuda").unsqueeze(0).expand(args.B, args.T).contiguous()
    times, losses = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step in range(args.warmup + args.steps):
        d = data[step % 2]
        x, y, p = d[:, :-1].contiguous(), d[:, 1:].contiguous(), pos.clone()
        start.record()
        opt.zero_grad(set_to_none=True)
        if ctx:   # the buffers are sharded in place along the sequence while the context is open
            cp_fn, mesh = ctx
            with cp_fn(mesh, buffers=[x, y, p], buffer_seq_dims=[1, 1, 1]):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x, y, p)
                loss.backward()
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y, p)
            loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        if step >= args.warmup:
            times.append(start.elapsed_time(end))
        losses.append(float(loss.detach().float().mean()))
    med = statistics.median(times)
    result.update(median_ms=round(med, 3), tokens_per_s=round(args.B * args.T / (med / 1000.0), 1),
                  loss_first=round(losses[0], 5), loss_last=round(losses[-1], 5))


def main():
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.mode != "single" and world < 2:
        sys.exit("--mode tp/cp: start with torchrun --nproc_per_node 2")
    if world > 1:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group("nccl")
    # GPT.forward(idx, targets, pos) for DDP: the model's own forward takes no positions
    g.GPT.forward = lambda self, idx, targets, pos: forward_loss(self, idx, targets, pos)
    result = {"impl": "pytorch", "mode": args.mode, "rotate": args.rotate if args.mode == "cp" else None, "B": args.B, "T": args.T,
              "world": world, "precision": "bf16", "steps": args.steps, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "oom": False}
    torch.cuda.reset_peak_memory_stats()
    try:
        run(args, world, result)
    except Exception as e:  # noqa: BLE001 -- reported, so that the benchmark script goes on
        msg = str(e)
        result["oom"] = isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in msg.lower()
        result["error"] = (msg.splitlines()[0] if msg else type(e).__name__)[:200]
    mib = 1024 * 1024
    result["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / mib, 1)
    line = json.dumps(result)
    if int(os.environ.get("RANK", "0")) == 0:
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(line + "\n")
        print(line)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
