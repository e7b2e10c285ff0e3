#!/bin/sh
# Creates the two agents and runs three rounds of their conversation.
#   sh examples/writer_critic/run.sh [CANOPY] [HOME]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
canopy=${1:-./build/canopy}
home=${2:-./.canopy}
"$canopy" --home "$home" agent create writer --graph "$here/writer.json"
"$canopy" --home "$home" agent create critic --graph "$here/critic.json"
"$canopy" --home "$home" run "$here/conversation.json" --input topic="actor runtimes"
