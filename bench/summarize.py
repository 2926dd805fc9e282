"""Reads one bench/gpu_session.sh bench output folder and prints the comparison table:
train_gpt2 (median tokens/s over the steps after the first 3, peak reserved memory from its log) next to
PyTorch eager and torch.compile (bench_gpt2_torch.py's JSON lines), as ratios."""
import json, os, statistics, sys

out = sys.argv[1]
rows = {}
for prec in ("fp32", "tf32", "bf16"):
    path = os.path.join(out, f"bt_{prec}", "log.jsonl")
    if not os.path.exists(path):
        continue
    steps = [json.loads(l) for l in open(path) if l.strip()]
    tps = statistics.median(s["tok_per_s"] for s in steps[3:]) if len(steps) > 3 else float("nan")
    peak = max(s["peak_reserved_mib"] for s in steps)
    rows[prec] = {"bt": (tps, peak)}
torch_path = os.path.join(out, "torch.jsonl")
if os.path.exists(torch_path):
    for l in open(torch_path):
        r = json.loads(l)
        key = "compile" if r.get("compile") else "eager"
        val = (float("nan"), float("nan")) if r.get("oom") else (r["tokens_per_s"], r["peak_reserved_mib"])
        rows.setdefault(r["precision"], {})[key] = val
print(f"{'precision':9} | {'BluTrain tok/s':>14} {'peak MiB':>9} | {'eager tok/s':>11} {'MiB':>7} | {'compile tok/s':>13} {'MiB':>7} | {'vs eager':>8} {'vs compile':>10}")
for prec, r in rows.items():
    bt = r.get("bt", (float("nan"),) * 2); ea = r.get("eager", (float("nan"),) * 2); co = r.get("compile", (float("nan"),) * 2)
    print(f"{prec:9} | {bt[0]:14.0f} {bt[1]:9.0f} | {ea[0]:11.0f} {ea[1]:7.0f} | {co[0]:13.0f} {co[1]:7.0f} | {bt[0] / ea[0]:8.2f} {bt[0] / co[0]:10.2f}")
