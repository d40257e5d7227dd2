#!/usr/bin/env python3
"""Fits the pytorch profile's host time per kernel on our PyTorch runs, with held-out errors.

What the term models (planner throughput.cpp, ThroughputOptions::hf_eager_kernels): PyTorch runs a
Hugging Face model's layer op by op, and the host dispatches each kernel (Python, the module calls,
autocast, autograd) before the GPU can run it. The planner counts one layer's launches, forward,
recomputed forward and backward (planner/src/eager_kernels.cpp), and a layer costs
max(0, kernels x per_kernel_s - the GPU's time for the layer): a small layer waits on the host.
Fitted: per_kernel_s, on the measured step times (train.py's median step, `measured.step_time_s`),
minimising the squared log ratio of measured to predicted step time over a grid of 0.01 us.

Every other figure comes from the planner as is: `preflight plan --framework pytorch --format json`
pins each run's plan and gives its step time, its host-dispatch share and, under
`throughput.host_dispatch`, the kernels per layer, the GPU's time per layer and the layer slots, so
the step time at any per_kernel_s is the planner's own (the same max per layer).

Held out: leave one model out (runs of the same model are look-alikes; every run is tp 1, pp 1),
each run's step time predicted with the constant fitted on the other models' runs, against its
measured step time. Errors are (measured - predicted) / predicted, as `validate --check` prints
them. Runs recorded twice (the same GPU and step time) count once; torch.compile runs are left out
(the eager kernels are not what compile runs). The host is the machine's own: these runs come from
the two hosts of our H100 and H200 sessions, and a slower or faster CPU moves the figure.

Usage: fit_host.py [--preflight build/cli/preflight] [--data data/measurements] [--check]
--check: exit 1 unless the fit on all runs equals the profile's committed constant (read off the
planner's JSON) to three significant digits (ctest validation.pytorch_host_term).
"""
import json
import math
import os
import subprocess
import sys

from recorded_runs import fit_arguments, pct, recorded_runs


def runs(data_dir):
    return recorded_runs(data_dir, lambda m: bool(m.get("step_time_s")),
                         lambda r: (r["gpu"]["name"], r["measured"]["step_time_s"]))


def planner(preflight, r):
    p = r["plan"]
    args = [preflight, "plan", "--framework", "pytorch", "--model", r["model"]["name"], "--gpu", r["gpu"]["name"],
            "--gpus", "1", "--seq", str(p["seq"]), "--mbs", str(p["mbs"]), "--grad-acc", str(p["grad_acc"]),
            "--gbs-tokens", str(p["seq"] * p["mbs"] * p["grad_acc"]), "--recompute", p["recompute"],
            "--precision", p["precision"], "--attention", p["attention"], "--format", "json"]
    cand = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["candidates"][0]
    got = cand["plan"]
    for k in ("seq", "mbs", "grad_acc", "recompute", "precision", "attention"):
        if got[k] != p[k]:
            sys.exit("fit_host.py: the planner pinned %s %s, the run has %s" % (k, got[k], p[k]))
    t = cand["throughput"]
    host = [b["seconds"] for b in t["breakdown"] if b["name"].startswith("host dispatch")][0]
    d = t["host_dispatch"]
    return {"base": t["step_time_s"] - host, "kernels": d["kernels_per_layer"], "device": d["layer_device_s"],
            "slots": d["layer_slots"], "committed": d["per_kernel_s"]}


def step_s(row, per_kernel_s):
    return row["base"] + row["slots"] * max(0.0, row["kernels"] * per_kernel_s - row["device"])


def fit(rows):
    best = None
    for i in range(0, 20001):  # 0 to 200 us, 0.01 us apart
        c = i * 1e-8
        loss = sum(math.log(r["measured"] / step_s(r, c)) ** 2 for r in rows)
        if best is None or loss < best[0]:
            best = (loss, c)
    return best[1]


def summary(errs):
    a = [abs(e) for e in errs]
    return "P50 %.1f %%, P95 %.1f %%, max %.1f %%" % (100 * pct(a, 0.5), 100 * pct(a, 0.95), 100 * max(a))


def main():
    a = fit_arguments(__doc__)
    rows = []
    for path, r in runs(a.data):
        row = planner(a.preflight, r)
        row.update({"file": os.path.relpath(path, a.data), "model": r["model"]["name"],
                    "measured": r["measured"]["step_time_s"]})
        rows.append(row)
    if not rows:
        sys.exit("fit_host.py: no PyTorch run with a step time under %s" % a.data)
    c_all = fit(rows)
    committed = rows[0]["committed"]
    models = sorted({r["model"] for r in rows})
    held = {}
    for m in models:
        c = fit([r for r in rows if r["model"] != m])
        for r in rows:
            if r["model"] == m:
                held[r["file"]] = (c, step_s(r, c))
    print("# host time per kernel, fitted on %d PyTorch runs (%d models): %.2f us (committed %.2f us)"
          % (len(rows), len(models), c_all * 1e6, committed * 1e6))
    print("run | kernels/layer | GPU/layer ms | measured s | none s | err | held-out us | held-out s | err")
    errs_none, errs_held, errs_in = [], [], []
    for r in rows:
        c, held_s = held[r["file"]]
        e0 = (r["measured"] - step_s(r, 0.0)) / step_s(r, 0.0)
        eh = (r["measured"] - held_s) / held_s
        errs_none.append(e0)
        errs_held.append(eh)
        errs_in.append((r["measured"] - step_s(r, c_all)) / step_s(r, c_all))
        print("%s | %d | %.3f | %.4f | %.4f | %+.1f %% | %.2f | %.4f | %+.1f %%"
              % (r["file"], r["kernels"], 1e3 * r["device"], r["measured"], step_s(r, 0.0), 100 * e0,
                 c * 1e6, held_s, 100 * eh))
    print("# step time |measured - predicted| / predicted over %d runs:" % len(rows))
    print("#   no host term:                 " + summary(errs_none))
    print("#   held out (leave one model out): " + summary(errs_held))
    print("#   in sample (the fit on all runs): " + summary(errs_in))
    if a.check and float("%.3g" % c_all) != float("%.3g" % committed):
        print("fit_host.py --check: the fit gives %.3g s, the pytorch profile carries %.3g s"
              % (c_all, committed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
