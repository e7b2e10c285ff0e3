#pragma once

// What a step runner starts (actors/step_runner.hpp), as plain data: the
// execution machine builds it without knowing the runner's actor. No CAF
// actor header here.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "actors/process/subprocess.hpp"
#include "persistence/duration.hpp"
#include "persistence/graph.hpp"

namespace canopy::core {

/// The name of signal `sig` in the `step.signalled` event: `SIGINT`,
/// `SIGTERM`, `SIGKILL`, else `SIG` and its number.
std::string signal_name(int sig);

/// What a runner starts.
struct runner_spec {
  uint64_t step = 0;
  int attempt = 1;
  subprocess_options process;
  std::optional<millis> timeout;
  grace_periods grace;
  /// At most this many output lines per attempt are reported as events.
  size_t max_output_events = 1000;
  /// The parent is on another node (a worker runs this for the supervisor):
  /// output and results travel as JSON text, and losing the parent kills
  /// the process group at once.
  bool wire = false;
};

} // namespace canopy::core
