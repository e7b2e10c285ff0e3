#pragma once

// The outcomes every layer speaks of, as enums: why a step went back to
// `pending` or an execution stopped or failed, how a stop treats running
// work, where a stop request stands, and what an event says happened.
// Records carry these types; their spellings exist only in the codecs
// (outcomes.cpp here, the record codecs, the HTTP and CLI output) and on the
// wire. The status values themselves are in records.hpp. Plain C++.

#include <cstdint>
#include <string>

namespace canopy::core {

// -- reasons -------------------------------------------------------------------

/// Why a step was reset to `pending`, or why an execution stopped or failed
/// (docs: reference/statuses.md). Values are only ever appended.
enum class step_reason : uint8_t {
  none,
  requested,       ///< a stop request
  parent_stopped,  ///< the parent execution stopped
  child_stopped,   ///< the step's child execution stopped on its own
  sibling_failed,  ///< another step of the execution failed
  budget_exceeded, ///< a limit: the budget
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

// -- stops ---------------------------------------------------------------------

/// How a stop treats running work.
enum class stop_mode : uint8_t {
  graceful, ///< interrupt, then terminate after the grace periods
  force,    ///< kill at once
};

/// Where a stop request stands.
enum class stop_result : uint8_t {
  stopping,     ///< stored; its target has not settled yet (not handled)
  stopped,      ///< its target's snapshot is committed
  no_execution, ///< there was nothing to stop, or its target ended otherwise
};

// -- events --------------------------------------------------------------------

/// The type of an event of the log (docs: reference/events.md). Values are
/// only ever appended.
enum class event_type : uint8_t {
  execution_queued,
  execution_started,
  execution_resumed,
  execution_stopping,
  execution_stopped,
  execution_completed,
  execution_failed,
  step_queued,
  step_started,
  step_iteration,
  step_output,
  step_signalled,
  step_waiting,
  step_retry,
  step_pending,
  step_skipped,
  step_completed,
  step_failed,
  signal_received,
  signal_consumed,
  stop_requested,
  stop_handled,
  agent_message,
  agent_reply,
  agent_cancelled,
  subtree_stopped, ///< a compact snapshot's entry in the log (store.hpp): never served
};

/// The number of event types (for tables indexed by type).
constexpr size_t event_type_count = static_cast<size_t>(event_type::subtree_stopped) + 1;

/// What an event is about: the first part of its spelling.
enum class event_family : uint8_t { execution, step, signal, stop, agent, internal };

event_family family_of(event_type x);

/// True for the three events that end an execution.
bool is_final(event_type x);

// -- codec ---------------------------------------------------------------------

/// @returns the spelling of `x` ("" for `step_reason::none`).
const char* to_string(step_reason x);
const char* to_string(stop_mode x);
const char* to_string(stop_result x);
/// @returns the dotted spelling, e.g. `execution.stopped`.
const char* to_string(event_type x);

/// Parses a spelling; "" is `step_reason::none`. @returns false when unknown
/// (and leaves `x` as it was).
bool from_string(const std::string& s, step_reason& x);
bool from_string(const std::string& s, stop_mode& x);
bool from_string(const std::string& s, stop_result& x);
bool from_string(const std::string& s, event_type& x);

} // namespace canopy::core
