#pragma once

// The compact snapshot inside the store: how a `subtree_stop`
// (records.hpp) is stored, expanded, resolved by readers and materialised.
// Internal to the store's source files (store_read.cpp, store_registry.cpp,
// store_commit.cpp, store_commit_txn.cpp); not installed.
//
// The expansion (`walk`) is the one definition of what a subtree_stop stands
// for; the readers' resolution, the events of the compact entry and the
// materialisation all derive from it:
//   From the target's children in `children` key order, depth first, pre-order;
//   an execution is covered when its stored status is not terminal, and the walk
//   does not descend below one that is terminal. For each covered D, in walk
//   order: one `step.pending` per step of D stored active (`is_active`:
//   running, queued or waiting; key order), then one `execution.stopped` for D.
//   D resolves to `stopped` with reason `child_reason` (D a direct child of the
//   target) or `parent_stopped` (deeper), ended_at = time, outputs null; its
//   active steps by `reset_step_record` (records.hpp) with D's reason at
//   `time`, everything else as stored (as the per-node snapshot writes them).
//   The events get the seqs first_seq, first_seq + 1, ... in walk order, at most
//   `events` of them (see `expand`).

#include <lmdb.h>

#include <functional>
#include <unordered_map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "persistence/records.hpp"

namespace canopy::core::store_subtree {

/// The type of the compact entry in the event log. Never shown: every reader
/// of the log expands it (`tree_events`).
inline constexpr event_type compact_type = event_type::subtree_stopped;

/// The databases the compact snapshot reads and writes.
struct dbs {
  unsigned executions = 0, steps = 0, children = 0, events = 0, live = 0, agent_runs = 0;
  unsigned subtrees = 0;
  /// The status index and `meta` (its counts), kept by materialisation when
  /// `indexed` (store_index.hpp).
  unsigned by_status = 0, meta = 0;
  bool indexed = false;
  /// False while the `subtrees` database does not exist (a home written
  /// before it): there is no subtree_stop then.
  bool has_subtrees = false;
};

/// The compact entry of `s` (stored at root \0 first_seq in `events`): an
/// event record of type `compact_type` about the target, with what the
/// expansion needs in `reason` and `data`.
event_record compact_entry(const subtree_stop& s);

/// The subtree_stop a stored event stands for, or nothing when `e` is not a
/// compact entry.
std::optional<subtree_stop> from_compact_entry(const event_record& e);

/// Resolves a covered execution's record in place (see the top of this file).
void resolve_execution(execution_record& rec, step_reason reason, int64_t time);

/// What a subtree_stop stands for, in walk order.
struct expansion {
  std::vector<execution_record> executions; ///< covered, resolved
  std::vector<step_record> steps;           ///< the steps it resets, resolved
  /// The events with seqs assigned: at most `s.events` of them. When the walk
  /// yields more (the writer counted fewer), the events past the count are
  /// not in the log (the records still resolve); when it yields fewer, the
  /// remaining reserved seqs stay unused. Never a seq outside the range.
  std::vector<event_record> events;
  uint64_t walked_events = 0; ///< how many the walk yielded (!= s.events: a mismatch)
};

/// Asked by a materialisation before each execution it walks: true (another
/// write waits) makes it roll back.
using give_way_fn = std::function<bool()>;

/// What `materialize` returns when `give_way` answered true. Outside LMDB's
/// codes (and errno's), so it is never mistaken for a failure of LMDB.
inline constexpr int gave_way = -31000;

/// Expands `s` as stored in `txn`. With `records` false only `events` (and
/// `walked_events`) are filled, and only the events with seq > `after`.
expansion expand(MDB_txn* txn, const dbs& d, const subtree_stop& s, bool records = true,
                 uint64_t after = 0);

/// True when the `subtrees` database holds any entry.
bool any_stops(MDB_txn* txn, const dbs& d);

/// The subtree_stop stored for `target` of tree `root`, if any.
std::optional<subtree_stop> load_stop(MDB_txn* txn, const dbs& d, const std::string& root,
                                      const std::string& target);

/// Answers "is this stored execution covered by a stored subtree_stop, and
/// with which reason" within one transaction, caching what it read (one
/// per read call of the store: `list`/`live` resolve many executions).
class resolver {
public:
  resolver(MDB_txn* txn, const dbs& d);

  /// What covers an execution (valid as long as the resolver).
  struct coverage {
    const subtree_stop* stop = nullptr;
    step_reason reason = step_reason::none; ///< its resolved reason
  };

  /// The coverage of stored execution `rec`: nothing when `rec` is terminal
  /// or no stored subtree_stop covers it. Walks up the parents: a parent with
  /// a subtree_stop covers it, a non-terminal parent passes the question up,
  /// a terminal (or missing) parent ends it uncovered.
  std::optional<coverage> covering(const execution_record& rec);

  /// Resolves `rec` in place when covered. @returns true when covered.
  bool resolve(execution_record& rec);

  /// Resolves the steps of execution `id` (as stored) in place. Reads `id`'s
  /// record only when a step is active and any stop is stored.
  void resolve_steps(const std::string& id, std::vector<step_record>& steps);

  /// True when some subtree_stop is stored (else nothing is ever covered).
  bool active() const { return active_; }

private:
  /// The target of the subtree_stop covering non-terminal execution `id`
  /// (parent `parent`, tree `root`): "" when none. Memoised.
  const std::string& covering_target(const std::string& root, const std::string& id,
                                     const std::string& parent);
  bool root_has_stops(const std::string& root);
  const subtree_stop* stop_of(const std::string& root, const std::string& id);

  MDB_txn* txn_;
  dbs d_;
  bool active_ = false;
  std::unordered_map<std::string, bool> roots_;
  std::unordered_map<std::string, std::optional<subtree_stop>> stops_;
  std::unordered_map<std::string, std::string> targets_; ///< execution id → covering target or ""
};

/// Materialises the subtree_stop of `target` in tree `root` in write
/// transaction `txn`: writes the resolved execution and step records and the
/// events at their reserved seqs (replacing the compact entry), removes the
/// covered executions from `live` and `agent_runs`, deletes the
/// subtree_stop. Nothing when none is stored. It writes as it walks, a few
/// hundred covered executions at a time (their records, steps and events),
/// so memory stays flat however large the subtree; `give_way`, when set, is
/// asked before each execution.
/// @returns an LMDB code, or `gave_way` once `give_way` answered true (the
///          caller aborts `txn`: nothing of it may be committed).
int materialize(MDB_txn* txn, const dbs& d, const std::string& root, const std::string& target,
                const give_way_fn& give_way = {});

/// Materialises every stored subtree_stop that covers (or whose target is)
/// an execution a write is about to touch: execution `id` of tree `root`
/// with parent `parent` (its stored record's or the new one's). Walks up the
/// parents while they are stored non-terminal. @returns an LMDB code.
int materialize_touching(MDB_txn* txn, const dbs& d, const std::string& root,
                         const std::string& id, const std::string& parent);

} // namespace canopy::core::store_subtree
