#!/usr/bin/env python3
"""Walk every recommendation `preflight plan` makes under --framework preflight-runtime.

For each request of a grid (GPU kind x GPU count x sequence length, optionally with one plan
setting pinned), asks `plan --emit preflight` for its recommendation, then walks the first and
the last rank of it with `run --plan FILE --dry-run --format json --emulate-rank R` and compares
the walked tracked peak with the runtime profile's prediction, to the byte.

Prints one line per walk and a summary; exits 1 when any walk differs or a recommended plan is
refused by `run` (the profile must never recommend what the runtime refuses), 0 otherwise.
A request for which nothing fits (or that the model refuses, e.g. a sequence beyond its
positions) is counted and listed, not failed.

Usage: tools/walk_recommendations.py PREFLIGHT MODEL [--grid base|long|pinned|smoke]
  base    H100, H200, B200, A100-80GB x 8..128 GPUs x seq 2048, 4096, 8192 at 2 Mi tokens a step
  long    the same GPUs and counts x seq 16384, 32768, 65536 at 4 Mi tokens
  pinned  H100 and B200 x 16 and 64 GPUs at seq 8192, 4 Mi tokens, each with one setting pinned
  smoke   one request: 8 H100s at seq 2048, 1 Mi tokens (the ctest tools.walk_recommendations)
"""
import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GPUS = ["h100-sxm-80gb", "h200-sxm-141gb", "b200", "a100-sxm-80gb"]
COUNTS = [8, 16, 32, 64, 128]
PINS = [["--pp", "4"], ["--pp", "4", "--pp-schedule", "interleaved"], ["--cp", "2"], ["--recompute", "full"],
        ["--recompute", "selective"], ["--tp", "8"], ["--attention", "eager", "--seq", "2048"]]
SHOWN = ("seq", "dp", "tp", "pp", "cp", "ep", "sp", "zero", "recompute", "precision", "mbs", "pp_schedule", "vpp",
         "attention")


def requests(grid):
    if grid == "base":
        for gpu, n, seq in itertools.product(GPUS, COUNTS, [2048, 4096, 8192]):
            yield gpu, n, ["--seq", str(seq), "--gbs-tokens", "2Mi"]
    elif grid == "smoke":
        yield "h100-sxm-80gb", 8, ["--seq", "2048", "--gbs-tokens", "1Mi"]
    elif grid == "long":
        for gpu, n, seq in itertools.product(GPUS, COUNTS, [16384, 32768, 65536]):
            yield gpu, n, ["--seq", str(seq), "--gbs-tokens", "4Mi"]
    else:
        for gpu, n, pin in itertools.product(["h100-sxm-80gb", "b200"], [16, 64], PINS):
            seq = [] if "--seq" in pin else ["--seq", "8192"]
            yield gpu, n, seq + ["--gbs-tokens", "4Mi"] + pin


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preflight", help="path to the preflight executable")
    ap.add_argument("model", help="catalog name or config.json path")
    ap.add_argument("--grid", choices=["base", "long", "pinned", "smoke"], default="base")
    a = ap.parse_args()
    counts = {"requests": 0, "no plan": 0, "refused": 0, "equal": 0, "differ": 0}
    with tempfile.TemporaryDirectory() as tmp:
        plan_file = Path(tmp) / "plan.json"
        for gpu, n, flags in requests(a.grid):
            counts["requests"] += 1
            what = f"{gpu} x {n} {' '.join(flags)}"
            p = subprocess.run([a.preflight, "plan", "--model", a.model, "--gpu", gpu, "--gpus", str(n),
                                "--framework", "preflight-runtime", "--emit", "preflight", *flags],
                               capture_output=True, text=True)
            if p.returncode != 0:
                counts["no plan"] += 1
                why = next((l for l in p.stderr.splitlines() if "error" in l or "no plan" in l.lower()), "")
                print(f"# {what}: no plan (exit {p.returncode}) {why[:120]}")
                continue
            plan_file.write_text(p.stdout)
            plan = json.loads(p.stdout)
            shown = " ".join(f"{k}={plan[k]}" for k in SHOWN)
            for rank in (0, n - 1):
                r = subprocess.run([a.preflight, "run", "--plan", str(plan_file), "--dry-run", "--format", "json",
                                    "--emulate-rank", str(rank)], capture_output=True, text=True)
                if r.returncode != 0:
                    counts["refused"] += 1
                    print(f"REFUSED {what} rank {rank}: {r.stderr.strip()[:200]}")
                    continue
                report = json.loads(r.stdout)
                walked = report["measured"]["tracked_peak_bytes"]
                predicted = report["predicted"]["tracked_peak_bytes"]
                same = walked == predicted
                counts["equal" if same else "differ"] += 1
                print(f"{'EQUAL' if same else 'DIFFER'} {what} rank {rank}: {shown}: walked {walked} B, "
                      f"predicted {predicted} B")
    print("# " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["differ"] or counts["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
