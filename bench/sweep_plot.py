"""sweep_plot.py CSV PNG: the DDP bucket sweep as scaling over one GPU, one line per transport.

CSV columns: transport, bucket_mb, tokens_per_s (2 GPUs), one_gpu_tokens_per_s (the same call's
one-GPU figure), call (where the figures come from). Needs matplotlib (Debian's python3-matplotlib:
/usr/bin/python3 bench/sweep_plot.py bench/plots/bucket_sweep.csv bench/plots/bucket_sweep.png)."""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
plt.figure(figsize=(5.5, 3.4))
for t in dict.fromkeys(r["transport"] for r in rows):
    pts = sorted((float(r["bucket_mb"]), float(r["tokens_per_s"]) / float(r["one_gpu_tokens_per_s"])) for r in rows if r["transport"] == t)
    plt.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=t)
plt.axhline(1.95, color="gray", ls="--", lw=0.8, label="1.95x")
plt.xscale("log"); plt.xlabel("DDP bucket size (MB)"); plt.ylabel("2 GPUs / 1 GPU (tokens/s)")
plt.title("GPT-2 124M bf16, B=16 x 1024 per GPU, 2x H200", fontsize=9)
plt.legend(fontsize=8); plt.grid(True, alpha=0.3); plt.tight_layout()
plt.savefig(sys.argv[2], dpi=120)
