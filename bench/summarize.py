"""Reads one bench/gpu_session.sh bench output folder and prints the comparison table:
train_gpt2 (median tokens/s over the steps after the first 3, peak reserved memory from its log) next to
PyTorch eager and torch.compile (bench_gpt2_torch.py's JSON lines), as ratios. With several rounds
(bt_<prec>_r<N> folders and one eager line per round, in order) each round's ratio is printed too,
and the table uses the median over the rounds."""
import glob, json, math, os, re, statistics, sys

out = sys.argv[1]
nan = float("nan")


def bt_run(path):
    steps = [json.loads(l) for l in open(path) if l.strip()]
    tps = statistics.median(s["tok_per_s"] for s in steps[3:]) if len(steps) > 3 else nan
    return tps, max(s["peak_reserved_mib"] for s in steps)


def rnd(path):
    m = re.search(r"_r(\d+)$", os.path.dirname(path))
    return int(m.group(1)) if m else 0


runs = {}   # prec -> {"bt": [(tps, mib)], "eager": [...], "compile": [...]}
for prec in ("fp32", "tf32", "bf16"):
    paths = sorted(glob.glob(os.path.join(out, f"bt_{prec}*", "log.jsonl")), key=rnd)
    if paths:
        runs.setdefault(prec, {})["bt"] = [bt_run(p) for p in paths]
torch_path = os.path.join(out, "torch.jsonl")
if os.path.exists(torch_path):
    for l in open(torch_path):
        r = json.loads(l)
        key = "compile" if r.get("compile") else "eager"
        val = (nan, nan) if r.get("oom") else (r["tokens_per_s"], r["peak_reserved_mib"])
        runs.setdefault(r["precision"], {}).setdefault(key, []).append(val)


def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else nan


for prec, r in runs.items():
    bt, ea = r.get("bt", []), r.get("eager", [])
    if len(bt) > 1:
        for i, (b, e) in enumerate(zip(bt, ea)):
            print(f"{prec} round {i + 1}: BluTrain {b[0]:.0f} tok/s, eager {e[0]:.0f} tok/s, ratio {b[0] / e[0]:.3f}")
print(f"{'precision':9} | {'BluTrain tok/s':>14} {'peak MiB':>9} | {'eager tok/s':>11} {'MiB':>7} | {'compile tok/s':>13} {'MiB':>7} | {'vs eager':>8} {'vs compile':>10}")
for prec, r in runs.items():
    cols = {}
    for k in ("bt", "eager", "compile"):
        v = r.get(k, [])
        cols[k] = (med([x[0] for x in v]), max([x[1] for x in v], default=nan))
    bt, ea, co = cols["bt"], cols["eager"], cols["compile"]
    print(f"{prec:9} | {bt[0]:14.0f} {bt[1]:9.0f} | {ea[0]:11.0f} {ea[1]:7.0f} | {co[0]:13.0f} {co[1]:7.0f} | {bt[0] / ea[0]:8.2f} {bt[0] / co[0]:10.2f}")
