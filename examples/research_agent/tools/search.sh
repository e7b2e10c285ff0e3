#!/bin/sh
# search QUERY: prints "DOC: line" for each corpus line holding a word of QUERY
# (case-insensitive, words of 4 letters or more). Offline stand-in for a web search.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
for word in $(printf '%s\n' "$1" | tr -cs 'A-Za-z' '\n' | awk 'length($0) >= 4'); do
  for f in "$here"/corpus/*.txt; do
    grep -i -F -- "$word" "$f" | sed "s|^|$(basename "$f" .txt): |" || true
  done
done | sort -u
