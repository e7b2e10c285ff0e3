#!/bin/sh
# Runs brief.json offline: the provider is tests/fake_llm/fake_llm.py playing
# replies.json on a free port of 127.0.0.1.
#   sh examples/llm_brief/run.sh ./build/canopy ./.canopy
# Against a real OpenAI-compatible server, write the config yourself:
#   {"providers": {"default": {"base_url": "http://127.0.0.1:8080/v1"}}}
# and run: canopy run examples/llm_brief/brief.json --config node.json --input topic=...
set -eu
canopy=$1
home=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/fake_llm/start_double.sh"
start_double "$here/replies.json"
printf '{"providers": {"default": {"base_url": "http://127.0.0.1:%s/v1"}}}\n' "$port" \
  > "$tmp/node.json"
status=0
"$canopy" --home "$home" run "$here/brief.json" --config "$tmp/node.json" --input topic="canopy" \
  || status=$?
stop_double
exit $status
