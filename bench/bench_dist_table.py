"""bench_dist_table.py OUT [N] - the table of bench/bench_dist.sh (make bench-dist) from its folder OUT.

train_gpt2's runs: OUT/bt_<prec>_1_r<round>, OUT/bt_<prec>_<N>_<mode>_r<round> and OUT/sweep_<MB>, each
a log.jsonl: the median tokens/s after the first 3 steps (then the median over rounds), the most
reserved MiB, the median step ms. PyTorch DDP's: OUT/torch.jsonl (bench/bench_gpt2_torch.py, "world"
1 or N). Scaling is the N-GPU rate over the 1-GPU rate. The hidden share of the communication:
1 - (N-GPU step ms - 1-GPU step ms) / (NCCL's fp32 all-reduce of the whole gradient alone,
OUT/allreduce.jsonl from bench/bench_dist_allreduce.py): what the backward pass hides, as the step
pays for it (the exposed time and the slowdown of the compute beside the collectives)."""
import glob
import json
import os
import statistics
import sys


def run(path):
    """(tokens/s, peak reserved MiB, step ms) of one log.jsonl, or None"""
    p = os.path.join(path, "log.jsonl")
    if not os.path.exists(p):
        return None
    s = [json.loads(line) for line in open(p) if line.strip()]
    if len(s) < 4:
        return None
    return (statistics.median(x["tok_per_s"] for x in s[3:]), max(x["peak_reserved_mib"] for x in s),
            statistics.median(x["ms"] for x in s[3:]))


def rounds(out, name):
    """the median over the rounds OUT/<name>_r*"""
    rs = [r for r in (run(d) for d in sorted(glob.glob(os.path.join(out, name + "_r*")))) if r]
    if not rs:
        return None
    return tuple(statistics.median(r[i] for r in rs) for i in (0, 1, 2)) + (len(rs),)


def jsonl(path):
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def main(out, n):
    torch_rows = jsonl(os.path.join(out, "torch.jsonl"))
    ar = jsonl(os.path.join(out, "allreduce.jsonl"))
    print("| precision | run | GPUs | tokens/s | scaling | peak reserved MiB/GPU |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for prec in ("bf16", "tf32", "fp32"):
        one = rounds(out, f"bt_{prec}_1")
        if one:
            print(f"| {prec} | train_gpt2 ({one[3]} round(s)) | 1 | {one[0]:,.0f} | 1.00x | {one[1]:,.0f} |")
        for m in ("ddp", "zero1", "zero2"):
            two = rounds(out, f"bt_{prec}_{n}_{m}")
            if two and one:
                print(f"| {prec} | train_gpt2 --dp {m} ({two[3]} round(s)) | {n} | {two[0]:,.0f} | {two[0] / one[0]:.3f}x | {two[1]:,.0f} |")
        for comp in (False, True):
            t = {w: [r for r in torch_rows if r["precision"] == prec and bool(r.get("compile")) == comp
                     and r.get("world", 1) == w and not r.get("oom")] for w in (1, n)}
            name = "PyTorch DDP " + ("torch.compile" if comp else "eager")
            if t[1]:
                print(f"| {prec} | {name} | 1 | {t[1][-1]['tokens_per_s']:,.0f} | 1.00x | {t[1][-1]['peak_reserved_mib']:,.0f} |")
            if t[1] and t[n]:
                print(f"| {prec} | {name} | {n} | {t[n][-1]['tokens_per_s']:,.0f} | "
                      f"{t[n][-1]['tokens_per_s'] / t[1][-1]['tokens_per_s']:.3f}x | {t[n][-1]['peak_reserved_mib']:,.0f} |")
        two = rounds(out, f"bt_{prec}_{n}_ddp")
        if one and two and ar:
            total = ar[-1]["allreduce_fp32_ms"]
            exposed = max(0.0, two[2] - one[2])
            print(f"| {prec} | hidden share of the all-reduce: step 1 GPU {one[2]:.2f} ms, {n} GPUs {two[2]:.2f} ms, "
                  f"fp32 all-reduce alone {total:.2f} ms | | {max(0.0, 1 - exposed / total) * 100:.0f}% hidden | | |")
    sweep = []
    for d in glob.glob(os.path.join(out, "sweep_*")):
        r = run(d) if os.path.isdir(d) else None
        if r:
            sweep.append((int(d.rsplit("_", 1)[1]), r[0]))
    if sweep:
        print(f"\n| bucket MB | tokens/s (bf16 ddp, {n} GPUs) |\n| ---: | ---: |")
        for mb, tps in sorted(sweep):
            print(f"| {mb} | {tps:,.0f} |")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python3 bench/bench_dist_table.py OUT [N]   (the folder of bench/bench_dist.sh, its GPU count)")
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2)
