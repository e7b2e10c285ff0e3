#pragma once

// The outcomes of the execution role: the record-level ones (reasons, stop
// modes, stop results, event types) are in persistence/outcomes.hpp; here is
// what an agent answers a step that asks for a turn. `to_string` is its only
// spelling. Plain C++ (no CAF): the machine and its tests use these directly.

#include <cstdint>

#include "persistence/outcomes.hpp"

namespace canopy::core {

/// An agent's answer to an `agent` step that asks for a turn.
enum class turn_verdict : uint8_t {
  granted,   ///< the turn is the step's until its run is down
  nested,    ///< the step's tree already holds a run of the agent: no turn taken
  busy,      ///< rejected (on_busy: reject, or the node shuts down)
  cancelled, ///< superseded by a newer message (on_busy: cancel_previous)
};

const char* to_string(turn_verdict x);

} // namespace canopy::core
