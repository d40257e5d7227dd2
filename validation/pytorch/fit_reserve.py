#!/usr/bin/env python3
"""Fits the pytorch profile's caching-allocator term on our PyTorch runs, with held-out errors.

What the term models (planner allocator_model.hpp, AllocatorConstants::gradient_fragmentation):
train.py frees every gradient after the optimizer step (zero_grad(set_to_none=True)), so the
pool PyTorch reserves (torch.cuda.max_memory_reserved) exceeds the tensors it allocated
(max_memory_allocated) by a share of the step's gradient bytes. Fitted: reserved - allocated, both
measured, against the step's gradient bytes the planner gives (`preflight memory --framework
pytorch --timeline`, the optimizer step's gradients), least squares through the origin.

Held out: leave one model out (runs of the same model are look-alikes; every run is tp 1, pp 1),
each run's reserved pool predicted as the planner's allocated peak (user inputs only) plus the
term fitted on the other models' runs, against its measured pool, and its device need (pool + the
GPU spec's overhead) against the driver's figure. Runs repeated in two folders (the same numbers)
count once; the torch.compile run is left out (compile is not modelled in memory). Every run so
far steps once per micro-batch (grad_acc 1): the term is untested with accumulation.

Usage: fit_reserve.py [--preflight build/cli/preflight] [--data data/measurements] [--check]
--check: exit 1 unless the fit on all runs equals the profile's committed constant (read off
`preflight memory --framework pytorch --format json`) to its four digits, so a change to the
gradient model or to the runs cannot leave the constant stale (ctest validation.pytorch_pool_term).
"""
import json
import os
import subprocess
import sys

from recorded_runs import fit_arguments, pct, recorded_runs

GIB = 2 ** 30


def runs(data_dir):
    return recorded_runs(data_dir, lambda m: "max_memory_reserved_bytes" in m,
                         lambda r: (r["measured"]["max_memory_allocated_bytes"], r["measured"]["max_memory_reserved_bytes"]))


def planner(preflight, path):
    out = subprocess.run([preflight, "memory", "--framework", "pytorch", "--plan", path, "--format", "json",
                          "--timeline"], check=True, capture_output=True, text=True).stdout
    mem = json.loads(out)["memory"]
    step = [e for e in mem["timeline"]["steady_state"] if e["kind"] == "optimizer step"][-1]
    return {"allocated": mem["peak_allocated_bytes"], "grads": step["bytes"]["gradients"],
            "outside": mem["non_pytorch_bytes"], "term": mem["reserved_extra"]["gradient_fragmentation_bytes"]}


def fit(rows):
    num = sum((r["reserved"] - r["allocated"]) * r["grads"] for r in rows)
    den = sum(r["grads"] ** 2 for r in rows)
    return max(0.0, num / den) if den > 0 else 0.0


def main():
    a = fit_arguments(__doc__)
    rows = []
    for path, r in runs(a.data):
        m = r["measured"]
        p = planner(a.preflight, path)
        rows.append({"file": os.path.relpath(path, a.data), "model": r["model"]["name"],
                     "allocated": m["max_memory_allocated_bytes"], "reserved": m["max_memory_reserved_bytes"],
                     "driver": m.get("device_used_peak_bytes"), **{"p_" + k: v for k, v in p.items()},
                     "grads": p["grads"]})
    if not rows:
        sys.exit("fit_reserve.py: no PyTorch runs with a reserved peak under " + a.data)
    k_all = fit(rows)
    print("# fit_reserve.py: %d runs, %d models; reserved - allocated (measured) per byte of the step's gradients"
          % (len(rows), len({r["model"] for r in rows})))
    print("# gradient_fragmentation, all runs: %.4f" % k_all)
    print("%-72s %-14s %9s %9s %9s %9s %8s %9s" % ("run", "model", "k(fold)", "pool", "pred.", "error", "driver",
                                                   "error"))
    print("%-72s %-14s %9s %9s %9s %9s %8s %9s" % ("", "", "", "[GiB]", "[GiB]", "[%]", "[GiB]", "[%]"))
    pool_err, need_err, bare_err = [], [], []
    for r in rows:
        bare_err.append(abs(r["p_allocated"] - r["reserved"]) / r["reserved"])
        k = fit([o for o in rows if o["model"] != r["model"]])
        pred_pool = r["p_allocated"] + k * r["grads"]
        e_pool = (pred_pool - r["reserved"]) / r["reserved"]
        pool_err.append(abs(e_pool))
        line = "%-72s %-14s %9.4f %9.2f %9.2f %+8.1f" % (r["file"][:72], r["model"], k, r["reserved"] / GIB,
                                                          pred_pool / GIB, 100 * e_pool)
        if r["driver"]:
            e_need = (pred_pool + r["p_outside"] - r["driver"]) / r["driver"]
            need_err.append(abs(e_need))
            line += " %8.2f %+8.1f" % (r["driver"] / GIB, 100 * e_need)
        print(line)
    print("# held out (leave one model out), (predicted - measured) / measured:")
    print("#   reserved pool: P50 %.1f %%, P95 %.1f %%, max %.1f %% (%d runs)"
          % (100 * pct(pool_err, 0.5), 100 * pct(pool_err, 0.95), 100 * max(pool_err), len(pool_err)))
    print("#   reserved pool without the term (the allocated peak alone): P50 %.1f %%, P95 %.1f %%, max %.1f %%"
          % (100 * pct(bare_err, 0.5), 100 * pct(bare_err, 0.95), 100 * max(bare_err)))
    if need_err:
        print("#   device need vs the driver's peak: P50 %.1f %%, P95 %.1f %%, max %.1f %% (%d runs)"
              % (100 * pct(need_err, 0.5), 100 * pct(need_err, 0.95), 100 * max(need_err), len(need_err)))
    if a.check:
        # The profile's constant, as its report shows it: the gradient term over the step's gradients.
        committed = round(rows[0]["p_term"] / rows[0]["grads"], 4)
        if abs(round(k_all, 4) - committed) > 1e-9:
            sys.exit("fit_reserve.py: the fit gives %.4f, the pytorch profile carries %.4f: refit it "
                     "(planner/src/profiles.cpp) and the figures that quote it" % (k_all, committed))
        print("# the pytorch profile's gradient_fragmentation %.4f is this fit" % committed)


if __name__ == "__main__":
    main()
