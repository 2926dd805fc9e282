"""bench_tpcp_table.py OUT [T...] - the tables of bench/bench_tpcp.sh (make bench-tpcp) from its folder OUT.

train_gpt2's runs OUT/bt_<name>_<T>/log.jsonl (the first 2 steps are warm-up: matmul plans, NCCL):
global tokens/s and step ms (medians), rank 0's peak allocated MiB, and with tp the compute stream's
forward and backward ms of a step (fwd_ms, bwd_ms); a run without a log is OOM (its .log says so)
or failed. PyTorch's: OUT/torch_tpcp.jsonl (bench/bench_tpcp_torch.py). T...: the long contexts run."""
import json
import os
import statistics
import sys

NAN = float("nan")
# our run -> the PyTorch run set beside it (ring against torch's alltoall rotation, its ring-style pass-KV)
TORCH_TWIN = {"one": "single", "tp2": "tp2", "cp2allgather": "cp2allgather", "cp2alltoall": "cp2alltoall", "cp2ring": "cp2alltoall"}


def bt(out, name):
    p = os.path.join(out, f"bt_{name}", "log.jsonl")
    if not os.path.exists(p):
        log = os.path.join(out, f"bt_{name}.log")
        txt = open(log).read() if os.path.exists(log) else ""
        return {"status": "OOM" if "out of memory" in txt.lower() else "failed/not run"}
    rows = [json.loads(line) for line in open(p) if line.strip()]
    rows = rows[2:] or rows
    r = {"tok": statistics.median(x["tok_per_s"] for x in rows), "mib": max(x["peak_allocated_mib"] for x in rows),
         "ms": statistics.median(x["ms"] for x in rows)}
    if "fwd_ms" in rows[0]:
        r["fwd"] = statistics.median(x["fwd_ms"] for x in rows)
        r["bwd"] = statistics.median(x["bwd_ms"] for x in rows)
    return r


def main(out, longs):
    torch = {}
    tj = os.path.join(out, "torch_tpcp.jsonl")
    for line in (open(tj) if os.path.exists(tj) else []):
        j = json.loads(line)
        torch[("single" if j["mode"] == "single" else f"{j['mode']}2{j['rotate'] or ''}") + f"_{j['T']}"] = j
    print("| run | tokens/s | peak MiB (rank 0) | vs 1 GPU | PyTorch tokens/s (MiB) | ours / PyTorch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    sets = [(1024, ["one", "tp2", "tp2async", "tp2sp", "tp2spasync", "cp2ring", "cp2allgather", "cp2alltoall", "cp2zero1", "cp2zero2"])]
    sets += [(T, ["one", "cp2ring", "cp2allgather"]) for T in longs]
    for T, names in sets:
        base = bt(out, f"one_{T}")
        for n in names:
            r = bt(out, f"{n}_{T}")
            cells = [f"{r['tok']:,.0f}", f"{r['mib']:,.0f}"] if "tok" in r else [r["status"], ""]
            cells.append(f"{r['tok'] / base['tok']:.2f}x" if "tok" in r and "tok" in base else "")
            t = torch.get(f"{TORCH_TWIN[n]}_{T}") if n in TORCH_TWIN else None
            if t and t.get("tokens_per_s"):
                ratio = f"{r['tok'] / t['tokens_per_s']:.2f}x" if "tok" in r else ""
                cells += [f"{t['tokens_per_s']:,.0f} ({t['peak_allocated_mib']:,.0f})", ratio]
            elif t:
                cells += ["OOM" if t.get("oom") else "error: " + t.get("error", "")[:40], ""]
            else:
                cells += ["", ""]
            print(f"| {n} T {T} | " + " | ".join(cells) + " |")
    print("(PyTorch: tp2 = torch.distributed.tensor.parallel on the blocks; cp2* = context_parallel with that K/V"
          " rotation; the ring rows are set beside torch's alltoall rotation, its ring-style pass-KV)")
    print("\n| stage, T 1024, B 8 (medians) | tp2 sync | tp2 async | hidden | tp2 --sp sync | tp2 --sp async | hidden |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    a, b, c, d = (bt(out, n) for n in ("tp2_1024", "tp2async_1024", "tp2sp_1024", "tp2spasync_1024"))
    for st, label in (("fwd", "forward ms"), ("bwd", "backward ms"), ("ms", "step ms")):
        v = [x.get(st, NAN) for x in (a, b, c, d)]
        print(f"| {label} | {v[0]:.2f} | {v[1]:.2f} | {v[0] - v[1]:.2f} | {v[2]:.2f} | {v[3]:.2f} | {v[2] - v[3]:.2f} |")
    print("(hidden = sync - async: the collective time async TP overlaps with its matmuls; negative: the chunked"
          " GEMMs cost more than they hide)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python3 bench/bench_tpcp_table.py OUT [T...]   (the folder of bench/bench_tpcp.sh, its long contexts)")
    main(sys.argv[1], [int(t) for t in sys.argv[2:]])
