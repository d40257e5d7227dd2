#!/usr/bin/env python3
"""Every `preflight` example in the README prints what the README shows.

  test_readme_examples.py REPO_ROOT BINARY_DIR

Each fenced block that starts with `$ preflight ...` is run as written (through bash, from the
repository root, with BINARY_DIR first on PATH) and its standard output compared line by line
with the block. Search timings (" in 3.5 ms") and trailing blank lines are not compared. A
`preflight run` without --dry-run is the record of a GPU run (its log is the evidence) and is
not re-run. Exit 1 naming each block that differs, with the first lines of the difference.
"""
import difflib
import os
import re
import subprocess
import sys

TIMING = re.compile(r" in [0-9.]+ (ms|s|µs)")


def lines(text):
    out = [TIMING.sub(" in T", line) for line in text.splitlines()]
    while out and not out[-1].strip():
        out.pop()
    return out


def main():
    root, binary_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    blocks = re.findall(r"```\n\$ (preflight [^\n]*)\n(.*?)```", readme, re.S)
    env = dict(os.environ, PATH=binary_dir + os.pathsep + os.environ.get("PATH", ""))
    checked = differ = 0
    for command, shown in blocks:
        words = command.split()
        if words[1] == "run" and "--dry-run" not in words:
            continue
        checked += 1
        got = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=root, env=env, timeout=120)
        if lines(got.stdout) != lines(shown):
            differ += 1
            print("README example differs: $ " + command)
            for d in list(difflib.unified_diff(lines(shown), lines(got.stdout), "README", "now", lineterm="", n=0))[:12]:
                print("    " + d[:200])
    print("%d README examples run, %d differ" % (checked, differ))
    if checked == 0:
        print("no example found: the check compared nothing")
        return 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
