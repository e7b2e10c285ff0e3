#pragma once

// The store writer: the one actor per process that writes to the store.
//
// Messages:
//   (write_atom, write_batch) -> bool          commit durably (group commit), then answer true
//   (write_atom, write_batch, commit_ticket)    the same for a thread: set the ticket instead
//   (subscribe_atom, actor) -> uint64_t         send the subscriber every event committed
//                                               after the answered seq
//   (unsubscribe_atom, actor) -> bool           stop sending; answered after every
//                                               event committed so far was sent
//   (sync_atom) -> bool                         answered after every event committed
//                                               so far was sent to the subscribers
// Subscribers receive (events_atom, event_list) after each commit,
// with seqs assigned, in seq order: the batch's own events, the store's, and
// those a compact snapshot of the batch stands for (read back after the commit).
// The events of one commit are all sent before the next commit begins.
//
// Group commit: writes that arrive while a commit is in progress (or queued in
// the mailbox before the writer's flush) are committed together in one
// transaction, so throughput does not collapse to one fsync per step.
//
// Idle time: a compact snapshot it committed (store.hpp) is materialised
// once no write came for a second, one tree per transaction, so readers of
// the live index (recovery at every CLI start) stop walking stopped trees.
// Readers see the same before and after; a write touching the tree earlier
// materialises it itself. Under writes that never pause for a second, a
// snapshot committed `overdue_after` ago is materialised anyway, giving way
// to waiting writes only after `overdue_slice` of work: a small stopped
// tree (the common case: its transaction takes microseconds) is done at
// once, a large one yields and is tried again each second.

#include <chrono>
#include <functional>
#include <string>
#include <memory>
#include <optional>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/messages.hpp"
#include "persistence/duration.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

/// Leases (store.hpp, "Leases and fencing"): the writer holds the epoch of
/// every tree this process owns. A write with a lease claim on tree R
/// (`write_batch::lease`) is stamped, when its group is committed, with the
/// epoch the writer holds for R (0: none yet, i.e. one acquired earlier in
/// the same transaction); an acquiring claim gets this process as the new
/// owner. After the commit the writer keeps the epoch an acquire drew,
/// forgets it with the tree's last write, and answers a write whose claim
/// was fenced with `persistence_errc::fenced` (forgetting the tree too: a
/// process whose tree was taken over writes nothing more of it).
///
/// When the writer does its idle-time work (the defaults are the product's;
/// tests shorten them).
struct store_writer_options {
  /// The quiet (no write) before a materialisation, and how often the writer
  /// looks while compact snapshots or a write cache to hand back wait.
  std::chrono::milliseconds idle_delay{1000};
  /// A compact snapshot committed this long ago is materialised without
  /// waiting for quiet.
  std::chrono::milliseconds overdue_after{30000};
  /// Such an overdue materialisation gives way to a waiting message only
  /// after this much work.
  std::chrono::milliseconds overdue_slice{10};
  /// Called (on the writer's thread) with the root id of every write whose
  /// lease claim was fenced: metrics and logs.
  std::function<void(const std::string& root)> on_fenced;
};

/// The store writer's interface: the messages above, checked where they are
/// sent. `flush_atom` and `idle_atom` are the writer's own (it sends them to
/// itself: the flush queued behind the writes of one group, the idle-time
/// work); nobody else sends them.
using store_writer_actor = caf::typed_actor<
  caf::replies_to<write_atom, write_batch>::with<bool>,
  caf::reacts_to<write_atom, write_batch, commit_ticket>,
  caf::replies_to<subscribe_atom, caf::actor>::with<uint64_t>,
  caf::replies_to<unsubscribe_atom, caf::actor>::with<bool>,
  caf::replies_to<sync_atom>::with<bool>,
  caf::reacts_to<flush_atom>,
  caf::reacts_to<idle_atom>>;

/// Spawns the store writer for `db` on a thread of its own (commits fsync).
/// Threading: call from any thread.
store_writer_actor spawn_store_writer(caf::actor_system& sys, std::shared_ptr<store> db,
                              store_writer_options opts = {});

/// Commits `batch` through `writer` and blocks the calling thread until it
/// is durable, it failed, or (when set) `bound` passed. No actor is spawned
/// for the wait: the writer answers the thread itself.
/// @returns no error once committed; the commit's error (for instance
///          `persistence_errc::fenced`); `sec::request_receiver_down` when
///          the writer is gone; `sec::request_timeout` when `bound` passed
///          (the write may still be committed later).
/// Threading: any thread that is not an actor's.
caf::error commit_and_wait(const store_writer_actor& writer, std::optional<millis> bound,
                           write_batch batch);

} // namespace canopy::core
