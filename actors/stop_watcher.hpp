#pragma once

// The stop watcher: one per runtime. Every `stop_poll_interval` it reads the
// stop registry and delivers requests stored by other processes to the
// executions that live here (sets the target's halt token, then sends it
// (stop_atom, `requested`, force)), each request once. It polls
// only while an execution lives in this process: the directory wakes it when
// the first one registers, and it stops ticking when it finds none.
//
// Handles:
//   (tick_atom)   poll now (it sends itself the next tick while any lives)
//   (wake_atom)   an execution registered while none was live
// Quits on an exit signal.

#include <chrono>
#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace canopy::core {

struct execution_services;

/// How often the stop watcher reads the stop registry; bounds how long a stop
/// requested by another process takes to arrive (SPEC: within 250 ms).
constexpr auto stop_poll_interval = std::chrono::milliseconds{50};

/// Spawns the stop watcher of `svc`'s executions. Threading: any thread.
caf::actor spawn_stop_watcher(caf::actor_system& sys,
                              std::shared_ptr<const execution_services> svc);

} // namespace canopy::core
