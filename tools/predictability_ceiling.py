#!/usr/bin/env python3
"""How much of Preflight's held-out error could any layout-based correction remove?

Reads the per-job CSV that `preflight validate --check DIR --report-dir OUT` writes
(OUT/external-<name>-jobs.csv): each job's layout, its measurements and the prediction
Preflight made while the job's fold was held out. It then trains flexible learners
(gradient boosting, random forest) to correct that prediction from the layout columns,
with the same folds Preflight's own cross-validation used (a job is corrected only by a
learner that saw none of its fold), and prints the held-out errors beside Preflight's.

If the best learner cannot reach a target either, the target asks for information the
layout does not carry (run-to-run or cluster-state effects), not for a better formula.

For the reserved peak it also asks the same of a range: gradient-boosted quantile regression
(Koenker & Bassett 1978's pinball loss) learns a lower and an upper quantile of the log of
measured / predicted from the layout columns and Preflight's own range, held out by fold, and
the table gives how many measured peaks fall inside and the median width, beside Preflight's
range (`predicted_reserved_low_bytes` .. `_high_bytes`).

Needs scikit-learn and numpy (Debian: apt-get install python3-sklearn). CI runs only
--columns-only (the CSV contract with the C++ writer, no packages needed): the analysis
itself is not a test, its figures are recorded in the data set's README.

Usage: tools/predictability_ceiling.py OUT/external-nanotron-h100-jobs.csv [--seed N] [--columns-only]
Exit codes: 0 printed; 2 bad input or a missing Python package.
"""
import argparse
import csv
import math
import sys

LAYOUT = ["hidden_size", "num_layers", "gpus", "dp", "tp", "pp", "mbs", "grad_acc"]  # gpus: nodes can be unstated


def load(path):
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = set(reader.fieldnames or [])
    except OSError as e:
        print(f"predictability_ceiling: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    need = set(LAYOUT) | {"zero_stage", "outcome", "memory_fold", "tokens_fold", "measured_reserved_bytes",
                          "predicted_reserved_bytes", "measured_tokens_per_s_per_gpu",
                          "predicted_tokens_per_s_per_gpu", "predicted_reserved_low_bytes",
                          "predicted_reserved_high_bytes"}
    missing = need - columns
    if missing:
        print(f"predictability_ceiling: {path}: not a jobs CSV from `preflight validate --check` "
              f"(missing columns: {', '.join(sorted(missing))})", file=sys.stderr)
        sys.exit(2)
    return rows


def features(row, predicted):
    # log2 of every count (their effects are multiplicative), the ZeRO stage, log of the prediction.
    return [math.log2(float(row[k])) for k in LAYOUT] + [float(row["zero_stage"]), math.log(predicted)]


def quantity(rows, measured_key, predicted_key, fold_key, keep):
    X, y, folds, pred, meas = [], [], [], [], []
    for r in rows:
        if not keep(r) or not r[measured_key] or not r[predicted_key]:
            continue
        p, m = float(r[predicted_key]), float(r[measured_key])
        if p <= 0 or m <= 0:
            continue
        X.append(features(r, p))
        y.append(math.log(m / p))  # the learner predicts the log correction to Preflight's prediction
        folds.append(int(r[fold_key]))
        pred.append(p)
        meas.append(m)
    return X, y, folds, pred, meas


def held_out_predictions(np, make, X, y, folds):
    """Each job's value from a learner (make()) fitted on the other folds; None with one fold."""
    X, y, folds = np.array(X), np.array(y), np.array(folds)
    out = np.zeros_like(y)
    for k in sorted(set(folds.tolist())):
        test = folds == k
        if test.all():
            return None  # one fold: nothing to train on
        out[test] = make().fit(X[~test], y[~test]).predict(X[test])
    return out


def held_out_errors(np, make, X, y, folds, pred, meas):
    corrected = held_out_predictions(np, make, X, y, folds)
    if corrected is None:
        return None
    q = np.array(pred) * np.exp(corrected)
    m = np.array(meas)
    return np.abs(q - m) / m


# The sweep reports its peaks in 0.1 GiB steps: a peak within half a step of an end counts as
# inside, as `validate --check` counts it (validation/src/external_memory.cpp).
ROUNDING_SLACK_BYTES = 0.05 * 2**30


def range_rows(rows):
    """The ok jobs with a measured peak, a prediction and Preflight's range."""
    keys = ("measured_reserved_bytes", "predicted_reserved_bytes", "predicted_reserved_low_bytes",
            "predicted_reserved_high_bytes")
    out = []
    for r in rows:
        if r["outcome"] != "ok" or not all(r.get(k) for k in keys):
            continue
        m, p, lo, hi = (float(r[k]) for k in keys)
        if min(m, p, lo, hi) > 0:
            out.append((r, m, p, lo, hi))
    return out


def coverage_and_width(np, meas, low, high):
    inside = (meas >= low - ROUNDING_SLACK_BYTES) & (meas <= high + ROUNDING_SLACK_BYTES)
    return 100 * inside.mean(), 100 * np.median((high - low) / meas)


def print_ranges(np, GradientBoostingRegressor, rows, seed):
    jobs = range_rows(rows)
    print()
    print("| range of the reserved peak, ok jobs | jobs | measured inside | median width (of the peak) |")
    print("|---|---|---|---|")
    if len(jobs) < 20:
        print(f"| (fewer than 20 jobs with a range: skipped) | {len(jobs)} | N/A | N/A |")
        return
    meas = np.array([j[1] for j in jobs])
    pred = np.array([j[2] for j in jobs])
    low = np.array([j[3] for j in jobs])
    high = np.array([j[4] for j in jobs])
    inside, width = coverage_and_width(np, meas, low, high)
    print(f"| Preflight (held out) | {len(jobs)} | {inside:.1f} % | {width:.1f} % |")
    # The layout, the prediction and where Preflight's range ends, relative to the prediction.
    X = np.array([features(r, p) + [math.log(lo / p), math.log(hi / p)] for r, _, p, lo, hi in jobs])
    y = np.log(meas / pred)
    folds = np.array([int(j[0]["memory_fold"]) for j in jobs])
    if len(set(folds.tolist())) < 2:
        print(f"| learned quantiles | {len(jobs)} | N/A (one fold) | N/A |")
        return
    for lower in (0.05, 0.025, 0.01):
        ends = [held_out_predictions(np, lambda: GradientBoostingRegressor(
            loss="quantile", alpha=alpha, n_estimators=300, max_depth=3, learning_rate=0.05,
            min_samples_leaf=10, subsample=0.8, random_state=seed), X, y, folds) for alpha in (lower, 1 - lower)]
        lo_q, hi_q = ends[0], np.maximum(ends[0], ends[1])
        inside, width = coverage_and_width(np, meas, pred * np.exp(lo_q), pred * np.exp(hi_q))
        print(f"| Preflight + gradient boosting, quantiles {lower:g}-{1 - lower:g} | {len(jobs)} | "
              f"{inside:.1f} % | {width:.1f} % |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobs_csv", help="external-<name>-jobs.csv written by `preflight validate --check`")
    ap.add_argument("--seed", type=int, default=0, help="random seed of the learners (default 0)")
    ap.add_argument("--columns-only", action="store_true",
                    help="only check that the CSV has every column this script reads (no numpy or scikit-learn "
                         "needed; the test suite runs this against the C++ writer)")
    a = ap.parse_args()
    if a.columns_only:
        rows = load(a.jobs_csv)
        print(f"{a.jobs_csv}: {len(rows)} jobs, every column present")
        return 0
    try:
        import numpy as np
        from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    except ImportError as e:
        print(f"predictability_ceiling: needs numpy and scikit-learn ({e}); on Debian: apt-get install "
              "python3-sklearn, then run it with /usr/bin/python3", file=sys.stderr)
        sys.exit(2)
    rows = load(a.jobs_csv)
    learners = {
        "gradient boosting, absolute loss": lambda: GradientBoostingRegressor(
            loss="absolute_error", n_estimators=300, max_depth=3, learning_rate=0.05, subsample=0.8,
            random_state=a.seed),
        "gradient boosting, Huber loss": lambda: GradientBoostingRegressor(
            loss="huber", n_estimators=300, max_depth=4, learning_rate=0.05, subsample=0.8, random_state=a.seed),
        "random forest": lambda: RandomForestRegressor(n_estimators=300, min_samples_leaf=3, random_state=a.seed),
    }
    quantities = [
        ("reserved peak, jobs that ran (outcome ok)", "measured_reserved_bytes", "predicted_reserved_bytes",
         "memory_fold", lambda r: r["outcome"] == "ok"),
        ("tokens/s per GPU", "measured_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "tokens_fold",
         lambda r: r["outcome"] == "ok"),
    ]
    print(f"# {a.jobs_csv}")
    print("# error = |predicted - measured| / measured, every job predicted by a fit that did not see its fold")
    print("| quantity | predictor | jobs | P50 | P95 |")
    print("|---|---|---|---|---|")
    for name, mk, pk, fk, keep in quantities:
        X, y, folds, pred, meas = quantity(rows, mk, pk, fk, keep)
        if len(y) < 20:
            print(f"| {name} | (fewer than 20 jobs with both figures: skipped) | {len(y)} | N/A | N/A |")
            continue
        base = np.abs(np.array(pred) - np.array(meas)) / np.array(meas)
        print(f"| {name} | Preflight (held out) | {len(y)} | {100 * np.percentile(base, 50):.1f} % | "
              f"{100 * np.percentile(base, 95):.1f} % |")
        for label, make in learners.items():
            e = held_out_errors(np, make, X, y, folds, pred, meas)
            if e is None:
                print(f"| {name} | Preflight + {label} | {len(y)} | N/A (one fold) | N/A |")
                continue
            print(f"| {name} | Preflight + {label} | {len(y)} | {100 * np.percentile(e, 50):.1f} % | "
                  f"{100 * np.percentile(e, 95):.1f} % |")
    print_ranges(np, GradientBoostingRegressor, rows, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
