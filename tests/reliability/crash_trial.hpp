#pragma once

// The crash loop: real `canopy run`/`resume` and `canopy serve`
// processes on a real store, SIGKILLed at random moments and resumed until
// their execution completes. Each trial runs one graph of `run` steps (each
// appends `begin NAME PID` / `end NAME PID` to a side-effect log), `fn`
// steps and a nested inline graph, and checks:
//   - a step recorded completed at a kill never runs again (attempt,
//     `step.started` events and `begin` lines all unchanged);
//   - dependency order (store events and the log);
//   - no orphans: every process of a killed incarnation (canopy, its
//     guardian, step shells and their children, all carrying the
//     incarnation's marker in their environment) is gone within
//     `orphan_timeout` of the kill, and nothing of the trial remains at its
//     end;
//   - the store opens after every kill (`ls`, `show`, `events`);
//   - the execution ends completed with the outputs of a run without kills.
//
// Used by the ctest test (a few trials) and by `bench_crash` (N on demand).
// Not thread-safe: one trial at a time per process.

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/reliability/crash_check.hpp"
#include "tests/reliability/trial_processes.hpp"

namespace canopy::core::test {

/// Which process the trial kills.
enum class crash_mode { run, serve };

const char* to_string(crash_mode m);

/// What one trial found.
struct trial_result {
  crash_mode mode = crash_mode::run;
  size_t kills = 0;              ///< SIGKILLs sent
  size_t completed_at_kill = 0;  ///< completed steps summed over the snapshots
  size_t pending_at_kill = 0;    ///< steps not completed, summed over the snapshots
  size_t orphans = 0;            ///< processes of a killed incarnation still alive
  size_t store_failures = 0;     ///< `ls`/`show`/`events` that failed after a kill
  trial_verdict verdict;         ///< re-runs, order, completion
  long elapsed_ms = 0;
  bool ok() const { return verdict.ok() && orphans == 0 && store_failures == 0; }
};

/// The fixed workload and its reference outputs; built once per process.
class crash_workload {
public:
  /// Writes the graph to a folder of its own and runs it once without kills
  /// (its duration bounds the random kill delays). Throws on failure.
  crash_workload();
  ~crash_workload();
  crash_workload(const crash_workload&) = delete;
  crash_workload& operator=(const crash_workload&) = delete;

  const std::string& graph_file() const { return file_; }
  const nlohmann::json& graph() const { return graph_; }
  const nlohmann::json& reference_outputs() const { return outputs_; }
  /// Duration of the reference `canopy run` (process start to exit).
  std::chrono::milliseconds reference_duration() const { return duration_; }
  const std::map<std::string, std::vector<std::string>>& needs() const { return needs_; }
  const std::vector<std::string>& run_steps() const { return run_steps_; }

private:
  std::string dir_;
  std::string file_;
  nlohmann::json graph_;
  nlohmann::json outputs_;
  std::chrono::milliseconds duration_{0};
  std::map<std::string, std::vector<std::string>> needs_;
  std::vector<std::string> run_steps_;
};

/// Options of one trial.
struct trial_options {
  crash_mode mode = crash_mode::run;
  /// Kills are drawn from 1..max_kills (an incarnation that completes before
  /// its kill ends the trial early).
  int max_kills = 3;
  /// The longest wait for the processes of a killed incarnation to vanish.
  std::chrono::milliseconds orphan_timeout{5000};
  /// Distinguishes trials' markers (e.g. the trial number).
  std::string label = "0";
};

/// Runs one trial with randomness from `rng`. Throws std::runtime_error when
/// the harness itself cannot go on (a process that cannot start, a server
/// that never answers).
trial_result run_trial(const crash_workload& w, const trial_options& opts, std::mt19937_64& rng);

} // namespace canopy::core::test
