#!/usr/bin/env python3
"""resume_check.py - is a resumed train_gpt2 run bit for bit the uninterrupted one?

    python3 tests/resume_check.py --after N --log-a A/log.jsonl --log-b B/log.jsonl \
        [--ckpt-a A/ckpt_000000012.safetensors --ckpt-b B/ckpt_000000012.safetensors]

The steps after N in both logs must print the same train_loss, grad_norm, lr (and val_loss where
there is one) as exact strings; when the logs hold a step twice (a resumed run appends), the later
line counts. Each checkpoint pair must hold the same tensors (params, adamw.m, adamw.v, and
fp8.state with --precision fp8) with the same bytes, and the same train.step, adamw.step and
fp8.primed. Plain Python (reads the safetensors header
itself): no torch needed. The last line is "resume_check: OK ..." or "resume_check: FAIL ..."; the
exit code is 0 or 1.
"""
import argparse
import json
import struct
import sys

KEYS = ("train_loss", "grad_norm", "lr", "val_loss")


def steps_of(path, after):
    rows = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            if r["step"] > after:
                rows[r["step"]] = {k: r.get(k) for k in KEYS}
    return rows


def header(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    return f, json.loads(f.read(n)), 8 + n


def same_checkpoint(a, b):
    fa, ha, da = header(a)
    fb, hb, db = header(b)
    problems = []
    for key in ("train.step", "adamw.step", "fp8.primed"):
        va, vb = ha["__metadata__"].get(key), hb["__metadata__"].get(key)
        if va != vb:
            problems.append(f"{key} {va} vs {vb}")
    names = sorted((set(ha) | set(hb)) - {"__metadata__"})
    for name in names:
        ta, tb = ha.get(name), hb.get(name)
        if not ta or not tb or ta["shape"] != tb["shape"] or ta["dtype"] != tb["dtype"]:
            problems.append(f"{name}: missing or of another shape")
            continue
        (ba, ea), (bb, _) = ta["data_offsets"], tb["data_offsets"]
        fa.seek(da + ba)
        fb.seek(db + bb)
        left, at = ea - ba, 0
        while left:
            k = min(left, 64 << 20)
            xa, xb = fa.read(k), fb.read(k)
            if xa != xb:
                i = next(j for j in range(len(xa)) if xa[j] != xb[j])
                problems.append(f"{name}: differs from byte {at + i} (element {(at + i) // 4})")
                break
            left -= k
            at += k
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", type=int, required=True, help="the step resumed from")
    ap.add_argument("--log-a", required=True)
    ap.add_argument("--log-b", required=True)
    ap.add_argument("--ckpt-a", action="append", default=[])
    ap.add_argument("--ckpt-b", action="append", default=[])
    a = ap.parse_args()
    sa, sb = steps_of(a.log_a, a.after), steps_of(a.log_b, a.after)
    problems = []
    if not sa or sorted(sa) != sorted(sb):
        problems.append(f"steps {sorted(sa)} vs {sorted(sb)}")
    for s in sorted(set(sa) & set(sb)):
        if sa[s] != sb[s]:
            problems.append(f"step {s}: {sa[s]} vs {sb[s]}")
    for x, y in zip(a.ckpt_a, a.ckpt_b):
        problems += [f"{y}: {p}" for p in same_checkpoint(x, y)]
    for p in problems[:20]:
        print("  " + p)
    what = f"steps {a.after + 1}..{max(sa) if sa else '?'}, {len(a.ckpt_a)} checkpoint pair(s)"
    print(f"resume_check: {'FAIL' if problems else 'OK'} ({what}{': ' + str(len(problems)) + ' differences' if problems else ': bit for bit'})")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
