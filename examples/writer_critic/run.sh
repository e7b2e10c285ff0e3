#!/bin/sh
# Creates the writer and critic agents and runs three rounds of their
# conversation offline: the provider is tests/fake_llm/fake_llm.py playing
# replies.json on a free port of 127.0.0.1. With an ID, resumes that stopped
# conversation instead (each reply is chosen by the message it answers, so
# the double can pick up at any round).
#   sh examples/writer_critic/run.sh ./build/canopy ./.canopy [ID]
# FAKE_LLM_LOG=FILE keeps the double's request log (JSON Lines) in FILE, for
# the tests.
set -eu
canopy=$1
home=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/fake_llm/start_double.sh"
start_double "$here/replies.json"
sed "s|@PORT@|$port|" "$here/node.json.in" > "$tmp/node.json"
status=0
if [ $# -ge 3 ]; then
  "$canopy" --home "$home" resume "$3" --config "$tmp/node.json" || status=$?
else
  # An existing agent is updated and keeps its history.
  "$canopy" --home "$home" agent create writer --graph "$here/writer.json"
  "$canopy" --home "$home" agent create critic --graph "$here/critic.json"
  "$canopy" --home "$home" run "$here/conversation.json" --config "$tmp/node.json" \
    --input topic="actor runtimes" || status=$?
fi
[ -z "${FAKE_LLM_LOG:-}" ] || cp "$tmp/requests.jsonl" "$FAKE_LLM_LOG"
stop_double
exit $status
