#!/usr/bin/env python3
"""tp_stage_plot.py - where the tensor-parallel step's time goes, sync vs async TP (issue 13).

Reads train_gpt2 logs from stdin: a line "== LABEL" starts a run, its step lines follow
("... | 17.9 ms | 457000 tok/s ... | fwd 7.9 ms bwd 8.9 ms"). For each run: the median over the steps
after the first 3 of the step time, the forward and the backward (timed events on the compute
stream around them) and the rest (optimizer, gradient reductions, the host's loss read). Prints a
markdown table and, with matplotlib, saves stacked bars to the PNG named by the first argument.
Usage: ... | python3 bench/tp_stage_plot.py OUT.png
"""
import re
import statistics
import sys


def parse(lines):
    runs, cur = [], None
    for line in lines:
        if line.startswith("== "):
            cur = {"label": line[3:].strip(), "step": [], "fwd": [], "bwd": [], "tps": []}
            runs.append(cur)
            continue
        if cur is None or not line.startswith("step"):
            continue
        m = re.search(r"\| ([0-9.]+) ms \| ([0-9]+) tok/s", line)
        f = re.search(r"fwd ([0-9.]+) ms bwd ([0-9.]+) ms", line)
        if not m or not f:
            continue
        cur["step"].append(float(m.group(1)))
        cur["tps"].append(float(m.group(2)))
        cur["fwd"].append(float(f.group(1)))
        cur["bwd"].append(float(f.group(2)))
    return [r for r in runs if len(r["step"]) > 3]


def med(v):
    return statistics.median(v[3:])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tp_stages.png"
    runs = parse(sys.stdin)
    if not runs:
        print("tp_stage_plot: no runs with step lines on stdin")
        return 1
    print("| run | tok/s | step ms | forward ms | backward ms | rest ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for r in runs:
        step, fwd, bwd = med(r["step"]), med(r["fwd"]), med(r["bwd"])
        rows.append((r["label"], fwd, bwd, max(step - fwd - bwd, 0.0)))
        print(f"| {r['label']} | {med(r['tps']):,.0f} | {step:.2f} | {fwd:.2f} | {bwd:.2f} | {step - fwd - bwd:.2f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return 0
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.5))
    y = range(len(rows))
    left = [0.0] * len(rows)
    for k, (name, color) in enumerate((("forward", "#4C72B0"), ("backward", "#DD8452"), ("rest", "#8C8C8C"))):
        vals = [row[1 + k] for row in rows]
        ax.barh(list(y), vals, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(list(y))
    ax.set_yticklabels([row[0] for row in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (median)")
    ax.set_title("GPT-2 124M, tp=2, B=8 x 1024, bf16: where the step goes")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
