"""bench_gpt2_table.py OUT - the table of bench/bench_gpt2.sh (make bench-gpt2) from its folder OUT.

train_gpt2's runs are listed in OUT/runs.jsonl (binary, precision, recompute mode, round, its log.jsonl
and its output): tokens/s is the median over the steps after the first 3, peak memory the most
reserved in any step. PyTorch's are the JSON lines bench/bench_gpt2_torch.py appended to
OUT/torch.jsonl. The rows come in groups of one precision and one recompute mode, the ratios within
a group. With several rounds each figure is the median over the rounds (and each round's ratio to
eager is printed first); with several binaries each has a row, the first one the reference of the
"vs first binary" column. The model is named first: train_gpt2's line about it, PyTorch's count.
A run that failed (out of memory, a refused flag) shows "-"."""
import json
import math
import os
import statistics
import sys

NAN = float("nan")


def median(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else NAN


def num(x):
    return "-" if math.isnan(x) else f"{x:,.0f}"


def model_line(path):
    """train_gpt2's "model NAME ...: ..., N parameters on DEVICE" line in its output, or None"""
    try:
        return next((line.strip() for line in open(path) if line.startswith("model ")), None)
    except OSError:
        return None


def ratio(a, b, digits=2):
    return "" if math.isnan(a) or math.isnan(b) or not b else f"{a / b:.{digits}f}x"


def bt_run(path):
    """(median tokens/s after 3 steps, peak reserved MiB) of one train_gpt2 log.jsonl"""
    try:
        steps = [json.loads(line) for line in open(path) if line.strip()]
    except OSError:
        return NAN, NAN
    if not steps:
        return NAN, NAN
    tps = median([s["tok_per_s"] for s in steps[3:]]) if len(steps) > 3 else NAN
    return tps, max(s["peak_reserved_mib"] for s in steps)


def main(out):
    runs = {}   # (prec, recompute) -> {label: [(tps, mib) per round]}
    bins = []
    ours = [json.loads(line) for line in open(os.path.join(out, "runs.jsonl"))]
    for r in ours:
        label = f"train_gpt2 {r['bin']}" if r["i"] == 1 else f"train_gpt2 #{r['i']} {r['bin']}"
        if label not in bins:
            bins.append(label)
        runs.setdefault((r["prec"], r.get("recompute", "none")), {}).setdefault(label, []).append(bt_run(r["log"]))
    tpath = os.path.join(out, "torch.jsonl")
    theirs = [json.loads(line) for line in open(tpath)] if os.path.exists(tpath) else []
    for r in theirs:
        key = "torch.compile" if r.get("compile") else "PyTorch eager"
        val = (NAN, NAN) if r.get("oom") else (r["tokens_per_s"], r["peak_reserved_mib"])
        runs.setdefault((r["precision"], r.get("recompute", "none")), {}).setdefault(key, []).append(val)
    for (prec, rc), rows in runs.items():   # auto (train_gpt2's own choice) against PyTorch without checkpointing
        if rc == "auto":
            for k, v in runs.get((prec, "none"), {}).items():
                if k in ("PyTorch eager", "torch.compile"):
                    rows.setdefault(k, v)
    line = next((m for m in (model_line(r["out"]) for r in ours if "out" in r) if m), None)
    if line:
        print(f"train_gpt2: {line}")
    r = next((r for r in theirs if "params" in r), None)
    if r:
        print(f"PyTorch: {r['config']} ({r.get('family', 'gpt2')}), {r['params']:,} parameters")
    for (prec, rc), rows in runs.items():
        first, eager = rows.get(bins[0], []), rows.get("PyTorch eager", [])
        if len(first) > 1 and eager:
            for i, (b, e) in enumerate(zip(first, eager)):
                print(f"{prec} recompute {rc} round {i + 1}: {bins[0]} {b[0]:.0f} tok/s, eager {e[0]:.0f} tok/s, ratio {b[0] / e[0]:.3f}")
    print("| precision | recompute | run | tokens/s | peak reserved MiB | vs eager | vs torch.compile | memory vs torch.compile | vs first binary |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (prec, rc), rows in runs.items():
        cell = {k: (median([x[0] for x in v]), max([x[1] for x in v], default=NAN)) for k, v in rows.items()}
        ea, co = cell.get("PyTorch eager", (NAN, NAN)), cell.get("torch.compile", (NAN, NAN))
        ref = cell.get(bins[0], (NAN, NAN))
        for k in [*bins, "PyTorch eager", "torch.compile"]:
            if k not in cell:
                continue
            t, m = cell[k]
            print(f"| {prec} | {rc} | {k} | {num(t)} | {num(m)} | {ratio(t, ea[0])} | {ratio(t, co[0])} | {ratio(m, co[1])} | {ratio(t, ref[0], 3)} |")
    # --precision fp8 against bf16, per binary and recompute mode (tokens/s, peak memory)
    for (prec, rc), rows in runs.items():
        base = runs.get(("bf16", rc), {})
        for k in bins if prec == "fp8" else []:
            if k in rows and k in base:
                t8, m8 = median([x[0] for x in rows[k]]), max([x[1] for x in rows[k]], default=NAN)
                tb, mb = median([x[0] for x in base[k]]), max([x[1] for x in base[k]], default=NAN)
                print(f"fp8 vs bf16, recompute {rc}, {k}: tokens/s {ratio(t8, tb, 3)}, peak memory {ratio(m8, mb, 3)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/bench_gpt2_table.py OUT   (the folder of bench/bench_gpt2.sh)")
    main(sys.argv[1])
