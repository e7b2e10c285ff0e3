#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

#include "persistence/outcomes.hpp"

namespace canopy::core {

/// Errors and exit reasons of the actor layer.
enum class actors_errc : uint8_t {
  /// Exit reason of a graceful stop; the context holds the stop reason's
  /// spelling (exit reasons cross to other nodes).
  stop = 1,
  /// Exit reason of a forced stop (no grace periods); context as `stop`.
  stop_force,
  /// A step failed; the context holds the message.
  step_failed,
  /// A step attempt ran past its `timeout`.
  timeout,
  /// A subprocess could not be started.
  spawn_failed,
  /// The cluster refused a node (wrong secret, name taken); context says why.
  refused,
  /// Exit reason of an execution a stop from above ended compactly: its
  /// report rides in its down message (one message fewer per execution of a
  /// stopped tree). The context holds the events its subtree's snapshot
  /// stands for (`uint64_t`, see `subtree_stop`).
  stopped_compactly,
};

/// The error category atom of `actors_errc`.
constexpr caf::atom_value actors_category = caf::atom("actors");

/// Returns a `caf::error` with code `x` and the message `context`.
caf::error make_error(actors_errc x, std::string context);

/// Returns the exit reason that stops an actor (a runner, a child
/// execution) for `reason` in `mode` (`force` skips grace periods).
caf::error make_stop(stop_reason reason, stop_mode mode);

/// If `err` is a stop exit reason, sets `reason` and `mode` and returns true.
/// Its reason is read by `stop_reason_of`.
bool is_stop(const caf::error& err, stop_reason& reason, stop_mode& mode);

/// The stop reason a stop (an exit reason, a stop message) carries as text:
/// a reason this version does not know reads as `requested`.
stop_reason stop_reason_of(const std::string& text);

/// The exit reason of an execution stopped compactly, standing for `events`.
caf::error make_compact_stop(uint64_t events);

/// If `err` is the exit reason of `make_compact_stop`, sets `events` and
/// returns true.
bool is_compact_stop(const caf::error& err, uint64_t& events);

const char* to_string(actors_errc x);

} // namespace canopy::core
