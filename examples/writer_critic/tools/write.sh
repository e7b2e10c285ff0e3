#!/bin/sh
# The writer agent's "model": it writes a draft about the topic, and revises
# it after each critique. Its conversation so far arrives as JSON in
# $HISTORY; the number of replies it already gave is its revision count.
set -eu
revision=$(( $(printf '%s' "$HISTORY" | grep -o '"role":"agent"' | wc -l) + 1 ))
echo "writer: revision $revision" >&2
sleep 0.3  # stands in for an LLM call
case "$MESSAGE" in
  Write*) topic=$(printf '%s' "$MESSAGE" | sed 's/^Write a paragraph about //; s/\.$//')
          printf 'Draft %s: %s let many small workers share one job.' "$revision" "$topic" ;;
  *)      printf 'Draft %s: revised after "%s".' "$revision" "$MESSAGE" ;;
esac
