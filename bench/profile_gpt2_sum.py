"""profile_gpt2_sum.py - part of make profile-gpt2 (bench/profile_gpt2.sh): one training step's
kernels summed from an ncu --csv run (metrics gpu__time_duration.sum and launch__grid_size) of
train_gpt2 -x 3. The step is the launches after the second update's last AdamW kernel up to and
including the third's (steps 1 and 2 hold the autotuning and first-use work). Prints the total,
the top kernels by time, and for each GEMM kernel (cuBLASLt's nvjet / xmma / epilogue kernels) its
launches grouped by grid size with the non-GEMM kernel launched before each, which says where in
the model it runs, and each GEMM's place in its layer (pass, ordinal after the attention kernel,
the layer's parity) with the kernels that ran there.
Usage: python3 bench/profile_gpt2_sum.py ncu.csv"""
import collections
import csv
import sys

rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
launch = collections.OrderedDict()
for r in rows:
    k = int(r["ID"])
    d = launch.setdefault(k, {"name": r["Kernel Name"], "t": 0.0, "grid": 0})
    v = float(r["Metric Value"].replace(",", ""))
    if r["Metric Name"] == "gpu__time_duration.sum":
        unit = r.get("Metric Unit", "nsecond")
        d["t"] = v * {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    elif r["Metric Name"] == "launch__grid_size":
        d["grid"] = int(v)
ls = list(launch.values())


def short(n):
    return n.split("(")[0].split("<")[0][:70]


# an update is one AdamW launch, or one per gradient unit (--grads lazy) with at most one other
# launch between two of them: a step ends with its update's last AdamW launch
adam = [i for i, d in enumerate(ls) if "adamw" in d["name"]]
ends = [i for j, i in enumerate(adam) if j + 1 == len(adam) or adam[j + 1] - i > 2]
if len(ends) >= 3:
    step = ls[ends[1] + 1: ends[2] + 1]
else:
    print(f"only {len(ends)} AdamW updates: summing everything")
    step = ls
tot = collections.Counter()
cnt = collections.Counter()
for d in step:
    tot[short(d["name"])] += d["t"]
    cnt[short(d["name"])] += 1
s = sum(tot.values())
print(f"kernel time of one step: {s:.1f} ms over {len(step)} launches (ncu, kernels serialised)")
for k, v in tot.most_common(30):
    print(f"{v:9.2f} ms {100 * v / s:5.1f}% {cnt[k]:5d}x {v / cnt[k] * 1e3:9.1f} us  {k}")


def is_gemm(n):
    return any(w in n for w in ("nvjet", "gemm", "xmma", "cublas", "Bgrad", "splitKreduce", "epilogue"))


print("\nGEMM kernels by (name, grid): launches, mean us, the kernel before them")
groups = collections.OrderedDict()
prev = "start"
for d in step:
    n = short(d["name"])
    if is_gemm(d["name"]):
        g = groups.setdefault((n, d["grid"]), {"c": 0, "t": 0.0, "prev": collections.Counter()})
        g["c"] += 1
        g["t"] += d["t"]
        g["prev"][prev[:40]] += 1
    else:
        prev = n
for (n, grid), g in sorted(groups.items(), key=lambda kv: -kv[1]["t"]):
    p = ", ".join(f"{k} x{c}" for k, c in g["prev"].most_common(2))
    print(f"{g['t']:8.2f} ms {g['c']:4d}x {g['t'] / g['c'] * 1e3:8.1f} us grid {grid:6d} {n[:60]} | after {p}")


# Each GEMM's place in its layer: the attention kernels split the step into layers (the forward's
# bt__k_att_fwd*, the backward's bt__k_att_bwd*), so a GEMM is named by its pass, its ordinal
# after the last attention kernel (forward: the previous layer's projection, fc, MLP projection,
# then this layer's qkv; backward: in the order the backward runs them) and the layer's parity
# (odd and even layers differ where a plan's key does, e.g. a bias's alignment). The same place
# with two kernels, or two parities with different times, is a product that runs two ways.
places = collections.OrderedDict()
phase, ordinal, seen = None, 0, {"fwd": 0, "bwd": 0}
for d in step:
    n = short(d["name"])
    if n.startswith("void bt__k_att_fwd") or n.startswith("bt__k_att_fwd"):
        phase, ordinal = "fwd", 0
        seen["fwd"] += 1
    elif n.startswith("void bt__k_att_bwd") or n.startswith("bt__k_att_bwd"):
        phase, ordinal = "bwd", 0
        seen["bwd"] += 1
    elif is_gemm(d["name"]) and phase:
        g = places.setdefault((phase, ordinal, seen[phase] % 2, n), {"c": 0, "t": 0.0})
        g["c"] += 1
        g["t"] += d["t"]
        ordinal += 1
if places:
    print("\nGEMMs by place (pass, ordinal after the attention kernel, layer parity): launches, mean us, kernel")
    for (ph, o, par, n), g in sorted(places.items(), key=lambda kv: kv[0][:3]):
        print(f"  {ph} #{o} parity {par}: {g['c']:4d}x {g['t'] / g['c'] * 1e3:8.1f} us  {n[:70]}")
