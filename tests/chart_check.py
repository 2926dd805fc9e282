#!/usr/bin/env python3
"""chart_check.py - checks an SVG written by bt_chart.h (tests/test_chart.c runs it).

    python3 tests/chart_check.py CHART.svg [EXPECT ...]

The file must parse as XML (xml.etree), with an <svg> root. In every panel
(<g class="panel" data-panel=P>), every line (<g class="series" data-run=K data-kind=KIND>):
its points (the polylines' points in order) lie inside the panel's <rect class="plot">, their x
never decreases, and a validation line has one <circle class="mark"> at each point.
EXPECT, each one checked too:
    panels=P1,P2,...      the panels, in order
    P/K/KIND=N            line KIND of run K in panel P has exactly N points (0: no such line)
    P/K/KIND<=N           at most N points (a long log's min/max buckets)
    P/nonfinite/K=N       N red ticks of run K's non-finite steps in panel P
    strict                x increases strictly in every line (a short log: one point per step)
    text=S                some <text> element reads S exactly
Prints what failed, one line each, and exits 1; prints "ok" and exits 0 when all holds.
"""
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def points_of(poly):
    pts = []
    for pair in poly.get("points", "").split():
        x, y = pair.split(",")
        pts.append((float(x), float(y)))
    return pts


def main(argv):
    if len(argv) < 2:
        print("usage: chart_check.py CHART.svg [EXPECT ...]")
        return 2
    fails = []
    try:
        root = ET.parse(argv[1]).getroot()
    except (ET.ParseError, OSError) as e:
        print("FAIL: %s does not parse as XML: %s" % (argv[1], e))
        return 1
    if root.tag != NS + "svg":
        fails.append("the root is <%s>, not <svg>" % root.tag)
    expects = argv[2:]
    strict = "strict" in expects
    panels = [g for g in root.iter(NS + "g") if g.get("class") == "panel"]
    counts, nonfinite = {}, {}
    for panel in panels:
        pid = panel.get("data-panel")
        rect = [r for r in panel.iter(NS + "rect") if r.get("class") == "plot"]
        if len(rect) != 1:
            fails.append("%s: %d plot rectangles, expected 1" % (pid, len(rect)))
            continue
        x0, y0 = float(rect[0].get("x")), float(rect[0].get("y"))
        x1, y1 = x0 + float(rect[0].get("width")), y0 + float(rect[0].get("height"))
        for g in panel.iter(NS + "g"):
            if g.get("class") != "series":
                continue
            name = "%s/%s/%s" % (pid, g.get("data-run"), g.get("data-kind"))
            pts = []
            for poly in g.iter(NS + "polyline"):
                pts += points_of(poly)
            counts[name] = len(pts)
            out = [p for p in pts if not (x0 - 0.01 <= p[0] <= x1 + 0.01 and y0 - 0.01 <= p[1] <= y1 + 0.01)]
            if out:
                fails.append("%s: %d points outside the plot area %s, first %s" % (name, len(out), (x0, y0, x1, y1), out[0]))
            back = [i for i in range(1, len(pts)) if pts[i][0] < pts[i - 1][0] or (strict and pts[i][0] <= pts[i - 1][0])]
            if back:
                i = back[0]
                fails.append("%s: x not %s at point %d: %s after %s" % (name, "increasing" if strict else "monotone", i, pts[i], pts[i - 1]))
            if g.get("data-kind") == "val":
                marks = [(float(c.get("cx")), float(c.get("cy"))) for c in g.iter(NS + "circle") if c.get("class") == "mark"]
                if marks != pts:
                    fails.append("%s: %d marks for %d points (or not at them)" % (name, len(marks), len(pts)))
        for p in panel.iter(NS + "path"):
            if p.get("class") == "nonfinite":
                nonfinite["%s/nonfinite/%s" % (pid, p.get("data-run"))] = p.get("d", "").count("M")
    texts = ["".join(t.itertext()) for t in root.iter(NS + "text")]
    for e in expects:
        if e == "strict":
            continue
        m = re.fullmatch(r"panels=(.*)", e)
        if m:
            got = ",".join(p.get("data-panel") for p in panels)
            if got != m.group(1):
                fails.append("panels %s, expected %s" % (got, m.group(1)))
            continue
        m = re.fullmatch(r"text=(.*)", e)
        if m:
            if m.group(1) not in texts:
                fails.append("no text reads %r" % m.group(1))
            continue
        m = re.fullmatch(r"([\w/]+?)(<=|=)(\d+)", e)
        if not m:
            print("chart_check.py: bad expectation %r" % e)
            return 2
        key, op, n = m.group(1), m.group(2), int(m.group(3))
        got = (nonfinite if "/nonfinite/" in key else counts).get(key, 0)
        if (op == "=" and got != n) or (op == "<=" and got > n):
            fails.append("%s: %d points, expected %s %d" % (key, got, "exactly" if op == "=" else "at most", n))
    for f in fails:
        print("FAIL: " + f)
    if not fails:
        print("ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
