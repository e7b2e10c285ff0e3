#!/bin/sh
# read.sh -- a stand-in for a tool that reads pages.
# Reads sources (one per line) on stdin, prints one fact per source on stdout.
set -eu
count=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  count=$((count + 1))
  echo "read: opening ${line%%:*}" >&2
  sleep 0.3
  echo "fact $count from ${line%%:*}"
done
echo "read: $count facts" >&2
