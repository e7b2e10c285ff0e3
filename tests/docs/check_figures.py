#!/usr/bin/env python3
"""Fails when a comment in the code carries a measured figure: benchmark
results live in runtime/docs/benchmarks.md, and a comment points there.

A figure is a number with a unit (KiB, MiB, GiB, ms, µs, %, x, steps/s, /s)
on a comment line that also speaks of a measurement (measured, perf,
bench_*, faster, slower, per execution, steps/s). Limits, defaults and
timeouts name no measurement and pass.

Usage: check_figures.py SOURCE_DIR
"""
import pathlib
import re
import sys

FIGURE = re.compile(r"\d[\d,.]*\s?(KiB|MiB|GiB|ms|µs|%|x\b|steps/s|/s\b)")
MEASURE = re.compile(r"measured|\bperf\b|bench_\w+|faster|slower|per execution|steps/s")
POINTER = "runtime/docs/benchmarks.md"


def comment_of(path, line):
    if path.suffix in (".cpp", ".hpp"):
        i = line.find("//")
        return line[i:] if i >= 0 else ""
    if path.name == "CMakeLists.txt" or path.suffix == ".cmake":
        s = line.lstrip()
        return s if s.startswith("#") else ""
    return ""


def main():
    root = pathlib.Path(sys.argv[1])
    files = [p for d in ("persistence", "actors", "runtime") for p in (root / d).rglob("*")
             if p.suffix in (".cpp", ".hpp", ".cmake")]
    files += [root / "CMakeLists.txt", root / "tests/CMakeLists.txt"]
    problems = []
    for path in sorted(files):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            c = comment_of(path, line)
            if c and FIGURE.search(c) and MEASURE.search(c) and POINTER not in c:
                problems.append(f"{path.relative_to(root)}:{n}: a measured figure in a comment "
                                f"(move it to {POINTER}): {c.strip()}")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"no measured figure in the comments of {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
