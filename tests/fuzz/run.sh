#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in a build folder of their own and
# runs each over its seed corpus (tests/fuzz/corpus/<target>/) for a while.
#
#   tests/fuzz/run.sh [--build DIR] [--seconds N] [--merge] [TARGET...]
#
# --build DIR   the clang build folder (default: build-fuzz in the source tree)
# --seconds N   run time per target (default 5; ctest uses 5, an hour: 900)
# --merge       fold the new inputs that add coverage into the repo's corpus
# TARGET        graph, config, http, records (default: all four)
#
# New inputs go to DIR/work/<target> (the repo's corpus is only read unless
# --merge); a crash leaves its input in DIR/artifacts/ and fails the run:
# fix it, then add the input to tests/fuzz/corpus/<target>/.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$src/build-fuzz"
seconds=5
merge=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --merge) merge=1; shift ;;
    graph|config|http|records) targets+=("$1"); shift ;;
    *) echo "usage: $0 [--build DIR] [--seconds N] [--merge] [graph|config|http|records]..." >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(graph config http records)
cmake="${CMAKE_COMMAND:-cmake}"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  "$cmake" -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DCANOPY_FUZZ=ON -DCANOPY_BUILD_TESTS=OFF -DCANOPY_BUILD_EXAMPLES=OFF \
    -DCANOPY_BUILD_BENCHMARKS=OFF >"$build.configure.log" 2>&1 \
    || { cat "$build.configure.log" >&2; exit 1; }
fi
"$cmake" --build "$build" -j2 --target $(printf 'fuzz_%s ' "${targets[@]}")
status=0
for t in "${targets[@]}"; do
  corpus="$src/tests/fuzz/corpus/$t"
  work="$build/work/$t"
  mkdir -p "$work" "$build/artifacts"
  echo "== fuzz_$t: ${seconds}s over $(ls "$corpus" | wc -l) seed inputs"
  # -rss_limit_mb: the validator's cost is checked too.
  if ! "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/artifacts/fuzz_$t-" \
       "$work" "$corpus" 2>"$build/fuzz_$t.log"; then
    tail -n 60 "$build/fuzz_$t.log" >&2
    echo "fuzz_$t FAILED: the input is in $build/artifacts/" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$build/fuzz_$t.log" || true
  fi
  if [ $merge = 1 ]; then
    "$build/tests/fuzz/fuzz_$t" -merge=1 "$corpus" "$work" 2>>"$build/fuzz_$t.log"
  fi
done
exit $status
