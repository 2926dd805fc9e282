"""kernel_ratio.py - part of make bench-kernels: joins bench_kernels.cu's table with
bench_kernels_torch.py's rows: one markdown table with our time, PyTorch eager and torch.compile
times, the ratios, and each one's % of the device-to-device copy (the bandwidth roofline of these
memory-bound kernels).

Usage: python3 bench/kernel_ratio.py OURS.txt TORCH.txt [--copy-gbs X]
  OURS.txt   the output of build/bench_kernels (its markdown rows "| kernel | shape | us | GB/s |
             ..." and its "ceilings: D2D copy X GB/s" line; a pasted RESULTS.md table works too)
  TORCH.txt  the output of bench/bench_kernels_torch.py (its "torchk" lines)
  --copy-gbs the ceiling to use; default: the one bench_kernels measured, else bench_kernels_torch's
A torch row is joined with our row of the same kernel name (ours may carry a note in brackets:
"adamw (+bf16 copy)" joins "adamw"). "torch / ours" is torch's time over ours: above 1 ours is
faster. % of copy = the row's least traffic (as each script counts it) / time / the copy ceiling.
Rows of ours with no torch twin are left out; torch rows with no twin of ours are listed with
ours empty. Exit status 1 with a message when a file cannot be read or holds no rows.
"""
import argparse
import re
import sys

OURS_ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*([0-9.]+)\s*\|\s*([0-9.]*)\s*\|\s*([0-9.]*%?)\s*\|\s*([0-9.]*)\s*\|\s*([0-9.]*%?)\s*\|\s*$")
OURS_CEIL = re.compile(r"ceilings: D2D copy ([0-9.]+) GB/s")


def read_text(path, what):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        sys.exit(f"kernel_ratio: cannot read {what} {path} ({e.strerror})")


def parse_ours(text):
    """{name: (shape, us, gbs or None)} from bench_kernels' markdown rows (the first of a name)"""
    rows, ceil = {}, None
    for line in text.splitlines():
        m = OURS_ROW.match(line.strip())
        if m:
            name, shape, us, gbs = m.group(1), m.group(2), float(m.group(3)), m.group(4)
            rows.setdefault(name, (shape, us, float(gbs) if gbs else None))
        c = OURS_CEIL.search(line)
        if c:
            ceil = float(c.group(1))
    return rows, ceil


def parse_torch(text):
    """[(name, shape, {mode: (us, bytes, note)})] in first-seen order, and the copy ceiling"""
    rows, order, ceil, skipped = {}, [], None, []
    for line in text.splitlines():
        f = line.rstrip("\n").split("\t")
        if f[0] == "torchk" and len(f) >= 6:
            key = (f[1], f[3])
            if key not in rows:
                rows[key] = {}
                order.append(key)
            rows[key][f[2]] = (float(f[4]), float(f[5]), f[6] if len(f) > 6 else "")
        elif f[0] == "torchk_ceiling" and len(f) >= 3:
            ceil = float(f[2])
        elif f[0] == "torchk_skip":
            skipped.append(" ".join(f[1:]))
    return [(k[0], k[1], rows[k]) for k in order], ceil, skipped


def twin(ours, name):
    """our row for a torch kernel name: the same name, or the same name followed by a note"""
    if name in ours:
        return ours[name]
    for k, v in ours.items():
        if k.startswith(name + " ("):
            return v
    return None


def fmt(x, spec):
    return "" if x is None else format(x, spec)


def table(ours, torch_rows, ceil):
    out = ["| kernel | shape (ours) | shape (torch) | ours us | eager us | compile us | eager / ours | compile / ours "
           "| ours % of copy | eager % of copy | compile % of copy | torch note |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, tshape, modes in torch_rows:
        o = twin(ours, name)
        o_shape, o_us, o_gbs = o if o else ("", None, None)
        cells = {}
        for mode in ("eager", "compile"):
            us, bytes_, _ = modes.get(mode, (None, None, ""))
            cells[mode] = (us, None if us is None else 100.0 * bytes_ / (us * 1e-6) / 1e9 / ceil,
                           None if us is None or o_us is None else us / o_us)
        o_pct = None if o_gbs is None else 100.0 * o_gbs / ceil
        note = "; ".join(sorted({m[2] for m in modes.values() if m[2]}))
        e, c = cells["eager"], cells["compile"]
        out.append(f"| {name} | {o_shape} | {tshape} | {fmt(o_us, '.1f')} | {fmt(e[0], '.1f')} | {fmt(c[0], '.1f')} | "
                   f"{fmt(e[2], '.2f')}{'x' if e[2] is not None else ''} | {fmt(c[2], '.2f')}{'x' if c[2] is not None else ''} | "
                   f"{fmt(o_pct, '.0f')}{'%' if o_pct is not None else ''} | {fmt(e[1], '.0f')}{'%' if e[1] is not None else ''} | "
                   f"{fmt(c[1], '.0f')}{'%' if c[1] is not None else ''} | {note} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ours", help="bench_kernels output")
    ap.add_argument("torch", help="bench_kernels_torch.py output")
    ap.add_argument("--copy-gbs", type=float, default=None, help="copy ceiling in GB/s (read + write)")
    a = ap.parse_args()
    ours, ours_ceil = parse_ours(read_text(a.ours, "bench_kernels output"))
    torch_rows, torch_ceil, skipped = parse_torch(read_text(a.torch, "bench_kernels_torch output"))
    if not ours:
        sys.exit(f"kernel_ratio: {a.ours} holds no bench_kernels table rows (| kernel | shape | us | GB/s | ... |)")
    if not torch_rows:
        sys.exit(f"kernel_ratio: {a.torch} holds no torchk rows (was it bench_kernels_torch.py's output on a GPU?)")
    ceil = a.copy_gbs or ours_ceil or torch_ceil
    if not ceil or ceil <= 0:
        sys.exit("kernel_ratio: no copy ceiling in either file; give --copy-gbs")
    src = "--copy-gbs" if a.copy_gbs else "bench_kernels" if ours_ceil else "bench_kernels_torch"
    print(f"copy ceiling {ceil:.0f} GB/s (read + write, from {src}); "
          f"ours measured {fmt(ours_ceil, '.0f') or '-'}, torch's run {fmt(torch_ceil, '.0f') or '-'}\n")
    print("\n".join(table(ours, torch_rows, ceil)))
    for s in skipped:
        print(f"\nskipped in the torch run: {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
