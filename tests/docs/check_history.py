#!/usr/bin/env python3
"""Fails when a file of the project speaks of its own development: work
sessions, stages or issue numbers, or a section of the old outside contract
(the contract is in runtime/docs/reference/). Cited upstream issues (a URL, `owner/repo#N`) and
iteration labels such as `review#1` are fine.

Usage: check_history.py SOURCE_DIR
"""
import pathlib
import re
import subprocess
import sys

PATTERNS = [
    (re.compile(r"\b[Ss]ession \d+"), "a work session"),
    (re.compile(r"\b[Ss]essions \d+"), "work sessions"),
    (re.compile(r"\b[Ss]ession-\d+"), "a work session"),
    (re.compile(r"\b[Ii]ssue #?\d+"), "an issue number"),
    (re.compile(r"\bSPEC \u00a7"), "a section of the old contract (use runtime/docs/reference/)"),
    (re.compile(r"\b[Ss]tage \d+\b"), "a stage of the work"),
]
SKIP_SUFFIXES = {".png", ".svg", ".ico", ".mdb", ".gz", ".bin", ".deb"}


def main():
    root = pathlib.Path(sys.argv[1])
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    me = pathlib.Path(__file__).resolve()
    problems = []
    for rel in files:
        path = root / rel
        if path.suffix in SKIP_SUFFIXES or rel.startswith("tests/fixtures/") \
                or path.resolve() == me or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for pattern, what in PATTERNS:
                m = pattern.search(line)
                if m:
                    problems.append(f"{rel}:{n}: {what}: '{m.group(0)}'")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} line(s) speak of the project's development")
        return 1
    print(f"{len(files)} files speak of the project only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
