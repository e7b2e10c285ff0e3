#!/bin/sh
# merge.sh -- combines the three agents' summaries into the final report.
# Reads TOPIC, RESEARCH, ANALYSIS, CRITIQUE and FACTS_1..3 from the environment
# (set by the graph's `env`); prints the report as JSON on stdout.
set -eu
# JSON-escape: control characters become spaces, then \ and " get a backslash.
esc() { printf '%s' "$1" | tr '\t\r\n' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g'; }
echo "merge: combining 3 summaries on '$TOPIC'" >&2
sleep 0.3
printf '{"title": "Report: %s", "sections": ["%s", "%s", "%s"], "facts": %s}\n' \
  "$(esc "$TOPIC")" "$(esc "$RESEARCH")" "$(esc "$ANALYSIS")" "$(esc "$CRITIQUE")" \
  "$((FACTS_1 + FACTS_2 + FACTS_3))"
