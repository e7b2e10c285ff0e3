#pragma once

// How canopy's actor systems schedule: one rule for the runtime and the
// worker node.

#include <caf/actor_system_config.hpp>

namespace canopy::core {

/// Sets CAF's scheduler options on `cfg` (before the actor system is made).
void configure_scheduler(caf::actor_system_config& cfg);

} // namespace canopy::core
