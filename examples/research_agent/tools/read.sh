#!/bin/sh
# read DOC: prints corpus document DOC (a name such as "lmdb"; anything else is refused).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
case "$1" in
  *[!a-z_]* | "") echo "no document '$1' (names are lowercase letters)" >&2; exit 2 ;;
esac
[ -f "$here/corpus/$1.txt" ] || { echo "no document '$1'" >&2; exit 2; }
cat "$here/corpus/$1.txt"
