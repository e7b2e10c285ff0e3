#!/usr/bin/env python3
"""The README's quick start is what it says: the first code block under
"## Quick start" holds exactly two commands, the second is the command
.ci/run runs, and the first one's last part (running the example on a fresh
home) succeeds with the built binary.

Usage: check_quick_start.py SOURCE_DIR CANOPY
"""
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    root = pathlib.Path(sys.argv[1])
    canopy = sys.argv[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Quick start\n(.*?)^```\w*\n(.*?)^```", readme, re.S | re.M)
    if not m:
        fail("README.md has no code block under '## Quick start'")
    lines = [l for l in m.group(2).splitlines() if l.strip()]
    if len(lines) != 2:
        fail(f"the quick start's first code block holds {len(lines)} commands, not 2")
    ci = [l.strip() for l in (root / ".ci/run").read_text().splitlines()
          if l.strip() and not l.startswith("#") and not l.startswith("set ")
          and not l.startswith("cd ")]
    if ci != [lines[1].strip()]:
        fail(f".ci/run runs {ci!r}, the README's test command is {lines[1]!r}")
    demo = lines[0].split(" && ")[-1]
    argv = shlex.split(demo)
    if argv[0] != "./build/canopy":
        fail(f"the first command does not end in running ./build/canopy: {demo!r}")
    with tempfile.TemporaryDirectory() as home:
        argv = [canopy] + [home + "/home" if a == "./.canopy" else a for a in argv[1:]]
        r = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            fail(f"{demo} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    print("ok: the quick start's two commands; the demo ran: " + demo)


if __name__ == "__main__":
    main()
