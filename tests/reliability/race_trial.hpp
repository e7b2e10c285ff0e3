#pragma once

// The race harness: several canopy processes on one home at once, racing
// for one execution tree. A trial starts the tree (`canopy run`, `run
// --detach`, or an HTTP start on a `canopy serve`), then mixes in, at random
// moments drawn from a seeded generator, any of:
//   - owners: `canopy resume`, `canopy serve` (with `--resume-interrupted`
//     or without), HTTP resume;
//   - stops: HTTP stop (random `wait` 0..10 s, sometimes forced), `canopy
//     stop --wait N`;
//   - readers: `canopy ls`, `show --json`, `events --json`, a `show --json`
//     every 200 ms for a while, HTTP GET of the execution and its tree, an
//     SSE reader of its events (from the start or a Last-Event-ID);
//   - SIGKILL or SIGTERM of a `run`, `resume`, detached run or `serve`.
// It then lets the tree settle, resumes it to completion (`canopy resume`
// without interference, again while it ends stopped), and judges what it
// saw (race_check.hpp): the event log's invariants, SSE and reads against
// the final log, re-runs of completed steps, a live owner's execution
// marked interrupted, the final statuses, stop requests handled, HTTP
// answers, crashes and orphans.
//
// A `run` or `resume` that exits 1 saying its execution was taken over by
// another process (fenced) is a legal outcome, counted, not a violation.
//
// Each trial runs on a fresh folder under /tmp (removed when the trial
// passes, kept and named when it fails); every process it starts carries
// the trial's mark (trial_processes.hpp), runs in a process group of its own
// and is gone when run_race_trial returns, also when it throws.
//
// Used by the ctest test (a fixed seed, a few trials) and by `bench_races`.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/reliability/race_check.hpp"

namespace canopy::core::test {

/// Options of one trial.
struct race_options {
  /// The trial's seed: the same seed draws the same graph, start and
  /// actions at the same moments (process timing aside).
  uint64_t seed = 1;
  /// Actions after the start: drawn from min_actions..max_actions.
  int min_actions = 4;
  int max_actions = 12;
  /// The longest pause before an action (drawn from 0..max_gap_ms).
  int max_gap_ms = 400;
  /// Keep the trial's folder even when it passes.
  bool keep = false;
};

/// What one trial did and found.
struct race_result {
  uint64_t seed = 0;
  std::string dir;                            ///< its folder (kept when it failed)
  std::string start;                          ///< how the tree started
  int64_t t0_ms = 0;                          ///< `+0 ms` on the wall clock (as event times)
  std::vector<std::string> actions;           ///< `+MS what`, in order
  std::map<std::string, size_t> action_counts;
  size_t fenced = 0;                          ///< processes that exited fenced
  std::vector<race_violation> violations;
  long elapsed_ms = 0;
  bool ok() const { return violations.empty(); }
  /// The seed, the folder, the actions and the violations, one per line.
  std::string report() const;
};

/// Runs one trial. Does not throw: a failure of the harness itself (a
/// process that cannot start) is a violation of kind `failures`.
race_result run_race_trial(const race_options& opts);

} // namespace canopy::core::test
