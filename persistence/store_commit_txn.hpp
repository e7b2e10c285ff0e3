#pragma once

// One attempt at `store::commit` (store_commit.cpp): the write transaction's
// state and the phases that write a batch, in the order the commit runs them:
//   begin                     the compact snapshot's databases, the seq counter
//   for the batch, then each nested one (recursively), in order:
//     claim                   its lease claim: a fenced batch is skipped
//                             with its nested ones
//     materialize_touched     compact snapshots the batch is about to touch
//     delete_executions       deleted executions and settled trees
//     put_records             executions, graphs, stop requests, ..., steps
//     put_events              the batch's events, then its compact snapshots
//   delete_events_of_deleted  deleted executions' events in other roots' logs
//   answer_stop_requests      the stop rule (`settle_stops`)
//   put_generated_events      `stop.handled`, last
//   finish                    the seq counter; 0 commits
// Seqs are assigned in exactly that order. A phase writes nothing once the
// attempt's LMDB code (`rc_`) is not 0. Internal: not installed.

#include <lmdb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "persistence/store.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy::core::store_detail {

/// One attempt at committing a batch in write transaction `txn`: the
/// store (a friend: its database handles), the running LMDB code and the seq
/// counter. A new one for each attempt (`write_once` runs the attempt again
/// after growing a full map). Defined phase by phase in store_commit_txn.cpp.
/// Threading: the committing thread, inside `store::commit` only.
struct commit_txn {
  /// `generated` receives the events the store writes itself.
  commit_txn(const store& s, MDB_txn* txn, std::vector<event_record>& generated)
    : s_(s), txn_(txn), generated_(generated) {}

  // -- phases, in the order `store::commit` runs them ------------------------

  /// Opens the compact snapshot's databases, creating `subtrees` into
  /// `created` when the home lacks it; reads the seq counter and whether any
  /// stop request is pending; empties `generated`. @returns an LMDB code.
  int begin(MDB_dbi& created);

  /// Checks `b`'s lease claim against the stored lease (store.hpp, "Leases
  /// and fencing"): a held claim must name the stored epoch, an acquiring
  /// one the epoch its writer read, which then becomes a new epoch from the
  /// home's counter with the new owner. Sets `b.lease.outcome` (and, on
  /// acquire, `b.lease.epoch`). @returns false when `b` is fenced: nothing
  /// of it nor of its nested batches may be written.
  bool claim(write_batch& b);

  /// Materialises every stored compact snapshot that covers (or whose target
  /// is) an execution `b` deletes, writes, or writes a step of, so the
  /// per-node records `b` changes are there (see store.hpp).
  void materialize_touched(const write_batch& b);

  /// Deletes `b.deleted_executions`, then every tree of `b.deleted_trees`
  /// that is settled, each execution with everything keyed by it; notes
  /// their events in another root's log for `delete_events_of_deleted`.
  void delete_executions(const write_batch& b);

  /// Puts `b`'s records, in this order: executions (with their `live`,
  /// `children` and `agent_runs` entries), graphs, new stop requests (their
  /// `stop.requested` events put at the head of `b.events`), counters (merged by maximum),
  /// registered graphs (version assigned into `b`), agents, history entries
  /// (seq assigned into `b`), steps. Notes the stop requests to answer.
  void put_records(write_batch& b);

  /// Gives `b.events` the next seqs, in order, and puts them; then gives each
  /// compact snapshot of `b` its reserved seq range (`first_seq`, into `b`)
  /// and puts its compact entry and record.
  void put_events(write_batch& b);

  /// Deletes the events of the executions deleted above from their roots'
  /// logs (runtime/docs/reference/statuses.md#stop), with one scan per root, once every batch is applied.
  void delete_events_of_deleted();

  /// Answers every pending stop request this commit may have settled (see
  /// `settle_stops`), appending their `stop.handled` events to `generated`.
  void answer_stop_requests();

  /// Puts the events in `generated`, with the next seqs: after every event
  /// of the batch and its nested ones.
  void put_generated_events();

  /// Stores the seq counter when the commit assigned seqs, and the lease
  /// epoch counter when it issued epochs.
  /// @returns the attempt's LMDB code: 0 commits it, any other aborts it.
  int finish();

private:
  // -- parts of the phases ---------------------------------------------------

  void put_executions(const write_batch& b);
  void put_stop_requests(write_batch& b);
  void put_counters(const write_batch& b);
  void put_registered(write_batch& b);
  void put_history(write_batch& b);

  /// Deletes execution `id` and everything keyed by it (see write_batch).
  void delete_execution(const std::string& id);

  /// `root` and every execution below it (the children index holds every
  /// child ever created), when `root` is a root whose stored status is
  /// terminal and none of them is live; else nothing.
  std::vector<std::string> settled_tree(const std::string& root);

  /// Deletes from the log of `root` the events of deleted executions `ids`
  /// (id → the last seq assigned when it was deleted) up to that seq.
  void delete_events_of(const std::string& root, const std::map<std::string, uint64_t>& ids);

  /// Deletes the stop request a deleted `stop.requested` event names (its
  /// record and any `pending` entry): a request goes with its target's log.
  void delete_stop_of(std::string_view event);

  // -- writes that keep the first failure in `rc_` ---------------------------

  void put(unsigned dbi, const std::string& key, const std::string& val, unsigned flags = 0);

  /// Puts an event with MDB_APPEND (the newest tree's events go at the very
  /// end of `dbi`: no search); a key that does not sort last is put normally.
  void put_event(unsigned dbi, const std::string& key, const std::string& val);

  /// Deletes `key` from `dbi`; a key that is not there is no error.
  void del(unsigned dbi, const std::string& key);

  /// Deletes every key of `dbi` that starts with `prefix`, handing each
  /// value to `each` (if set) before it goes.
  void del_prefix(unsigned dbi, const std::string& prefix,
                  const std::function<void(std::string_view)>& each = {});

  // -- state of the attempt --------------------------------------------------

  const store& s_;
  MDB_txn* txn_;
  /// Events the store writes itself, after the batch's own.
  std::vector<event_record>& generated_;
  store_subtree::dbs d_;
  int rc_ = 0;
  /// The last seq assigned; `first_seq_`: the stored counter's.
  uint64_t seq_ = 0;
  uint64_t first_seq_ = 0;
  /// The last lease epoch issued (read on the first acquire; 0 until then)
  /// and the epochs this attempt issued, by root.
  uint64_t epoch_ = 0;
  bool epoch_read_ = false;
  std::map<std::string, uint64_t> acquired_;
  /// The stored epoch of each tree a claim of this attempt named (a group
  /// commit holds many writes of one tree: one read each).
  std::unordered_map<std::string, uint64_t> stored_epoch_;
  /// Whether any stop request was pending when the attempt began.
  bool any_pending_ = false;
  bool any_subtree_stop_ = false;
  /// Executions whose pending stop requests this commit may answer.
  std::unordered_set<std::string> settle_;
  /// Deleted executions of another root, by root: id → the last seq
  /// assigned when it was deleted (`delete_events_of_deleted`).
  std::map<std::string, std::map<std::string, uint64_t>> deleted_in_tree_;
  /// The key and value buffers of steps and events (most of a batch).
  std::string kbuf_, vbuf_;
};

} // namespace canopy::core::store_detail
