"""The recorded train.py runs the pytorch profile's fitted terms are fitted on (fit_reserve.py,
fit_host.py): each run report once, the torch.compile runs left out."""
import glob
import json
import os


def recorded_runs(data_dir, has, key):
    """(path, report) of each ok eager run under data_dir for which has(measured) holds; a run recorded
    in two folders (the same key(report)) counts once."""
    seen, out = set(), []
    for path in sorted(glob.glob(os.path.join(data_dir, "**", "*.pytorch.json"), recursive=True)):
        with open(path) as f:
            r = json.load(f)
        m = r.get("measured", {})
        if r.get("status") != "ok" or m.get("compiled") or not has(m):
            continue
        if key(r) in seen:
            continue
        seen.add(key(r))
        out.append((path, r))
    return out


def pct(xs, q):
    """The q-quantile of xs, the nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def fit_arguments(doc):
    """The fit scripts' command line: --preflight, --data and --check."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--preflight", default="build/cli/preflight")
    ap.add_argument("--data", default="data/measurements")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the fit equals the committed constant")
    return ap.parse_args()
