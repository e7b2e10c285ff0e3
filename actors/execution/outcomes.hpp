#pragma once

// The outcomes of the execution role as enums: why a step went back to
// `pending` or an execution stopped, how a stop treats running work, what an
// agent answers a step that asks for a turn. Records and messages that cross
// the store keep strings; `to_string`/`from_string` here are the only codec.
// Plain C++ (no CAF): the machine and its tests use these directly.

#include <cstdint>
#include <string>

namespace canopy::core {

/// Why a step was reset to `pending`, or why an execution stopped or failed.
enum class step_reason : uint8_t {
  none,
  requested,       ///< a stop request (SPEC §4.1)
  parent_stopped,  ///< the parent execution stopped
  child_stopped,   ///< the step's child execution stopped on its own
  sibling_failed,  ///< another step of the execution failed
  budget_exceeded, ///< a limit: the budget (SPEC §13 rule 8)
  deadline,        ///< a limit: the deadline
  max_steps,       ///< a limit: the number of attempts
  max_depth,       ///< a limit: the nesting depth
  interrupted,     ///< the owning process died (crash recovery)
  node_lost,       ///< the cluster member running the step was lost
  shutdown,        ///< the node shuts down
  retry,           ///< the attempt failed and will be retried
  step_failed,     ///< an execution's reason when a step failed
  condition_false, ///< a step was skipped: its `when` was false
  needs_skipped,   ///< a step was skipped: needs it relies on were skipped (`after`)
  wait_timeout,    ///< a wait failed: its deadline passed (`on_timeout: fail`)
  rejected,        ///< a wait failed: a failure signal answered it
  max_iterations,  ///< a loop failed: `until` did not hold within `repeat.max`
};

/// Stop reasons are step reasons (the same vocabulary).
using stop_reason = step_reason;

/// How a stop treats running work.
enum class stop_mode : uint8_t {
  graceful, ///< interrupt, then terminate after the grace periods
  force,    ///< kill at once
};

/// An agent's answer to an `agent` step that asks for a turn.
enum class turn_verdict : uint8_t {
  granted,   ///< the turn is the step's until its run is down
  nested,    ///< the step's tree already holds a run of the agent: no turn taken
  busy,      ///< rejected (on_busy: reject, or the node shuts down)
  cancelled, ///< superseded by a newer message (on_busy: cancel_previous)
};

/// @returns the record spelling of `x` ("" for `none`).
const char* to_string(step_reason x);
/// Parses a record spelling; "" is `none`. @returns false when unknown.
bool from_string(const std::string& s, step_reason& x);

const char* to_string(stop_mode x);
/// Parses `graceful` / `force`. @returns false for anything else.
bool from_string(const std::string& s, stop_mode& x);
const char* to_string(turn_verdict x);

} // namespace canopy::core
