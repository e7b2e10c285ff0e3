#pragma once

// The slot pool bounds how many subprocesses run at once in this process
// (`max_parallel`, default 4). Steps that wait for a slot are `queued`.
//
// Messages:
//   (acquire_atom, uint64_t ticket)   queue the sender; it later receives
//                                     (grant_atom, ticket) when a slot is free
//   (release_atom, uint64_t ticket)   give the slot back, or leave the queue
// A sender that terminates releases all of its slots and tickets.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace canopy::core {

/// Spawns a slot pool with `slots` slots (at least 1). Threading: any thread.
caf::actor spawn_slot_pool(caf::actor_system& sys, size_t slots);

} // namespace canopy::core
