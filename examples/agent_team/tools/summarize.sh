#!/bin/sh
# summarize.sh ROLE TASK -- a stand-in for an LLM summary.
# Reads facts on stdin; prints {"role", "summary", "facts"} as JSON on stdout.
set -eu
# JSON-escape: control characters become spaces, then \ and " get a backslash.
esc() { printf '%s' "$1" | tr '\t\r\n' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g'; }
role=$1 task=$2
facts=$(grep -c . || true)                    # count non-empty lines of stdin
echo "summarize: $role condenses $facts facts" >&2
sleep 0.5
printf '{"role": "%s", "summary": "%s: %s facts gathered to %s", "facts": %s}\n' \
  "$(esc "$role")" "$(esc "$role")" "$facts" "$(esc "$task")" "$facts"
