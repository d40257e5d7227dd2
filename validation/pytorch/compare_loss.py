#!/usr/bin/env python3
"""Same model, same data, same start: the Preflight runtime's loss curve against PyTorch's.

  compare_loss.py OURS.json PYTORCH.json [--rtol 0.03] [--atol 0.02] [--steps 50]

OURS.json is `preflight run --steps N --warmup 0 --save-init INIT --report OURS.json`; PYTORCH.json
is `train.py --init-from INIT --data preflight --steps N --warmup 0` for the same plan and seed.
Both report the mean next-token cross-entropy per optimizer step ("measured.loss"). The curves
agree when every step's |ours - pytorch| <= atol + rtol * |pytorch| (bf16 tolerance: bf16 keeps
8 significant bits, 2^-8 = 0.4 % per rounding; over 50 AdamW steps the two mixed-precision recipes
drift apart by a few per cent, hence the default 3 %). Prints the table; exit 0 agree, 1 not, 2 bad input.
"""
import argparse
import json
import sys


def losses(path):
    with open(path) as f:
        r = json.load(f)
    if r.get("status") != "ok":
        raise ValueError("%s: status %s: %s" % (path, r.get("status"), r.get("failure")))
    return [float(x) for x in r["measured"]["loss"]]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ours")
    p.add_argument("pytorch")
    p.add_argument("--rtol", type=float, default=0.03)
    p.add_argument("--atol", type=float, default=0.02)
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args(argv)
    try:
        ours, theirs = losses(a.ours), losses(a.pytorch)
    except (OSError, ValueError, KeyError) as e:
        print("compare_loss.py: %s" % e, file=sys.stderr)
        return 2
    n = min(len(ours), len(theirs), a.steps)
    if n < a.steps:
        print("compare_loss.py: only %d steps in common, %d wanted" % (n, a.steps), file=sys.stderr)
        return 2
    worst, bad = 0.0, 0
    print("step  preflight   pytorch    diff      rel")
    for i in range(n):
        d = ours[i] - theirs[i]
        rel = abs(d) / abs(theirs[i]) if theirs[i] else float("inf")
        ok = abs(d) <= a.atol + a.rtol * abs(theirs[i])
        bad += 0 if ok else 1
        worst = max(worst, rel)
        print("%4d  %9.5f  %9.5f  %+8.5f  %6.2f %%%s" % (i + 1, ours[i], theirs[i], d, 100 * rel, "" if ok else "  <-- out"))
    print("%d steps: worst relative difference %.2f %%, %d out of tolerance (atol %g + rtol %g)"
          % (n, 100 * worst, bad, a.atol, a.rtol))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
