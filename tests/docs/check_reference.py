#!/usr/bin/env python3
"""The reference pages cover the command line and the HTTP API.

Fails (exit 1, naming what is missing) unless
  - every command and subcommand that `canopy --help` lists (recursively,
    through commands that have subcommands of their own) has a heading
    `canopy CMD ...` in runtime/docs/reference/cli.md, and every long option
    (`--x`) of its `--help` appears in that heading's section outside code
    blocks (the options of `canopy --help` itself anywhere in the page
    outside code blocks);
  - every heading `canopy CMD ...` names a real command;
  - every operation (METHOD path) of runtime/server/openapi.json appears in
    runtime/docs/reference/http.md as `METHOD path`.

Usage: check_reference.py --canopy BIN --cli-doc cli.md --http-doc http.md
                          --openapi openapi.json
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# Sections of a CLI11 help text that list options or positionals rather than
# subcommands; every other "Name:" section lists subcommands (CLI11 names it
# "Subcommands:", or after the group a command is in).
NOT_COMMAND_SECTIONS = {"options", "positionals", "flags", "usage"}
LONG_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
SECTION = re.compile(r"^(\S[^:]*):\s*$")
COMMAND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def run_help(canopy, path, home):
    """The help text of `canopy PATH --help`."""
    cmd = [canopy, "--home", home] + path + ["--help"]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, universal_newlines=True, timeout=60)
    if p.returncode != 0:
        sys.exit("error: `%s` exited %d:\n%s%s"
                 % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def parse_help(text):
    """(long options, subcommand names) of one CLI11 help text.

    An entry is an indented line (a small indent: wrapped descriptions are
    indented to the description column) under a "Section:" line. In option
    sections its first field is the names, e.g. `-f,--follow` or
    `--stdout Excludes: --stderr`; in other sections the subcommand's name.
    """
    flags, commands = [], []
    section = None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = SECTION.match(line)
        if m:
            section = m.group(1).strip().lower()
            continue
        if section is None or not line[:1].isspace():
            continue
        indent = len(line) - len(line.lstrip())
        if indent >= 8:
            continue  # a wrapped description
        first = line.split()[0]
        if section in NOT_COMMAND_SECTIONS:
            if section == "positionals" or not first.startswith("-"):
                continue
            for name in first.split(","):
                m = LONG_FLAG.match(name)  # also `--name=VALUE`
                if m and m.group(0) != "--help":
                    flags.append(m.group(0))
        elif COMMAND_NAME.match(first):
            commands.append(first)
    return flags, commands


def walk(canopy, home):
    """[(path, flags)] for the root and every (sub)command, depth first."""
    out = []
    todo = [[]]
    while todo:
        path = todo.pop(0)
        flags, commands = parse_help(run_help(canopy, path, home))
        out.append((path, flags))
        todo.extend(path + [c] for c in commands)
    return out


def heading_sections(markdown):
    """{heading text without '#' and backticks: section text}, the text
    without its fenced code blocks (a synopsis does not document an option:
    the option must also be described in prose or a table)."""
    lines = markdown.splitlines()
    heads = []
    fence = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            heads.append((i, len(m.group(1)), m.group(2).replace("`", "").strip()))
    sections = {}
    for n, (i, level, text) in enumerate(heads):
        end = len(lines)
        for j, lvl, _ in heads[n + 1:]:
            if lvl <= level:
                end = j
                break
        body, in_code = [], False
        for line in lines[i:end]:
            if line.lstrip().startswith("```"):
                in_code = not in_code
            elif not in_code:
                body.append(line)
        sections[text] = "\n".join(body)
    return sections


def mentions(text, flag):
    return re.search(re.escape(flag) + r"(?![A-Za-z0-9_-])", text) is not None


def check_cli(canopy, doc_path):
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read()
    sections = heading_sections(doc)
    prose = re.sub(r"^\s*```.*?^\s*```[^\n]*$", "", doc, flags=re.M | re.S)
    missing = []
    with tempfile.TemporaryDirectory() as home:
        tree = walk(canopy, home)
    if len(tree) < 2:
        missing.append("no commands parsed from `canopy --help` (is its format still CLI11's?)")
    for path, flags in tree:
        if not path:
            for flag in flags:
                if not mentions(prose, flag):
                    missing.append("missing global option %s (of `canopy --help`)" % flag)
            continue
        name = "canopy " + " ".join(path)
        section = sections.get(name)
        if section is None:
            missing.append("missing command `%s`: no heading `%s`" % (name, name))
            continue
        for flag in flags:
            if not mentions(section, flag):
                missing.append("missing option %s of `%s` (not in its section outside code blocks)"
                               % (flag, name))
    known = {"canopy " + " ".join(p) for p, _ in tree if p}
    for head in sections:
        if head.startswith("canopy ") and head not in known and not head.startswith("canopy --"):
            missing.append("heading `%s` names no command of `canopy --help`" % head)
    return missing, len(tree) - 1, sum(len(f) for _, f in tree)


def check_http(openapi_path, doc_path):
    with open(openapi_path, encoding="utf-8") as f:
        api = json.load(f)
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read()
    missing = []
    count = 0
    for path, ops in api.get("paths", {}).items():
        for method in ops:
            if method not in HTTP_METHODS:
                continue
            count += 1
            op = "%s %s" % (method.upper(), path)
            if re.search(re.escape(op) + r"(?![A-Za-z0-9_/{}.-])", doc) is None:
                missing.append("missing operation `%s`" % op)
    return missing, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canopy", required=True)
    ap.add_argument("--cli-doc", required=True)
    ap.add_argument("--http-doc", required=True)
    ap.add_argument("--openapi", required=True)
    a = ap.parse_args()
    cli_missing, commands, flags = check_cli(a.canopy, a.cli_doc)
    http_missing, ops = check_http(a.openapi, a.http_doc)
    for m in cli_missing:
        print("%s: %s" % (a.cli_doc, m), file=sys.stderr)
    for m in http_missing:
        print("%s: %s" % (a.http_doc, m), file=sys.stderr)
    if cli_missing or http_missing:
        print("FAIL: %d gap(s) between the reference and the program"
              % (len(cli_missing) + len(http_missing)), file=sys.stderr)
        return 1
    print("ok: %d commands, %d long options, %d HTTP operations documented"
          % (commands, flags, ops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
