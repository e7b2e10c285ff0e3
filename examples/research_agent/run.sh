#!/bin/sh
# Runs research.json offline: the provider is tests/fake_llm/fake_llm.py playing
# replies.json on a free port of 127.0.0.1; the tools search a local corpus.
#   sh examples/research_agent/run.sh ./build/canopy ./.canopy
# Against a real OpenAI-compatible server, use node.json.in with your
# provider's base_url (and "api_key_env" for a hosted API) and this folder
# for @HERE@, then:
#   canopy validate examples/research_agent/research.json --config node.json
#   canopy run examples/research_agent/research.json --config node.json --input topic=...
set -eu
canopy=$1
home=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/fake_llm/start_double.sh"
start_double "$here/replies.json"
sed -e "s|@PORT@|$port|" -e "s|@HERE@|$here|" "$here/node.json.in" > "$tmp/node.json"
status=0
# The graph's tools are the config's: validate checks its names against them.
"$canopy" validate "$here/research.json" --config "$tmp/node.json" || status=$?
if [ $status -eq 0 ]; then
  "$canopy" --home "$home" run "$here/research.json" --config "$tmp/node.json" \
    --input topic="durable agents" || status=$?
fi
stop_double
exit $status
