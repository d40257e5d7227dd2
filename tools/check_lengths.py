#!/usr/bin/env python3
"""Function and file lengths of the C++ sources (brace matching; comments and strings skipped).

Usage: tools/check_lengths.py [--max-function N] [--max-file N] [--top K] [--exclude PATH] DIR_OR_FILE...
Prints every function over --max-function lines and every file over --max-file lines,
then the K longest functions; exits 1 when something is over a limit.
"""
import argparse
import pathlib
import re
import sys

SOURCE = {".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh"}
HEAD = re.compile(r"([A-Za-z_~][\w:<>,~ *&\[\]=!+\-/%^|]*?)\s*\(")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "namespace", "struct", "class"}


def strip(text):
    """Blanks out comments, string and char literals, keeping line breaks."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, line count) of every function body at namespace or class level."""
    text = strip(path.read_text(errors="replace"))
    found, depth_kinds, i = [], [], 0
    for m in re.finditer(r"[{}]", text):
        pos = m.start()
        if m.group() == "{":
            before = text[max(0, pos - 400):pos]
            head = before[before.rfind(";") + 1:] if ";" in before else before
            head = head[head.rfind("}") + 1:]
            is_function = (not any(k == "function" for k, _, _ in depth_kinds) and ")" in head
                           and not re.search(r"\b(namespace|struct|class|enum|union)\b[^()]*$", head)
                           and not head.rstrip().endswith("="))
            name = ""
            if is_function:
                heads = [h for h in HEAD.findall(head) if h.split()[-1].split("::")[-1] not in NOT_FUNCTIONS]
                name = heads[0].split()[-1] if heads else "?"
                if not heads or re.match(r"^\s*(if|for|while|switch|catch)\b", head.strip()):
                    is_function = False
            depth_kinds.append(("function" if is_function else "block", text.count("\n", 0, pos) + 1, name))
        elif depth_kinds:
            kind, line, name = depth_kinds.pop()
            if kind == "function":
                found.append((name, line, text.count("\n", 0, pos) + 1 - line + 1))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-function", type=int, default=80)
    ap.add_argument("--max-file", type=int, default=600)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--exclude", action="append", default=[], help="path substring to leave out")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    paths = [pathlib.Path(d) for d in a.dirs]
    candidates = [p for d in paths for p in (d.rglob("*") if d.is_dir() else [d])]
    files = sorted(p for p in candidates if p.suffix in SOURCE and not any(x in str(p) for x in a.exclude))
    over, everything = 0, []
    for f in files:
        lines = f.read_text(errors="replace").count("\n")
        if lines > a.max_file:
            print(f"FILE {f}: {lines} lines (> {a.max_file})")
            over += 1
        for name, line, length in functions(f):
            everything.append((length, f"{f}:{line}", name))
            if length > a.max_function:
                print(f"FUNCTION {f}:{line} {name}: {length} lines (> {a.max_function})")
                over += 1
    print(f"\n{len(files)} files, {len(everything)} functions; longest:")
    for length, where, name in sorted(everything, reverse=True)[:a.top]:
        print(f"  {length:4d}  {name}  {where}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
