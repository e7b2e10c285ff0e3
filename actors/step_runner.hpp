#pragma once

// The step runner: one actor per running `run`/`tool` attempt. It starts the
// subprocess in its own process group and polls it (no thread waits in
// waitpid), so CAF's scheduler threads never block.
//
// Sends to its parent (the execution actor):
//   (started_atom, uint64_t step, int attempt, int64_t pid, uint64_t pid_start)
//                                                             once the process runs
//   (output_atom, uint64_t step, int attempt, json lines)      batched output lines
//   (done_atom, uint64_t step, int attempt, step_outcome)      result, then quits normally
//   (signalled_atom, uint64_t step, int attempt, int signal, int next, int64_t next_in_ms)
//       the escalation of a stop or timeout sent `signal` to the group;
//       `next` follows in `next_in_ms` (`next` 0, `next_in_ms` -1: nothing
//       follows). The same to a remote parent (plain numbers cross the wire).
// Handles:
//   exit (actors_errc::stop / stop_force)   SIGINT, after grace.interrupt SIGTERM,
//       after grace.terminate SIGKILL, each to the whole group (force: SIGKILL at
//       once); once the leader is reaped, quits normally and
//       sends no `done`.
// A timeout ends the attempt through the same escalation; the outcome's error
// is "timeout". When the leader exits, leftover members of its process group
// are killed: a step leaves no processes behind.

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/runner_spec.hpp"

namespace canopy::core {

/// Spawns a runner linked to and monitored by `parent`.
/// Threading: call from `parent`'s handlers.
caf::actor spawn_step_runner(caf::local_actor* parent, runner_spec spec);

/// Spawns a runner (with `spec.wire` set) for a remote `parent`, monitored by
/// `node` (a worker's node actor); the runner links itself to `parent`.
/// Its messages to `parent` take the wire form:
///   (output_atom, step, attempt, string lines_json)
///   (done_atom, step, attempt, string result_json, string error)
/// (`started` and `signalled` as to a local parent).
/// Threading: call from `node`'s handlers.
caf::actor spawn_remote_step_runner(caf::event_based_actor* node, caf::actor parent,
                                    runner_spec spec);

} // namespace canopy::core
