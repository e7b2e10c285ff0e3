#!/bin/sh
# search.sh TASK -- a stand-in for a slow web search.
# Prints one "source" per line on stdout; progress goes to stderr.
set -eu
task=$1
echo "search: querying for '$task'" >&2
for n in 1 2 3; do
  sleep 0.4                                   # the slow part of a real search
  echo "source $n: notes on $task"
done
echo "search: 3 sources found" >&2
