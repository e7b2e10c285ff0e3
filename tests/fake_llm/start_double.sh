# Sourced by the examples' run.sh: `start_double REPLIES` starts
# tests/fake_llm/fake_llm.py playing REPLIES on a free port of 127.0.0.1,
# waits until it listens and sets `port` and `tmp` (a temp folder);
# `stop_double` stops it and removes `tmp` (also on exit).
double_dir=$(cd "$(dirname "$0")/../../tests/fake_llm" && pwd)

start_double() {
  tmp=$(mktemp -d)
  python3 "$double_dir/fake_llm.py" --script "$1" --log "$tmp/requests.jsonl" \
    --port-file "$tmp/port" &
  double_pid=$!
  trap stop_double EXIT
  # Ctrl-C is canopy's to handle (it stops the run and prints its id): sh
  # only waits for it, then stops the double (a background job, which
  # ignores Ctrl-C) and exits with canopy's status.
  trap : INT
  tries=0
  until [ -s "$tmp/port" ]; do # the double writes its port once it listens
    tries=$((tries + 1))
    [ $tries -lt 200 ] || { echo "the provider double did not start" >&2; exit 1; }
    sleep 0.05
  done
  port=$(cat "$tmp/port")
}

stop_double() {
  kill "$double_pid" 2>/dev/null || true
  wait "$double_pid" 2>/dev/null || true
  rm -rf "$tmp"
  trap - EXIT
}
