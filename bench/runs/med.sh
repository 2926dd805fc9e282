#!/usr/bin/env bash
# med: tokens/s, fwd+bwd ms and exposed ms (medians over the steps after the third) of train_gpt2 step lines on stdin; trace lines passed through
med() { python3 -c '
import sys, re, statistics as st
t, f, e = [], [], []
for line in sys.stdin:
    if line.startswith("ddp trace") or re.match(r"^  [ 0-9][0-9] ", line): print(line, end="")
    if not line.startswith("step"): continue
    m = re.search(r"([0-9]+) tok/s", line); t.append(float(m.group(1)) if m else float("nan"))
    m = re.search(r"fwd\+bwd ([0-9.]+) ms", line); f.append(float(m.group(1)) if m else float("nan"))
    m = re.search(r"comm ([0-9.]+) ms exposed", line); e.append(float(m.group(1)) if m else float("nan"))
    last = line
med = lambda v: st.median(v[3:]) if len(v) > 3 else float("nan")
print("  median of %d steps: %.0f tok/s, fwd+bwd %.2f ms, exposed %.2f ms" % (max(len(t) - 3, 0), med(t), med(f), med(e)))
'; }
