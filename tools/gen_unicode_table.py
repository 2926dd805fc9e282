#!/usr/bin/env python3
"""Generate the Unicode class table of bt_data.h's pre-tokenizer.

The GPT-2 pre-tokenizer needs three classes of code points:
  L  = \\p{L}: general categories Lu Ll Lt Lm Lo          (UnicodeData.txt)
  N  = \\p{N}: general categories Nd Nl No                 (UnicodeData.txt)
  S  = \\s:    the White_Space property                    (PropList.txt)
Everything else (unassigned code points included) is "other".

The output is a sorted list of maximal runs of consecutive code points of one class,
packed as {first, last << 8 | class}, searched by bisection at run time (ASCII has a
direct lookup table in bt_data.h). The table is written between the BEGIN/END markers
of bt_data.h (checked in, so building needs no Unicode data files).

Usage (Debian: apt-get install unicode-data):
  python3 tools/gen_unicode_table.py [--ucd /usr/share/unicode] [--update bt_data.h]
Without --update the table is printed on stdout.
"""
import argparse
import os
import re
import sys

CLASS_L, CLASS_N, CLASS_S = 1, 2, 3
CAT_CLASS = {"Lu": CLASS_L, "Ll": CLASS_L, "Lt": CLASS_L, "Lm": CLASS_L, "Lo": CLASS_L,
             "Nd": CLASS_N, "Nl": CLASS_N, "No": CLASS_N}
BEGIN = "/* BEGIN GENERATED UNICODE TABLE (tools/gen_unicode_table.py) */"
END = "/* END GENERATED UNICODE TABLE */"


def read_classes(ucd):
    cls = {}
    range_first = None
    with open(os.path.join(ucd, "UnicodeData.txt"), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            if len(fields) < 3:
                continue
            cp, name, cat = int(fields[0], 16), fields[1], fields[2]
            c = CAT_CLASS.get(cat)
            if name.endswith(", First>"):
                range_first = cp
                continue
            if name.endswith(", Last>"):
                lo, range_first = range_first, None
                if c:
                    for x in range(lo, cp + 1):
                        cls[x] = c
                continue
            if c:
                cls[cp] = c
    n_ws = 0
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            cps, prop = [s.strip() for s in line.split(";")]
            if prop != "White_Space":
                continue
            if ".." in cps:
                lo, hi = (int(s, 16) for s in cps.split(".."))
            else:
                lo = hi = int(cps, 16)
            for x in range(lo, hi + 1):
                assert x not in cls, "White_Space code point %04X is also a letter/number" % x
                cls[x] = CLASS_S
                n_ws += 1
    assert n_ws >= 25, "PropList.txt gave only %d White_Space code points" % n_ws
    return cls


def runs(cls):
    out = []
    for cp in sorted(cls):
        c = cls[cp]
        if out and out[-1][1] == cp - 1 and out[-1][2] == c:
            out[-1][1] = cp
        else:
            out.append([cp, cp, c])
    return out


def unicode_version(ucd):
    try:
        with open(os.path.join(ucd, "ReadMe.txt"), encoding="utf-8") as f:
            m = re.search(r"Version (\d+\.\d+\.\d+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        m = re.search(r"PropList-(\d+\.\d+\.\d+)", f.readline())
        return m.group(1) if m else "unknown"


def render(ucd):
    cls = read_classes(ucd)
    rs = runs(cls)
    ver = unicode_version(ucd)
    counts = {k: sum(1 for v in cls.values() if v == k) for k in (CLASS_L, CLASS_N, CLASS_S)}
    lines = [BEGIN,
             "/* Unicode %s: %d runs; %d letters (L), %d numbers (N), %d White_Space (S).\n"
             "   Each entry: {first code point, last code point << 8 | class}, class 1=L 2=N 3=S. */"
             % (ver, len(rs), counts[CLASS_L], counts[CLASS_N], counts[CLASS_S]),
             '#define BT__UNICODE_VERSION "%s"' % ver,
             "#define BT__UNICODE_NRUNS %d" % len(rs),
             "static const uint32_t bt__unicode_runs[BT__UNICODE_NRUNS][2] = {"]
    row = []
    for lo, hi, c in rs:
        row.append("{0x%X,0x%X}" % (lo, (hi << 8) | c))
        if len(row) == 6:
            lines.append("    " + ",".join(row) + ",")
            row = []
    if row:
        lines.append("    " + ",".join(row) + ",")
    lines.append("};")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ucd", default="/usr/share/unicode", help="folder with UnicodeData.txt and PropList.txt")
    ap.add_argument("--update", metavar="HEADER", help="replace the table between the markers of HEADER")
    a = ap.parse_args()
    table = render(a.ucd)
    if not a.update:
        sys.stdout.write(table)
        return
    with open(a.update, encoding="utf-8") as f:
        src = f.read()
    i, j = src.find(BEGIN), src.find(END)
    if i < 0 or j < i:
        sys.exit("%s: no %r ... %r markers" % (a.update, BEGIN, END))
    j += len(END) + 1  # and its newline
    new = src[:i] + table + src[j:]
    tmp = a.update + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, a.update)
    print("%s: table updated" % a.update)


if __name__ == "__main__":
    main()
