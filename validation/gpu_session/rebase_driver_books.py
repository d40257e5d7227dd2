#!/usr/bin/env python3
"""Puts the driver figures of run reports recorded before 2026-11-25 into one book.

Until then the runtime and train.py took the memory in use before their CUDA context from NVML
(nvmlDeviceGetMemoryInfo "used") and every later sample from cudaMemGetInfo (total - free).
The two count differently: NVML's "used" includes the driver's reserved memory R, which
cudaMemGetInfo leaves out of both its total and its used (R = NVML total - CUDA total:
503,316,480 B on the H100 SXM, 644,939,776 B on the H200, both driver 580.159.04). So every
figure measured against that baseline came out R too low, and the runtime's "context" was the
context minus R (45.7 MB on the H100 where the H200, measured in one book, shows 549.0 MB).

For each report given (files or folders, recursively) whose driver block still has that mix:
  runtime reports  R = driver.nvml_used_peak_bytes - driver.used_peak_bytes (both peaks are the
                   same samples, one book each; 0 in a report already in one book). R is added
                   to the context, to every driver figure above the baseline, to
                   device_used_peak_bytes, overhead_bytes and peak_bytes, and taken from the baseline.
  PyTorch reports  the baseline (NVML's used before the context, which is R and nothing else:
                   no process held memory) is added back to the driver figures and the baseline
                   set to 0, cudaMemGetInfo's used before a context.
Each rebased report records what was done under measured.driver.rebased. The command, the logs
and every other figure stay as recorded. Idempotent: a report with "rebased" is left alone.

  rebase_driver_books.py [--dry-run] PATH...      exit 0 ok, 2 bad input
"""
import argparse
import json
import os
import sys

NOTE = ("baseline from NVML used (includes the driver's reserved memory), samples from cudaMemGetInfo; "
        "rebased into cudaMemGetInfo's book by validation/gpu_session/rebase_driver_books.py")


def reports(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in sorted(files):
                    if f.endswith(".json"):
                        yield os.path.join(root, f)
        else:
            yield p


def add(d, key, delta):
    if isinstance(d.get(key), int):
        d[key] += delta


def rebase(r):
    """The reserve moved into the driver figures, or None when the report needs nothing."""
    m = r.get("measured")
    d = m.get("driver") if isinstance(m, dict) else None
    if not isinstance(d, dict) or "rebased" in d or d.get("baseline_source") != "nvml-before-context":
        return None
    if m.get("source") == "pytorch" or r.get("source") == "pytorch":
        reserve = d.get("baseline_bytes")
        if not isinstance(reserve, int) or reserve <= 0:
            return None
        for key in ("used_peak_bytes", "after_warmup_bytes"):
            add(d, key, reserve)
        add(m, "device_used_peak_bytes", reserve)
        d["baseline_bytes"] = 0
    else:
        nvml_peak, used_peak = d.get("nvml_used_peak_bytes"), d.get("used_peak_bytes")
        if not isinstance(nvml_peak, int) or not isinstance(used_peak, int) or nvml_peak - used_peak <= 0:
            return None
        reserve = nvml_peak - used_peak
        for key in ("context_bytes", "used_peak_bytes", "after_setup_bytes", "after_warmup_bytes", "at_peak_op_bytes"):
            add(d, key, reserve)
        add(d, "baseline_bytes", -reserve)
        for key in ("device_used_peak_bytes", "overhead_bytes", "peak_bytes"):
            add(m, key, reserve)
    d["rebased"] = {"reserved_bytes_added": reserve, "why": NOTE}
    return reserve


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+")
    p.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    a = p.parse_args(argv)
    changed = 0
    for path in reports(a.paths):
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            print("rebase_driver_books.py: %s: %s" % (path, e), file=sys.stderr)
            return 2
        if not isinstance(r, dict):
            continue
        reserve = rebase(r)
        if reserve is None:
            continue
        changed += 1
        print("%s: +%d B (%.1f MiB) %s" % (path, reserve, reserve / 2**20, "(dry run)" if a.dry_run else ""))
        if not a.dry_run:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(r, f, indent=2)
                f.write("\n")
            os.replace(tmp, path)
    print("rebase_driver_books.py: %d report(s) %s" % (changed, "would change" if a.dry_run else "rebased"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
