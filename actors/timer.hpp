#pragma once

// The timer service: delivers a message to an actor after a delay without
// keeping that actor alive. CAF 0.17's `delayed_send` holds a strong
// reference to its receiver until the message is due, so an execution that
// ends while a long timer is pending (a `sleep`, a step timeout, a graph's
// 30-minute deadline) would keep its memory until then. Here the receiver is
// held weakly. A receiver that ends sends nothing: its timers are dropped by
// a sweep, which runs every `sweep_interval` while timers are pending and
// whenever the table has doubled since the last sweep (so it stays within
// twice the live timers, at amortised O(1) per timer).
//
// Messages:
//   (schedule_atom, int64_t delay_ms, actor_addr receiver, message msg)
//       deliver `msg` to `receiver` (if still alive) after `delay`
//   (cancel_atom, actor_addr receiver)   forget every timer of `receiver` (O(n))
//   (get_atom) -> uint64_t               pending timers (those of ended
//                                        receivers until the next sweep)

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/message.hpp>

#include "persistence/duration.hpp"

namespace canopy::core {

/// How often the timer service drops the timers of receivers that ended.
constexpr millis sweep_interval{2000};

/// Spawns the timer service. Not detached: each message costs it O(log n).
/// Threading: any thread.
caf::actor spawn_timer(caf::actor_system& sys);

/// Has `timer` deliver `msg` to `self` after `delay`; the timer is dropped
/// when `self` quits. Threading: call from `self`'s handlers.
void schedule(caf::local_actor* self, const caf::actor& timer, millis delay,
              caf::message msg);

} // namespace canopy::core
