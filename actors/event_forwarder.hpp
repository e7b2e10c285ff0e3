#pragma once

// The event forwarder: one per live subscription (runtime::subscribe,
// execution_handle::subscribe). It subscribes itself to the store writer,
// replays the tree's events committed before that from the store, then calls
// its function with every live event: each event exactly once, in seq order.
//
// Handles:
//   (events_atom, event_list)   committed events, from the store writer
//   (flush_atom) -> bool        answered after every event queued before it
//                               was delivered (a subscription drains with it)

#include <functional>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/store_writer.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

/// Spawns a forwarder calling `f` with the events of tree `root_id` (empty:
/// every event, live ones only). `f` runs on the forwarder's thread.
/// Threading: any thread.
caf::actor spawn_event_forwarder(caf::actor_system& sys, store_writer_actor writer,
                                 std::shared_ptr<store> db,
                                 std::function<void(const event_record&)> f,
                                 std::string root_id);

} // namespace canopy::core
