#!/usr/bin/env python3
"""Loss curves of run reports as one SVG (no plotting library needed).

  plot_curves.py OUT.svg LABEL=REPORT.json [LABEL=REPORT.json ...] [--title TEXT]

Each report's measured.loss is drawn against the step, one polyline per report, with a legend.
A report that is missing or holds no loss (a run the session's budget skipped) is left out and
named under the legend, so the curves that did run are still plotted; with none at all, exit 2.
"""
import argparse
import json
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("curves", nargs="+")
    p.add_argument("--title", default="loss per step")
    a = p.parse_args(argv)
    series, missing = [], []
    for c in a.curves:
        if "=" not in c:
            print("plot_curves.py: %s: give LABEL=REPORT.json" % c, file=sys.stderr)
            return 2
        label, path = c.split("=", 1)
        try:
            with open(path) as f:
                losses = [float(x) for x in json.load(f)["measured"]["loss"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print("plot_curves.py: %s: left out (%s)" % (path, e), file=sys.stderr)
            missing.append(label)
            continue
        if not losses:
            print("plot_curves.py: %s: left out (no loss recorded)" % path, file=sys.stderr)
            missing.append(label)
            continue
        series.append((label, losses))
    if not series:
        print("plot_curves.py: no report with a loss curve", file=sys.stderr)
        return 2
    W, H, L, R, T, B = 720, 420, 60, 20, 40, 50
    steps = max(len(s) for _, s in series)
    lo = min(min(s) for _, s in series)
    hi = max(max(s) for _, s in series)
    hi = hi if hi > lo else lo + 1
    def x(i): return L + (W - L - R) * i / max(steps - 1, 1)
    def y(v): return T + (H - T - B) * (hi - v) / (hi - lo)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (L, a.title),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B),
           '<text x="%d" y="%d" text-anchor="middle">step</text>' % ((L + W - R) // 2, H - 12),
           '<text x="14" y="%d" text-anchor="middle" transform="rotate(-90 14 %d)">loss (nats)</text>'
           % ((T + H - B) // 2, (T + H - B) // 2)]
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>' % (L - 6, y(v) + 4, v))
    for k, (label, s) in enumerate(series):
        pts = " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v in enumerate(s))
        color = COLORS[k % len(COLORS)]
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, pts))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - R - 220, T + 16 * (k + 1), color, label))
    for k, label in enumerate(missing):
        out.append('<text x="%d" y="%d" fill="gray">not run: %s</text>' % (W - R - 220, T + 16 * (len(series) + k + 1), label))
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
