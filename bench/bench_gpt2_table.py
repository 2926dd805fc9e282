"""bench_gpt2_table.py OUT - the table of bench/bench_gpt2.sh (make bench-gpt2) from its folder OUT.

train_gpt2's runs are listed in OUT/runs.jsonl (binary, precision, round, its log.jsonl): tokens/s is
the median over the steps after the first 3, peak memory the most reserved in any step. PyTorch's
are the JSON lines bench/bench_gpt2_torch.py appended to OUT/torch.jsonl. With several rounds each
figure is the median over the rounds (and each round's ratio to eager is printed first); with
several binaries each has a row, the first one the reference of the "vs first binary" column."""
import json
import math
import os
import statistics
import sys

NAN = float("nan")


def median(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else NAN


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
    runs = {}   # prec -> {label: [(tps, mib) per round]}
    bins = []
    for line in open(os.path.join(out, "runs.jsonl")):
        r = json.loads(line)
        label = f"train_gpt2 {r['bin']}" if r["i"] == 1 else f"train_gpt2 #{r['i']} {r['bin']}"
        if label not in bins:
            bins.append(label)
        runs.setdefault(r["prec"], {}).setdefault(label, []).append(bt_run(r["log"]))
    tpath = os.path.join(out, "torch.jsonl")
    for line in (open(tpath) if os.path.exists(tpath) else []):
        r = json.loads(line)
        key = "torch.compile" if r.get("compile") else "PyTorch eager"
        val = (NAN, NAN) if r.get("oom") else (r["tokens_per_s"], r["peak_reserved_mib"])
        runs.setdefault(r["precision"], {}).setdefault(key, []).append(val)
    for prec, rows in runs.items():
        first, eager = rows.get(bins[0], []), rows.get("PyTorch eager", [])
        if len(first) > 1 and eager:
            for i, (b, e) in enumerate(zip(first, eager)):
                print(f"{prec} round {i + 1}: {bins[0]} {b[0]:.0f} tok/s, eager {e[0]:.0f} tok/s, ratio {b[0] / e[0]:.3f}")
    print("| precision | run | tokens/s | peak reserved MiB | vs eager | vs torch.compile | memory vs torch.compile | vs first binary |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for prec, rows in runs.items():
        cell = {k: (median([x[0] for x in v]), max([x[1] for x in v], default=NAN)) for k, v in rows.items()}
        ea, co = cell.get("PyTorch eager", (NAN, NAN)), cell.get("torch.compile", (NAN, NAN))
        ref = cell.get(bins[0], (NAN, NAN))
        for k in [*bins, "PyTorch eager", "torch.compile"]:
            if k not in cell:
                continue
            t, m = cell[k]
            print(f"| {prec} | {k} | {t:,.0f} | {m:,.0f} | {ratio(t, ea[0])} | {ratio(t, co[0])} | {ratio(m, co[1])} | {ratio(t, ref[0], 3)} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/bench_gpt2_table.py OUT   (the folder of bench/bench_gpt2.sh)")
    main(sys.argv[1])
