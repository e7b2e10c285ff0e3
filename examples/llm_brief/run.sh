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
tmp=$(mktemp -d)
python3 "$here/../../tests/fake_llm/fake_llm.py" --script "$here/replies.json" \
  --log "$tmp/requests.jsonl" --port-file "$tmp/port" &
llm=$!
stop_double() { kill $llm 2>/dev/null || true; wait $llm 2>/dev/null || true; rm -rf "$tmp"; }
trap stop_double EXIT
tries=0
until [ -s "$tmp/port" ]; do # the double writes its port once it listens
  tries=$((tries + 1))
  [ $tries -lt 200 ] || { echo "the provider double did not start" >&2; exit 1; }
  sleep 0.05
done
printf '{"providers": {"default": {"base_url": "http://127.0.0.1:%s/v1"}}}\n' "$(cat "$tmp/port")" \
  > "$tmp/node.json"
status=0
"$canopy" --home "$home" run "$here/brief.json" --config "$tmp/node.json" --input topic="canopy" \
  || status=$?
stop_double
trap - EXIT
exit $status
