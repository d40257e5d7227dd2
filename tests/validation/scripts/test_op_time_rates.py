#!/usr/bin/env python3
"""tools/op_time_rates.py on a recorded H200 report, figures worked by hand.

  test_op_time_rates.py REPO_ROOT

data/measurements/h200-sxm-141gb/fp8/llama-3.2-1b_s2048_b4_none_bf16-mixed.json (llama-3.2-1b:
32 heads x 64 = 2048 wide, seq 2048, mbs 4, tp 1; the H200's dense bf16 peak 989.4 TFLOP/s):
 - a causal flash forward: 0.5 x 4 x 4 x 2048^2 x 2048 = 6.872e10 FLOP; 16 calls in 3.122 ms:
   3.522e14 FLOP/s, 0.36 of the peak;
 - its backward, 2.5 times that: 16 calls in 10.452 ms: 2.630e14 FLOP/s, 0.27;
 - the GEMM ops: 6.0739e13 FLOP in 78.687 ms: 7.719e14 FLOP/s, 0.78.
A folder with no report with op times prints no row and exits 0; a missing path exits 2.
"""
import os
import subprocess
import sys
import tempfile


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def main():
    root = sys.argv[1]
    tool = os.path.join(root, "tools", "op_time_rates.py")
    report = os.path.join(root, "data", "measurements", "h200-sxm-141gb", "fp8",
                          "llama-3.2-1b_s2048_b4_none_bf16-mixed.json")
    r = subprocess.run([sys.executable, tool, report], capture_output=True, text=True)
    check(r.returncode == 0, "exit 0 on a recorded report: " + r.stderr)
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "llama-3.2-1b" in line]
    check(len(rows) == 1, "one row for the one report:\n" + r.stdout)
    check(rows[0].endswith("| 0.36 | 0.27 | 0.78 |"), "flash fwd 0.36, bwd 0.27, GEMMs 0.78: " + rows[0])
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, tool, tmp], capture_output=True, text=True)
        check(r.returncode == 0 and "0 report(s)" in r.stdout, "an empty folder: no rows, exit 0\n" + r.stdout)
        r = subprocess.run([sys.executable, tool, os.path.join(tmp, "absent.json")], capture_output=True, text=True)
        check(r.returncode == 2 and "no such file" in r.stderr, "a missing path: exit 2\n" + r.stderr)
    print("op_time_rates.py: ok")


if __name__ == "__main__":
    main()
