#pragma once

// The crash loop's verdict, kept apart from the processes that produce its
// inputs so that it can be tested on its own (a checker that cannot fail is
// a defect): what was observed in one trial goes in, the violations come out.
//
// Pure functions of plain data; no process, store or file is touched here.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace canopy::core::test {

/// One line of the side-effect log that every `run` step appends to:
/// `begin NAME PID` when it starts, `end NAME PID` before it exits.
struct log_line {
  bool begin = true;
  std::string step;
};

/// Parses the side-effect log (lines that are not of the two forms are
/// skipped: a line cut by a SIGKILL is not a start or an end).
std::vector<log_line> parse_log(const std::string& text);

/// What the store showed for one step at a snapshot taken after a kill.
struct step_seen {
  int attempt = 0;       ///< the step's `attempt`
  size_t started = 0;    ///< `step.started` events of the step so far
  size_t begins = 0;     ///< `begin` lines of the step in the log so far
};

/// The steps recorded `completed` after one kill (step name → what was
/// seen). Step names are unique across the trial's whole tree.
using completed_snapshot = std::map<std::string, step_seen>;

/// Everything a trial observed once its execution finished.
struct trial_observations {
  /// Step name → names of the steps it needs (the graph's `needs`, child
  /// graphs included).
  std::map<std::string, std::vector<std::string>> needs;
  /// Names of the `run` steps (the ones that write to the log).
  std::vector<std::string> run_steps;
  /// One snapshot per kill that found an execution in the store.
  std::vector<completed_snapshot> snapshots;
  /// The final execution document (`show --json`: steps and `children`).
  nlohmann::json final_doc;
  /// The final event log of the tree (`events --json`), as printed.
  std::vector<nlohmann::json> events;
  /// The final side-effect log.
  std::vector<log_line> log;
  /// The outputs a run without kills produces.
  nlohmann::json reference_outputs;
};

/// The violations found in one trial, each counted once per step.
struct trial_verdict {
  size_t reruns = 0;            ///< completed at a kill, yet started again
  size_t order_violations = 0;  ///< started before a step it needs completed
  size_t incomplete = 0;        ///< not completed at the end, or wrong outputs
  size_t log_violations = 0;    ///< broken invariants of the final event log
  std::vector<std::string> notes; ///< one sentence per violation
  bool ok() const {
    return reruns == 0 && order_violations == 0 && incomplete == 0 && log_violations == 0;
  }
};

/// Steps of the tree document `doc` (an execution with `steps` and
/// `children`), by name: the step's JSON (status, attempt, ...).
std::map<std::string, nlohmann::json> tree_steps(const nlohmann::json& doc);

/// Builds the snapshot after a kill: the steps of `doc` recorded completed,
/// with their attempts, their `step.started` events in `events` and their
/// `begin` lines in `log`.
completed_snapshot snapshot_of(const nlohmann::json& doc,
                               const std::vector<nlohmann::json>& events,
                               const std::vector<log_line>& log);

/// Judges one trial: a step completed at some kill must keep its attempt,
/// its `step.started` count and its `begin` count to the end; a step starts
/// (first `step.started` event, first `begin` line) only after every step
/// it needs completed (last `step.completed` event, last `end` line); the
/// execution and every step end completed with the reference outputs; the
/// final event log keeps its invariants (event_log_violations).
trial_verdict judge(const trial_observations& obs);

} // namespace canopy::core::test
