#!/usr/bin/env python3
"""How far each lower-precision loss curve lies from the fp32 curve of the same start.

  distance_from_fp32.py FP32_A.report FP32_B.report LABEL=RUN.json [LABEL=RUN.json ...]
                        [--windows 10,30,50,100] [--json OUT.json]

FP32_A and FP32_B are two fp32 runs of the same recipe, data, seed and initial weights that differ
only in their reduction order (`train.py --precision fp32 --split 1` and `--split 2`). Where the
two agree, the fp32 curve is known to that precision, and it is the yardstick every bf16 run is
judged by: a run's per-step distance |run - FP32_A|, in nats. Two correct bf16 implementations need
not agree with each other step by step (each rounds its own way), but neither should lie farther
from fp32 than the other does; the split band of compare_band.py, two runs of one implementation,
sees only a change of reduction order and is 0 at step 1, where any second implementation's bf16
forward already differs. Prints, per window of steps (the last step of each window in --windows;
default 10,30,50,100: the first steps, the rest of the plateau, leaving it, the fast fall, the
tail), the median |FP32_A - FP32_B| (how exactly fp32 is reproduced there) and each run's median
distance from FP32_A; with --json, the same figures. Exit 0, or 2 on bad input.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_band import losses, median, window_ends, windows_of  # noqa: E402  (this folder's helpers)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fp32_a")
    p.add_argument("fp32_b")
    p.add_argument("runs", nargs="+", help="LABEL=REPORT: a run of the same start, in another precision")
    p.add_argument("--windows", default="10,30,50,100",
                   help="last steps of the windows the medians are taken over (default 10,30,50,100)")
    p.add_argument("--json", help="write the medians here")
    a = p.parse_args(argv)
    try:
        ends = window_ends(a.windows)
        if not ends:
            raise ValueError
    except ValueError:
        print("distance_from_fp32.py: --windows takes positive step numbers separated by commas, got %r" % a.windows,
              file=sys.stderr)
        return 2
    runs = []
    try:
        ref, ref_b = losses(a.fp32_a), losses(a.fp32_b)
        for r in a.runs:
            label, sep, path = r.partition("=")
            if not sep or not label or not path:
                raise ValueError("%s: give LABEL=REPORT" % r)
            runs.append((label, losses(path)))
    except (OSError, ValueError, KeyError) as e:
        print("distance_from_fp32.py: %s" % e, file=sys.stderr)
        return 2
    n = min([len(ref), len(ref_b)] + [len(x) for _, x in runs])
    if n == 0:
        print("distance_from_fp32.py: no step is in every curve", file=sys.stderr)
        return 2
    print("# median per window of steps, in nats: fp32 pair = |FP32_A - FP32_B|; each run = |run - FP32_A|")
    print("# steps   fp32 pair" + "".join("   %s" % label for label, _ in runs))
    out = {"steps": n, "unit": "nats", "fp32_a": a.fp32_a, "fp32_b": a.fp32_b, "windows": []}
    for first, last in windows_of(ends, n):
        idx = range(first - 1, last)
        w = {"first_step": first, "last_step": last, "fp32_pair": median([abs(ref[i] - ref_b[i]) for i in idx]),
             "runs": {label: median([abs(x[i] - ref[i]) for i in idx]) for label, x in runs}}
        out["windows"].append(w)
        print("%-9s %11.6f" % ("%d-%d" % (first, last), w["fp32_pair"]) +
              "".join("   %*.6f" % (len(label), w["runs"][label]) for label, _ in runs))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
