#!/usr/bin/env python3
"""How far two correct runs drift apart, and whether ours stays inside that band.

  compare_band.py A.json B.json [--ours OURS.json --pytorch PYTORCH.json] [--json OUT.json]

A and B are two PyTorch runs of the same recipe, data, seed and initial weights that differ only
in the order of their reductions (`train.py --split 1` and `--split 2`: each micro-batch in one
piece or in two halves with the gradients summed). Their per-step difference |A - B|, in nats, is
what rounding alone does to a loss curve; its running maximum up to step i is the band at i.
With --ours / --pytorch (our runtime's curve and PyTorch's, same init and data: the `losscurve`
stage), each step's |ours - pytorch| is divided by the band: inside when the ratio is at most 1.
The band is absolute, not relative: on the learnable synthetic data the loss falls towards 0,
where a relative difference grows without bound (an H200 call on 2026-11-28 printed a relative
band of 1362 % at step 200); the relative figures are printed beside it. Prints the table, the median per-step difference over
each window of steps (--windows, default 1-50, 51-100 and 101 to the end: the early steps, the
fast fall, the tail) and a summary; exit 0 when ours is inside the band at >= 90 % of the steps (or no ours given), 1 when
not, 2 on bad input.
"""
import argparse
import json
import sys


def losses(path):
    with open(path) as f:
        r = json.load(f)
    if r.get("status") != "ok":
        raise ValueError("%s: status %s" % (path, r.get("status")))
    return [float(x) for x in r["measured"]["loss"]]


def relative(diff, base):
    return abs(diff) / abs(base) if base else float("inf")


def median(xs):
    s = sorted(xs)
    n = len(s)
    return None if n == 0 else (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2]))


def window_ends(text):
    """--windows "50,100" -> [50, 100]; ValueError unless every item is a positive step number."""
    ends = [int(x) for x in text.split(",") if x.strip()]
    if any(e < 1 for e in ends):
        raise ValueError(text)
    return ends


def windows_of(ends, n):
    """[(first, last)] 1-based and inclusive: 1..ends[0], ends[0]+1..ends[1], ..., up to n."""
    out, first = [], 1
    for e in sorted(set(ends)) + [n]:
        last = min(e, n)
        if last >= first:
            out.append((first, last))
        first = last + 1
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--ours")
    p.add_argument("--pytorch")
    p.add_argument("--json", help="write the per-step band (and ratios) here")
    p.add_argument("--windows", default="50,100",
                   help="last steps of the windows the medians are taken over (default 50,100: steps 1-50, "
                        "51-100 and 101 to the end)")
    a = p.parse_args(argv)
    try:
        ends = window_ends(a.windows)
    except ValueError:
        print("compare_band.py: --windows takes positive step numbers separated by commas, got %r" % a.windows,
              file=sys.stderr)
        return 2
    if bool(a.ours) != bool(a.pytorch):
        print("compare_band.py: --ours and --pytorch go together", file=sys.stderr)
        return 2
    try:
        A, B = losses(a.a), losses(a.b)
        ours, pt = (losses(a.ours), losses(a.pytorch)) if a.ours else (None, None)
    except (OSError, ValueError, KeyError) as e:
        print("compare_band.py: %s" % e, file=sys.stderr)
        return 2
    n = min(len(A), len(B), len(ours) if ours else len(A), len(pt) if pt else len(A))
    band, running, ratios = [], 0.0, []
    print("# step: 1-based; band: running max of |A - B|; rel: the same step's difference over A's loss")
    print("step   band [nats]   rel [%]" + ("   ours vs pytorch [nats]   rel [%]   ratio" if ours else ""))
    for i in range(n):
        running = max(running, abs(A[i] - B[i]))
        band.append(running)
        line = "%4d   %11.6f   %7.3f" % (i + 1, running, 100 * relative(A[i] - B[i], A[i]))
        if ours:
            d = abs(ours[i] - pt[i])
            r = d / running if running > 0 else (0.0 if d == 0 else float("inf"))
            ratios.append(r)
            line += "   %22.6f   %7.3f   %5.2f%s" % (d, 100 * relative(d, pt[i]), r, "" if r <= 1 else "  <-- outside")
        print(line)
    inside = sum(1 for r in ratios if r <= 1)
    summary = {"steps": n, "band_unit": "nats", "band_final": band[-1] if band else None, "band": band,
               "windows": []}
    for first, last in windows_of(ends, n):
        w = {"first_step": first, "last_step": last,
             "median_a_vs_b_nats": median([abs(A[i] - B[i]) for i in range(first - 1, last)])}
        line = "# steps %d-%d: median |A - B| %.6f nats" % (first, last, w["median_a_vs_b_nats"])
        if ours:
            w["median_ours_vs_pytorch_nats"] = median([abs(ours[i] - pt[i]) for i in range(first - 1, last)])
            line += ", median |ours - pytorch| %.6f nats" % w["median_ours_vs_pytorch_nats"]
            if w["median_a_vs_b_nats"] > 0:
                line += " (%.2f x)" % (w["median_ours_vs_pytorch_nats"] / w["median_a_vs_b_nats"])
        summary["windows"].append(w)
        print(line)
    if ours:
        summary.update({"ratios": ratios, "inside_steps": inside, "inside_fraction": inside / n if n else 0.0})
        print("%d steps: band %.6f nats at the end; ours inside it at %d of %d steps" % (n, band[-1], inside, n))
    else:
        print("%d steps: band %.6f nats at the end" % (n, band[-1] if band else 0.0))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    return 0 if not ours or (n and inside >= 0.9 * n) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
