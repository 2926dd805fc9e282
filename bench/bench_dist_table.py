"""dist_summary.py OUT [N]: the table of bench/dist_gpu.sh bench. train_gpt2's runs (OUT/bt_<prec>_1,
OUT/bt_<prec>_N_<mode>, OUT/sweep_<mb>: log.jsonl, median tokens/s after 3 steps, peak reserved MiB)
next to PyTorch's (OUT/torch.jsonl), scaling from 1 to N GPUs (N: 2 unless given), the bucket sweep (and
OUT/bucket_sweep.png), and the hidden share of the gradient all-reduce: 1 - (N-GPU step - 1-GPU
step) / (NCCL all-reduce of the whole gradient, OUT/allreduce.jsonl)."""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
W = int(sys.argv[2]) if len(sys.argv) > 2 else 2   # ranks of the multi-GPU runs


def ours(d):
    p = os.path.join(out, d, "log.jsonl")
    if not os.path.exists(p):
        return None
    s = [json.loads(l) for l in open(p) if l.strip()]
    if len(s) < 4:
        return None
    return statistics.median(x["tok_per_s"] for x in s[3:]), max(x["peak_reserved_mib"] for x in s), statistics.median(x["ms"] for x in s[3:])


torch_rows = [json.loads(l) for l in open(os.path.join(out, "torch.jsonl"))] if os.path.exists(os.path.join(out, "torch.jsonl")) else []
ar = [json.loads(l) for l in open(os.path.join(out, "allreduce.jsonl"))] if os.path.exists(os.path.join(out, "allreduce.jsonl")) else []
print("| precision | run | GPUs | tokens/s | scaling | peak reserved MiB/GPU |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for prec in ("bf16", "fp32"):
    one = ours(f"bt_{prec}_1")
    if one:
        print(f"| {prec} | train_gpt2 | 1 | {one[0]:,.0f} | 1.00x | {one[1]:,.0f} |")
    for m in ("ddp", "zero1", "zero2"):
        two = ours(f"bt_{prec}_{W}_{m}")
        if two and one:
            print(f"| {prec} | train_gpt2 {m} | {W} | {two[0]:,.0f} | {two[0] / one[0]:.2f}x | {two[1]:,.0f} |")
    for comp in (False, True):
        t1 = [r for r in torch_rows if r["precision"] == prec and r["compile"] == comp and r.get("world", 1) == 1 and not r["oom"]]
        t2 = [r for r in torch_rows if r["precision"] == prec and r["compile"] == comp and r.get("world", 1) == W and not r["oom"]]
        name = "PyTorch DDP " + ("torch.compile" if comp else "eager")
        if t1:
            print(f"| {prec} | {name} | 1 | {t1[-1]['tokens_per_s']:,.0f} | 1.00x | {t1[-1]['peak_reserved_mib']:,.0f} |")
        if t1 and t2:
            print(f"| {prec} | {name} | {W} | {t2[-1]['tokens_per_s']:,.0f} | {t2[-1]['tokens_per_s'] / t1[-1]['tokens_per_s']:.2f}x | {t2[-1]['peak_reserved_mib']:,.0f} |")
    two = ours(f"bt_{prec}_{W}_ddp")
    if one and two and ar:
        total = ar[-1][f"allreduce_fp32_ms"]
        exposed = max(0.0, two[2] - one[2])
        print(f"| {prec} | hidden share of the all-reduce | | step 1 GPU {one[2]:.1f} ms, {W} GPUs {two[2]:.1f} ms; all-reduce alone {total:.1f} ms | "
              f"{max(0.0, 1 - exposed / total) * 100:.0f}% hidden | |")
sweep = []
for d in sorted(glob.glob(os.path.join(out, "sweep_*")), key=lambda x: int(x.rsplit("_", 1)[1])):
    r = ours(os.path.basename(d))
    if r:
        sweep.append((int(d.rsplit("_", 1)[1]), r[0]))
if sweep:
    print(f"\n| bucket MB | tokens/s (bf16, {W} GPUs) |\n| ---: | ---: |")
    for mb, tps in sweep:
        print(f"| {mb} | {tps:,.0f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.figure(figsize=(5, 3.2))
        plt.plot([s[0] for s in sweep], [s[1] for s in sweep], "o-")
        plt.xscale("log"); plt.xlabel("DDP bucket size (MB)"); plt.ylabel(f"tokens/s, {W} GPUs, bf16")
        plt.title("GPT-2 124M, B=16 x 1024 per GPU"); plt.grid(True, alpha=0.3); plt.tight_layout()
        plt.savefig(os.path.join(out, "bucket_sweep.png"), dpi=120)
    except ImportError:
        print("(no matplotlib: no plot)")
