#!/bin/sh
# The critic agent's "model": two rounds of notes, then approval. Its own
# earlier reviews arrive in $HISTORY.
set -eu
round=$(( $(printf '%s' "$HISTORY" | grep -o '"role":"agent"' | wc -l) + 1 ))
echo "critic: round $round" >&2
sleep 0.3  # stands in for an LLM call
case "$round" in
  1) printf 'Name a concrete example.' ;;
  2) printf 'Shorter, please.' ;;
  *) printf 'Approved: %s' "$(printf '%s' "$DRAFT" | cut -c1-40)" ;;
esac
