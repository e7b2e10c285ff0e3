#!/usr/bin/env python3
"""Every relative link and #anchor of the Markdown docs resolves.

For each Markdown file given (directories are searched for *.md), every
inline link or image `[text](target)` and every reference definition
`[id]: target` outside code must point at an existing file or folder,
relative to the file that holds it; a `#anchor` (alone, or after a path to a
.md file) must be the anchor of a heading of the target, by GitHub's rules:
the heading's text, lower-cased, with punctuation dropped (letters, digits,
`_`, `-` and spaces kept) and spaces made `-`; a repeated heading gets `-1`,
`-2`, ... An explicit `<a name="x">` or `<a id="x">` is an anchor too. Links
with a scheme (`http:`, `https:`, `mailto:`, ...) are skipped.

Usage: check_links.py [--root DIR] PATH...
Exit 1 with one line per broken link (FILE:LINE: ...), else 0.
"""

import argparse
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(?:[-*+]\s+|\d+[.)]\s+)*(```+|~~~+)")
ATX = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?))?\s*$")
SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def fence_step(fence, line):
    """(new fence state, whether `line` is code or a fence line). `fence` is
    the opening fence (e.g. "```") while inside a fenced block, else None."""
    if fence is None:
        m = FENCE.match(line)
        return (m.group(1), True) if m else (None, False)
    close = line.strip()
    if close and set(close) == {fence[0]} and len(close) >= len(fence):
        return None, True
    return fence, True


def code_free_lines(text):
    """[(line number, line)] outside fenced code blocks, inline code removed."""
    out = []
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        fence, code = fence_step(fence, line)
        if not code:
            out.append((n, strip_code_spans(line)))
    return out


def strip_code_spans(line):
    """The line with `code spans` blanked (their text is not markup)."""
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def heading_text_to_slug(text):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"<[^>]+>", "", text)                      # HTML tags
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)   # links, images
    text = text.replace("`", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    """The set of anchors of a Markdown file."""
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen = {}
    anchors = set()

    def add(slug):
        n = seen.get(slug, 0)
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
        seen[slug] = n + 1

    fence = None
    prev = None  # previous line of text, for setext headings
    for line in text.splitlines():
        fence, code = fence_step(fence, line)
        if code:
            prev = None
            continue
        for a in HTML_ANCHOR.findall(line):
            anchors.add(a)
        h = ATX.match(line)
        if h:
            add(heading_text_to_slug(re.sub(r"\s#+\s*$", "", h.group(2) or "")))
            prev = None
            continue
        s = SETEXT.match(line)
        if s and prev is not None and prev.strip() and not prev.lstrip().startswith(
                ("|", "-", "*", "+", ">", "<")) and "|" not in prev:
            add(heading_text_to_slug(prev))
            prev = None
            continue
        prev = line if line.strip() else None
    cache[path] = anchors
    return anchors


def link_targets(line):
    """The targets of the inline links and images of one line."""
    targets = []
    i = 0
    while True:
        j = line.find("](", i)
        if j < 0:
            break
        k = j + 2
        depth = 1
        while k < len(line) and depth:
            if line[k] == "(":
                depth += 1
            elif line[k] == ")":
                depth -= 1
            k += 1
        inner = line[j + 2:k - 1].strip() if depth == 0 else line[j + 2:].strip()
        if inner.startswith("<") and ">" in inner:
            target = inner[1:inner.index(">")]
        else:
            target = inner.split()[0] if inner.split() else ""
        targets.append(target)
        i = k
    m = REF_DEF.match(line)
    if m:
        targets.append(m.group(1).strip("<>"))
    return targets


def check_file(path, root):
    problems = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    base = os.path.dirname(os.path.abspath(path))
    shown = os.path.relpath(path, root) if root else path
    for n, line in code_free_lines(text):
        for target in link_targets(line):
            if not target or SCHEME.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            anchor = urllib.parse.unquote(anchor)
            dest = os.path.normpath(os.path.join(base, file_part)) if file_part \
                else os.path.abspath(path)
            if file_part and not os.path.exists(dest):
                problems.append("%s:%d: link '%s': no file %s"
                                % (shown, n, target, os.path.relpath(dest, root or ".")))
                continue
            if not anchor or not dest.endswith(".md") or os.path.isdir(dest):
                continue
            if anchor not in anchors_of(dest):
                problems.append("%s:%d: link '%s': %s has no heading with anchor '#%s'"
                                % (shown, n, target, os.path.relpath(dest, root or "."),
                                   anchor))
    return problems


def markdown_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith(".md"):
                        yield os.path.join(dirpath, name)
        else:
            yield p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", help="print paths relative to this folder")
    ap.add_argument("paths", nargs="+", help="Markdown files, or folders to search")
    a = ap.parse_args()
    problems = []
    files = 0
    for path in markdown_files(a.paths):
        if not os.path.isfile(path):
            problems.append("%s: no such file" % path)
            continue
        files += 1
        problems.extend(check_file(path, a.root))
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print("FAIL: %d broken link(s) in %d file(s)" % (len(problems), files), file=sys.stderr)
        return 1
    print("ok: every relative link and anchor of %d Markdown file(s) resolves" % files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
