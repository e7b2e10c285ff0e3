#pragma once

// The signal desk: one per runtime. It matches the signals stored for a tree
// with the waits armed for them in this process (every execution of a tree
// lives in its owner's process, so a tree's waits are all at one desk).
//
// A wait is armed by its execution (`arm`). The desk offers it the oldest
// buffered signal of its tree that it may take: same name; sent to the root
// or to the wait's own execution; no `step` or the wait's step path; not on
// offer elsewhere, and not declined by this wait before. One offer per wait
// at a time: the execution answers true once the write that consumes the
// signal is committed, false when the wait does not take it (then the next
// one is offered). A wait that got nothing is told so (`armed`), and its
// deadline timer starts. Signals stored in this process are handed over at
// once (`deliver`); those stored by another process on the same home are
// found by reading the tree's signals every `signal_poll_interval` while a
// wait is armed here. Only the desk of the tree's owner offers, and only the
// owner's write consumes (fenced by the tree's lease): a signal is consumed
// once.
//
// Handles:
//   (arm_atom, root, name, execution id, step path, idx, attempt)  from the execution
//   (disarm_atom, execution id, idx)                               the wait ended
//   (deliver_atom, signal_record) -> std::vector<std::string>      a signal was stored:
//       {execution id, step id} of the wait that took it, or empty: buffered
//   (tick_atom)                                                    read the store now
// Monitors each execution that arms a wait and forgets its waits when it
// goes. Quits on an exit signal.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "persistence/records.hpp"

namespace canopy::core {

class store;

/// A wait armed at the desk.
struct armed_wait {
  std::string root;         ///< its tree
  std::string name;         ///< the signal it waits for
  std::string execution_id; ///< its execution
  std::string step_path;    ///< its step path in the tree (`review/approve`)
  uint32_t idx = 0;         ///< its step's index in its execution
  int32_t attempt = 0;
  caf::actor execution;
  bool offered = false;     ///< an offer is out
  bool told = false;        ///< `armed` was sent: its deadline timer runs
  std::set<std::string> declined; ///< signals it did not take
};

/// The rule: wait `w` may be offered signal `s`. Thread-safe (pure).
bool may_take(const armed_wait& w, const signal_record& s);

/// How often the desk reads the signals of trees with a wait armed here, for
/// signals stored by other processes.
constexpr auto signal_poll_interval = std::chrono::milliseconds{100};

/// Spawns the signal desk over `db`; it keeps `armed` at the number of waits
/// armed at it (the node's `canopy_waiting_steps`). Threading: any thread.
caf::actor spawn_signal_desk(caf::actor_system& sys, std::shared_ptr<const store> db,
                             std::shared_ptr<std::atomic<size_t>> armed);

} // namespace canopy::core
