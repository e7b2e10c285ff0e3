#!/bin/sh
# plan.sh TOPIC -- a stand-in for an LLM planner.
# Prints a JSON plan on stdout: the topic and three sub-tasks, one per agent.
# Later steps read them as ${steps.planner.json.tasks.0} ... tasks.2.
set -eu
# JSON-escape: control characters become spaces, then \ and " get a backslash.
esc() { printf '%s' "$1" | tr '\t\r\n' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g'; }
t=$(esc "$1")

echo "planner: splitting '$1' into sub-tasks" >&2
sleep 0.5
printf '{"topic": "%s", "tasks": ["find prior work on %s", "compare the main designs of %s", "list the open risks of %s"]}\n' \
  "$t" "$t" "$t" "$t"
