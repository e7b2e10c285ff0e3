#pragma once

// The LMDB store under a canopy home. Knows records, not actors.
//
// Layout (named databases in one environment):
//   meta        "schema" → version ("4"), "seq" → last event seq (8 bytes, big endian),
//               "epoch" → last lease epoch issued (8 bytes, big endian),
//               "lease" \0 root id → tree_lease (epoch, pid, start: 8 bytes each,
//               big endian), for every tree ever leased,
//               "signal" \0 root id \0 signal id → signal record, for the
//               signals sent to a tree's waits (deleted with the tree)
//   executions  id → execution record
//   steps       execution id \0 step id → step record
//   children    parent id \0 child id → ""
//   graphs      execution id → stored graph
//   events      root id \0 seq (8 bytes, big endian) → event record
//   live        execution id → "" for every execution not yet terminal
//   stops       stop id → stop request (the stop registry); a request is
//               deleted with the log that holds its `stop.requested` event
//               (its target's tree), so retention takes it too
//   pending     target execution id \0 stop id → "" while the request is not handled
//   counters    scope execution id → tree counters (merged by maximum)
//   registry    owner \0 graph name \0 version (4 bytes, big endian) → registered graph
//   agents      owner \0 agent name → agent record
//   history     owner \0 agent name \0 seq (8 bytes, big endian) → history entry
//   agent_runs  owner \0 agent name \0 execution id → root id, for every execution
//               with an `agent` that is not yet terminal
//   subtrees    root id \0 target id → subtree_stop (a compact snapshot not yet
//               materialised; see below)
//   by_status   status, kind (root or child), id → "" for every execution;
//               `stopped`, kind interrupted, id → "" for every root stored
//               `stopped` with reason `interrupted`; and in `meta` "count" \0
//               status → how many (store_index.hpp)
//
// The status index (schema 3, with the interrupted roots schema 4). Listings
// with a status, and every listing of roots, walk `by_status` newest first
// from the cursor, so a page costs O(page), whatever the history holds;
// `status_counts` reads six counters; the interrupted roots a node start
// resumes are listed apart (`execution_filter::interrupted_only`), so that
// start reads them, not every stopped root of the history.
// The commit, the materialisation and deletions keep index and counts in the
// transaction that changes the record. A covered execution of a compact
// snapshot stays indexed and counted under its stored status until it is
// materialised (the store writer does it once idle); a listing of children
// with a status therefore walks `executions` while any compact snapshot is
// stored. A schema-2 home opens as it is (read only: listings walk
// `executions`, counts are counted) and its first write builds the index
// (schema "2>4" meanwhile, refused by a schema-2 binary; "2>3", an older
// release's build, is built again) in bounded transactions that resume where
// a crash left them; then the schema is "4". A schema-3 home opens with its
// index in use (the interrupted roots are found among its stopped roots);
// its first write lists the interrupted roots the same way (schema "3>4"
// meanwhile). A process of an older release that opened the home before and
// still writes it would leave its changes out of the index: stop the older
// release's processes before running this one.
//
// The compact snapshot. A batch's `subtree_stop` for target X
// says, in one record, that every execution below X stored not terminal
// became `stopped` and each of their running/queued steps `pending` (the
// exact rule, its walk and its events: store_subtree.hpp). At commit it gets
// a reserved seq range [first_seq, first_seq + events) of the root's log, one
// compact entry in `events` at its first seq (type `subtree.stopped`, never
// shown: readers expand it) and its record in `subtrees`. Every read resolves
// it: `execution`, `steps`, `list`, `live`, `agent_runs` and `tree_events`
// return exactly what the per-node records and events would be, and the stop
// rule answers requests for covered executions (result `stopped`). A write
// that touches a covered execution (its record, a step, a delete, a child
// under it), or X's record, first materialises the subtree_stop in the same
// transaction (per-node records and events at the reserved seqs, `live` and
// `agent_runs` entries removed, the record deleted); `materialize` does it on
// demand. The compact snapshot came without a schema change: `subtrees` is created by this release's first
// write in a home that lacks it (or when the home is created), and reads as
// empty while absent (a home no release with compact snapshots wrote to).
// The price of not bumping it: a binary from before the compact snapshot
// opening a home that holds one unmaterialised reads its covered executions
// as stored (running); materialise every tree (`materialize`) before such a
// downgrade. Reads of a compact range walk the subtree (O(covered executions
// and their steps)); the last walk's events are kept, so paging through one
// range walks it once. `live()` still visits covered executions (their
// `live` entries stay until materialised).
//
// Leases and fencing. Each tree has an owner (`tree_lease`: an epoch, the
// owner's pid and start time) stored under its root id. A write that changes
// a live tree carries a claim (`write_batch::lease`); inside the write
// transaction the store compares the claimed epoch with the stored one and
// skips a stale writer's batch (outcome `fenced`) while the rest of the
// commit goes on. Taking a tree over (a start, a resume, recovery of a dead
// owner's tree) is a compare-and-set on the epoch the taker read, and draws
// a new epoch from the home's counter. So two processes never both write a
// live tree, whatever the pids say: a pid names a process, the epoch names
// one tenure, and a process that lost its tenure (its tree resumed or
// recovered elsewhere) cannot tell from its pid alone.
//
// Records are stored in the binary encoding of records.hpp (schema 2). A home
// written by the release before (schema 1: JSON text records) opens as it
// is: the decoders read both encodings forever, told apart by the first byte
// ('{' is JSON text). Its first write (`commit`, or `migrate` at once)
// migrates it: the schema becomes "1>2" (a schema-1 binary refuses it from
// then on), every text record of every database is rewritten in bounded
// write transactions under the writers' lock, and the schema becomes "2>4"
// (the status index is built next, see above). A crash midway leaves "1>2"
// and the next writer runs it again (rewritten records are skipped). A schema-1 process still writing the home
// meanwhile may leave text records behind: they read alike.
// Opening stays read-only, so read commands never wait to migrate.
//
// Threading: one `store` per process and home, shared by all threads. Reads
// open a short read transaction each and may run from any thread at once
// (MDB_NOTLS). Writes must come from one thread at a time (in canopy: the
// store writer actor); every write transaction begins and ends inside one call.
//
// Several processes may open the same home. Their writers take turns through
// the writers' lock, `HOME/write.lock` (`flock(LOCK_EX)`, see
// `write_lock_path`), held for exactly one write transaction: a write that
// cannot take it within `store_options::write_wait` (5 s, runtime/docs/reference/cli.md#client-options)
// fails with `store_busy` instead of waiting without limit in LMDB. A holder
// that dies releases it. Reads never take it: they work while another process
// writes or holds the lock. Opening an existing home only reads.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <shared_mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "persistence/records.hpp"

struct MDB_env;
struct MDB_txn;

namespace canopy::core {

namespace store_subtree {
struct dbs;
} // namespace store_subtree
namespace store_detail {
struct commit_txn;
} // namespace store_detail
using store_subtree_dbs = store_subtree::dbs;

/// Mutations committed together in one write transaction.
struct write_batch {
  std::vector<execution_record> executions;
  std::vector<step_record> steps;
  std::vector<std::pair<std::string, stored_graph>> graphs; ///< execution id → graph
  /// Execution id → graph already encoded (`encode_graph`), for large graphs.
  std::vector<std::pair<std::string, std::string>> encoded_graphs;
  std::vector<event_record> events; ///< seq assigned at commit
  /// Executions to delete, with their steps, graph, index entries and events
  /// (also those in their root's log: runtime/docs/reference/statuses.md#stop, nothing of them remains).
  std::vector<std::string> deleted_executions;
  /// Root executions to delete with their whole trees (every execution the
  /// children index holds below them), each as `deleted_executions` says,
  /// only when, as the transaction applies it, the root's stored status is
  /// terminal and no execution of the tree is live; else nothing of that
  /// tree (read the root back to know).
  std::vector<std::string> deleted_trees;
  /// New stop requests (runtime/docs/reference/statuses.md#stop). Each is stored once, by id: writing a
  /// request again does nothing, so delivering it twice is harmless. The
  /// store writes its `stop.requested` event at the head of this batch's
  /// events (a request precedes what it causes: the halt it starts is
  /// written behind it, in the same batch), and answers it itself: a
  /// request whose target is terminal (or gone) once a transaction ends is
  /// `handled` in that transaction (result `stopped` when the target is
  /// `stopped`, else `no_execution`) with a `stop.handled` event, which
  /// comes after every event of the commit and is appended to the batch (as
  /// a nested batch) once committed. `handled`, `result` and
  /// `handled_at` of the records given here are ignored.
  std::vector<stop_record> stops;
  /// Signals to store, or to store again (keyed by root and id): a new one
  /// (`buffered`), or one a wait took (`consumed`, in the batch that ends
  /// that wait).
  std::vector<signal_record> signals;
  /// Executions whose pending stop requests are to be checked against their
  /// stored status (and answered when it is terminal): for requests left
  /// pending by an older release. Those of executions this batch ends, and
  /// of new requests, are checked anyway.
  std::vector<std::string> settle_stops;
  /// Scope execution id → counters, merged with the stored ones by maximum.
  std::vector<std::pair<std::string, tree_counters>> counters;
  /// Graph versions to register; a version of 0 becomes the next version of
  /// that owner's graph at commit (assigned into the batch).
  std::vector<registered_graph> registered;
  /// Agents to create or replace (keyed by owner and name).
  std::vector<agent_record> agents;
  /// History entries to append; each gets the next seq of its agent at
  /// commit (assigned into the batch).
  std::vector<history_entry> history;
  /// Compact snapshots (store.hpp top, store_subtree.hpp): each applied after
  /// this batch's own events got their seqs (before the nested batches and
  /// the store's `stop.handled` events); `first_seq` is assigned into it.
  /// The target's own records and events belong in the same batch.
  std::vector<subtree_stop> subtree_stops;
  /// The tree this batch changes and the epoch its writer holds (see
  /// `lease_claim`): when the claim fails, nothing of this batch nor of its
  /// nested batches is stored, and `lease.outcome` says `fenced`.
  lease_claim lease;
  /// Batches appended to this one, committed after it in order. Appending
  /// nests instead of copying records, so gathering a large subtree's
  /// snapshot level by level costs O(1) per level.
  std::vector<write_batch> nested;

  bool empty() const {
    return executions.empty() && steps.empty() && graphs.empty() && encoded_graphs.empty()
           && events.empty() && deleted_executions.empty() && deleted_trees.empty()
           && stops.empty() && signals.empty()
           && counters.empty() && registered.empty() && agents.empty() && history.empty()
           && settle_stops.empty() && subtree_stops.empty() && nested.empty();
  }

  /// Appends every mutation of `other`, keeping order. O(1).
  void append(write_batch&& other);

  /// Moves every event of this batch and the nested ones, in commit order,
  /// to the end of `out` (none of a fenced batch: nothing of it was stored). The events of its compact snapshots are not among
  /// them: read them back with `store::subtree_events`.
  void take_events(std::vector<event_record>& out);

  /// About how many records this batch and the nested ones write (a large
  /// encoded graph counts as one per 512 bytes): what the store writer sizes
  /// its group commits by. O(number of nested batches).
  size_t weight() const;

  /// Appends (copies) the subtree_stops of this batch and the nested ones,
  /// in commit order, to `out` (after a commit: with `first_seq` assigned).
  void collect_subtree_stops(std::vector<subtree_stop>& out) const;
};

/// Filter of `list_executions`.
struct execution_filter {
  std::optional<execution_status> status;
  std::string graph;     ///< empty: any
  /// Only this owner's executions (nullopt: any owner; "" matches executions
  /// started outside the HTTP API).
  std::optional<std::string> owner;
  bool roots_only = true;
  size_t limit = 0;      ///< 0: no limit
  /// A cursor: only executions with an id lower (older) than this one.
  std::string before;
  /// Only executions created at or after this time (ms since the epoch; 0:
  /// any). The walk stops at ids whose time is over a minute older (an id's
  /// time is taken just before its record's `created_at`).
  int64_t created_after = 0;
  /// Only roots stored `stopped` with reason `interrupted` (the roots a node
  /// start resumes); implies `roots_only` and status `stopped`. A schema-4
  /// home lists them from their own index entries, O(page); a home not yet
  /// migrated walks its stopped roots.
  bool interrupted_only = false;
};

/// How much of the store's file holds data (`store::usage`).
struct store_usage {
  uint64_t file_bytes = 0; ///< pages up to the last one ever used
  uint64_t free_bytes = 0; ///< pages of those on LMDB's free list (reused by later writes)
  uint64_t used_bytes() const { return file_bytes - free_bytes; }
};

/// How `store::materialize` ended.
enum class materialize_outcome : uint8_t {
  done,     ///< materialised, or nothing to materialise
  gave_way, ///< its `give_way` answered true: rolled back, nothing changed
};

/// Options of `store::open`.
struct store_options {
  std::string home;
  size_t initial_map_bytes = 64u << 20;
  /// How long a write waits for the writers' lock (another process writing)
  /// before it fails with `store_busy` (runtime/docs/reference/cli.md#client-options: 5 s). Zero: one try.
  std::chrono::milliseconds write_wait{5000};
};

class store {
public:
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  /// Opens (creating the folder and databases when missing) the store in `home`.
  /// An existing home is opened with a read transaction only, so opening
  /// works while another process writes; creating the databases is a write
  /// and takes the writers' lock like `commit`.
  /// @returns the store, or `io_error` when the folder or its writers' lock
  ///          file cannot be created, `store_error` when LMDB cannot open it
  ///          (or its schema differs), `store_busy` when the databases must
  ///          be created and the writers' lock stayed taken for `write_wait`.
  /// Threading: any thread; at most one `store` per home per process is
  /// supported (LMDB's rule; tests may open two to contend for the lock).
  static caf::expected<std::shared_ptr<store>> open(const store_options& opts);

  /// The path of the writers' lock file of `home`: `HOME/write.lock`. A
  /// process that holds `flock(LOCK_EX)` on it keeps every canopy writer of
  /// that home waiting (and, after `write_wait`, failing with `store_busy`).
  /// @returns the path (no error: nothing is touched). Threading: any thread.
  static std::string write_lock_path(const std::string& home);

  /// The home folder.
  const std::string& home() const { return home_; }

  /// How long a write waits for the writers' lock (`store_options::write_wait`).
  std::chrono::milliseconds write_wait() const { return write_wait_; }

  // -- reads (any thread) --------------------------------------------------------

  // Every read of executions, steps and events resolves the compact
  // snapshots (see the top of this header): none returns a covered
  // execution as stored, nor a compact entry of the log.

  /// @returns the execution, `not_found`, or `store_error`/`corrupt_record`.
  caf::expected<execution_record> execution(const std::string& id) const;

  /// @returns the steps of `id` in key order (possibly empty).
  caf::expected<std::vector<step_record>> steps(const std::string& id) const;

  /// @returns the ids of the direct children of `id`, oldest first.
  caf::expected<std::vector<std::string>> children(const std::string& id) const;

  /// @returns `id` and the ids of all its descendants (the children index),
  ///          read in one transaction. Thread-safe.
  caf::expected<std::set<std::string>> subtree_ids(const std::string& id) const;

  /// @returns the stored graph of execution `id`, or `not_found`.
  caf::expected<stored_graph> graph(const std::string& id) const;

  /// @returns executions matching `f`, newest first.
  caf::expected<std::vector<execution_record>> list(const execution_filter& f) const;

  /// @returns the events of the tree rooted at `root_id` with seq > `after`,
  ///          in seq order, at most `limit` (0: all). A compact entry is
  ///          expanded in place into the events it stands for, at their
  ///          reserved seqs (a seq of a range the walk did not fill is a gap).
  caf::expected<std::vector<event_record>> tree_events(const std::string& root_id,
                                                       uint64_t after = 0,
                                                       size_t limit = 0) const;

  /// @returns every execution whose status is not terminal (queued, running,
  ///          stopping), in id order.
  caf::expected<std::vector<execution_record>> live() const;

  /// @returns the stop request `id`, or `not_found`.
  caf::expected<stop_record> stop(const std::string& id) const;

  /// @returns every stop request not yet handled, oldest first.
  caf::expected<std::vector<stop_record>> pending_stops() const;

  /// @returns the signals tree `root_id` keeps, oldest first (by id);
  ///          empty for a tree without any (or no such tree).
  caf::expected<std::vector<signal_record>> signals(const std::string& root_id) const;

  /// @returns the counters of scope `id` (zeros when none were stored).
  caf::expected<tree_counters> counters(const std::string& id) const;

  /// @returns version `version` (0: the newest) of graph `name` registered by
  ///          `owner`, or `not_found`.
  caf::expected<registered_graph> registered(const std::string& owner, const std::string& name,
                                             int version = 0) const;

  /// @returns the newest version of each graph `owner` registered whose name
  ///          sorts after `after` ("" from the first), in name order, at most
  ///          `limit` (0: all). Thread-safe.
  caf::expected<std::vector<registered_graph>>
  registered_graphs(const std::string& owner, const std::string& after, size_t limit) const;

  /// @returns how much of the file holds data, as of the last commit.
  ///          Thread-safe.
  caf::expected<store_usage> usage() const;

  /// @returns how many graph names `owner` registered (versions count once).
  caf::expected<size_t> registered_count(const std::string& owner) const;

  /// @returns agent `name` of `owner`, or `not_found`.
  caf::expected<agent_record> agent(const std::string& owner, const std::string& name) const;

  /// @returns the agents of `owner` (nullopt: of every owner), by owner and name.
  caf::expected<std::vector<agent_record>>
  agents(const std::optional<std::string>& owner = std::nullopt) const;

  /// @returns the history of agent `name` of `owner` with seq > `after`, in
  ///          seq order, at most `limit` (0: all); empty for an unknown agent.
  caf::expected<std::vector<history_entry>> history(const std::string& owner,
                                                    const std::string& name,
                                                    uint64_t after = 0,
                                                    size_t limit = 0) const;

  /// @returns the runs of agent `name` of `owner` that are not terminal, as
  ///          (execution id, root id) pairs in id order.
  caf::expected<std::vector<std::pair<std::string, std::string>>>
  agent_runs(const std::string& owner, const std::string& name) const;

  /// @returns the events of compact snapshot `s` (committed: `first_seq` set)
  ///          as the log holds them now, in seq order: at most `s.events`,
  ///          all within its reserved range. For the store writer, after the
  ///          commit (its subscribers see them like the batch's own events).
  caf::expected<std::vector<event_record>> subtree_events(const subtree_stop& s) const;

  /// @returns the compact snapshots stored for tree `root_id` (not yet
  ///          materialised), by target id.
  caf::expected<std::vector<subtree_stop>> subtree_stops(const std::string& root_id) const;

  /// @returns the lease of tree `root_id` (zeros when it never had one).
  caf::expected<tree_lease> lease(const std::string& root_id) const;

  /// @returns how many executions are stored with each status, indexed by
  ///          `execution_status` (covered executions of a compact snapshot
  ///          under their stored status): six counters of an indexed home,
  ///          O(1); a home not migrated yet is counted record by record.
  ///          Thread-safe.
  caf::expected<std::array<uint64_t, 6>> status_counts() const;

  /// @returns the highest seq in the event log (0 when empty).
  caf::expected<uint64_t> last_seq() const;

  /// @returns the seq of the last event in the log of tree `root_id` (0: no
  ///          event), or an LMDB error. Thread-safe.
  caf::expected<uint64_t> tree_last_seq(const std::string& root_id) const;

  /// @returns the stored schema version: "4", or "1", "1>2", "2", "2>3",
  ///          "2>4", "3" or "3>4" for a home of an earlier release not
  ///          (fully) migrated yet.
  caf::expected<std::string> schema() const;

  /// True until this process has seen the home at schema 4 (set on open for
  /// a home of an earlier schema, cleared by `migrate`).
  bool needs_migration() const { return needs_migration_; }

  // -- writes (one thread at a time) ---------------------------------------------

  /// Commits `batch` in one durable transaction, assigning event seqs
  /// (strictly increasing per store, across processes) into `batch.events`.
  /// Holds the writers' lock for the transaction (waiting for it up to
  /// `write_wait`, polling with a back-off of 1 to 20 ms) and releases it
  /// right after the commit or abort. Grows the map and retries when it is full.
  /// @returns nothing, or (nothing of the batch is stored) `store_busy` when
  ///          another holder kept the writers' lock for `write_wait`,
  ///          `io_error` when the lock cannot be taken for another reason,
  ///          `store_error` when LMDB failed (the transaction was aborted).
  /// Threading: one thread at a time per store (in canopy, the store writer
  /// actor); blocks that thread for at most `write_wait` plus the commit.
  caf::error commit(write_batch& batch);

  /// Materialises every compact snapshot of tree `root_id` (see the top of
  /// this header) in one write transaction: afterwards the store holds the
  /// per-node records and events, and every read returns the same as before.
  /// The transaction is as large as the stopped subtree (measured:
  /// runtime/docs/benchmarks.md#design-measurements) and holds the writers'
  /// lock throughout: `give_way`,
  /// when set, is asked before each covered execution it walks, and when it
  /// answers true (another write waits) the transaction is rolled back at
  /// once.
  /// @returns `done` (also when there is none), `gave_way` (nothing
  ///          changed), or the errors of `commit`.
  /// Threading: as `commit`; `give_way` is called on the calling thread.
  caf::expected<materialize_outcome> materialize(const std::string& root_id,
                                                 const std::function<bool()>& give_way = {});

  /// Migrates a home of an earlier schema to schema 4 (see the top of this
  /// header) when `needs_migration()`: schema-1 records are rewritten, then
  /// the status index, its counts and the interrupted roots are built (a
  /// schema-3 home: the interrupted roots). `commit` and `materialize` call
  /// it before their first write. Each transaction takes the writers' lock
  /// like `commit`.
  /// @returns nothing (also when another process migrated it meanwhile), or
  ///          the errors of `commit`; a failed migration resumes on the next call.
  /// Threading: as `commit`.
  caf::error migrate();

  /// Current map size in bytes.
  size_t map_size() const;

  /// Gives back the memory LMDB keeps for writing: every dirty page of the
  /// largest transaction so far stays allocated in the environment until it
  /// is closed (measured: runtime/docs/benchmarks.md#design-measurements). The
  /// environment is closed and opened again, with no transaction of this
  /// process in flight (reads and writes wait meanwhile, a few ms); its map
  /// goes too, so the file pages the process had mapped no longer count in
  /// its RSS (they stay in the page cache). The store writer calls it once
  /// idle after a materialisation or a commit of 1,024 records or more.
  /// @returns nothing, or `store_error` when it cannot be opened again (the
  ///          store is then unusable: every later call fails).
  /// Threading: any thread but inside a read or write of this store.
  caf::error release_write_cache();

  /// Unmaps the store's file pages from this process: LMDB's writer reads
  /// every page it changes through its map, so after a burst of writes the
  /// process maps most of the file
  /// (measured: runtime/docs/benchmarks.md#design-measurements). The
  /// pages stay in the kernel's page cache; readers and the writer fault back
  /// in (from memory) the ones they touch again. Cheap (one `madvise`, no
  /// wait for other threads; /proc/self/maps is read once per map size to
  /// find the map): the store writer calls it once the process's
  /// resident file pages grew by 2 MiB since the last call (after every
  /// 8,192 records it commits when `/proc/self/statm` cannot be read), and
  /// after each idle materialisation (actors/store_writer.cpp).
  /// @returns nothing, or `store_error` (the store stays usable).
  /// Threading: any thread but inside a read or write of this store.
  caf::error drop_mapped_pages();

  /// @returns how many times `drop_mapped_pages` succeeded. Threading: any thread.
  uint64_t mapped_page_drops() const noexcept {
    return drops_.load(std::memory_order_relaxed);
  }

  /// @returns how many times `release_write_cache` succeeded (metrics,
  /// tests). Threading: any thread.
  uint64_t write_cache_releases() const noexcept {
    return releases_.load(std::memory_order_relaxed);
  }

  /// Calls `f` with the duration in seconds of every successful `commit`
  /// (for metrics). Set it before the first commit; `f` runs on the
  /// committing thread.
  void on_commit(std::function<void(double seconds)> f) { on_commit_ = std::move(f); }

private:
  /// One attempt at `commit` (store_commit_txn.hpp): reads the handles below.
  friend struct store_detail::commit_txn;

  store() = default;
  template <class F>
  caf::error read(F&& f) const;
  /// Reads and decodes one record; `not_found` with `missing` when absent.
  template <class T, class Decode>
  caf::expected<T> get_record(unsigned dbi, const std::string& key, const std::string& missing,
                              Decode decode) const;
  /// Reads records of a sequence log (`prefix` + 8-byte seq keys).
  template <class T, class Decode>
  caf::expected<std::vector<T>> read_log(unsigned dbi, const std::string& prefix, uint64_t after,
                                         size_t limit, Decode decode) const;
  caf::error grow();
  /// Doubles the map once its used pages pass three quarters of it, so that
  /// a large commit seldom fills the map and has to run a second time.
  caf::error grow_ahead();
  /// Creates and opens `env_` on `home_` with the map size `map_bytes` (a
  /// larger existing map wins). @returns an LMDB code.
  int open_env(size_t map_bytes);
  /// The error of every call once `release_write_cache` could not open the
  /// environment again.
  caf::error unusable() const;
  /// Runs `f(txn) -> LMDB code` in one write transaction under the writers'
  /// lock, committing when it returns 0; adopts a map grown by another
  /// process, grows the map and runs `f` again on MDB_MAP_FULL (so `f` must
  /// start from scratch each time). `what` names the write in errors.
  /// @returns nothing, `store_busy`/`io_error` from the writers' lock, or
  ///          `store_error`. Every write transaction of the store runs here.
  caf::error write_once(const std::function<int(MDB_txn*)>& f, const char* what);
  /// Opens every named database in one transaction: a read-only one unless
  /// `create`. @returns an LMDB code: MDB_NOTFOUND when, read-only, a
  /// database or the schema is missing; -1 with `bad_schema` set when the
  /// stored schema differs.
  int open_databases(bool create, std::string& bad_schema);
  /// The named databases (not `subtrees`) and their handle members.
  std::vector<std::pair<const char*, unsigned*>> named_databases();
  /// Opens the databases of a reopened environment and checks that each
  /// has the handle it had. @returns an LMDB code (MDB_BAD_DBI: one moved).
  int check_databases();
  /// Takes the writers' lock, waiting up to `write_wait_`.
  /// @returns nothing, `store_busy` after the wait, or `io_error`.
  caf::error lock_writers();
  /// Releases the writers' lock taken by `lock_writers`.
  void unlock_writers();

  std::string home_;
  MDB_env* env_ = nullptr;
  /// The open writers' lock file (O_CLOEXEC: no subprocess inherits it).
  int lock_fd_ = -1;
  std::chrono::milliseconds write_wait_{5000};
  unsigned meta_ = 0, executions_ = 0, steps_ = 0, children_ = 0, graphs_ = 0, events_ = 0,
           live_ = 0, stops_ = 0, pending_ = 0, counters_ = 0, registry_ = 0, agents_ = 0,
           history_ = 0, agent_runs_ = 0;
  /// The `by_status` database, once this process opened or created it, and
  /// whether the home had the whole status index then (schema 3 or 4: the
  /// index may be read).
  unsigned by_status_ = 0;
  std::atomic<bool> has_by_status_{false};
  std::atomic<bool> indexed_{false};
  /// Opens (creating when absent) `by_status` in this process.
  caf::error open_status_index();
  /// Rewrites a schema-1 home's text records; the schema becomes "2>4".
  caf::error rewrite_text_records();
  /// One step of a resumable build: given `from` (the key the last step
  /// stopped before, "" at first), does its bounded share in `txn` and sets
  /// `next` ("": the build is done). @returns an LMDB code.
  using chunk_step = std::function<int(MDB_txn*, const std::string& from, std::string& next)>;
  /// Runs `step` in write transactions of its own while the schema reads
  /// `marker`, keeping `from` under `from_key` in `meta` between them (a
  /// crash or another process carries on from there); the last one sets
  /// the schema to this release's. `what` names it in errors.
  caf::error build_in_chunks(const char* marker, const std::string& from_key, const char* what,
                             const chunk_step& step);
  /// Builds the status index, its counts and the interrupted roots of a
  /// home at schema "2>4" from where the last run left it, in bounded
  /// transactions; the schema becomes "4" with the last
  /// (store_migration.cpp).
  caf::error build_status_index();
  /// Lists the interrupted roots of a home at schema "3>4" (its status
  /// index is whole) from where the last run left it, walking its stopped
  /// roots in bounded transactions; the schema becomes "4" with the last.
  caf::error build_interrupted_roots();
  /// `list` over the status index (store_list.cpp); `f` needs it.
  caf::error list_indexed(MDB_txn* txn, const execution_filter& f,
                          std::vector<execution_record>& out) const;
  /// The `subtrees` database, once it exists (`has_subtrees_`); see
  /// `subtree_dbs`.
  mutable unsigned subtrees_ = 0;
  mutable std::atomic<bool> has_subtrees_{false};
  /// Serialises opening `subtrees` (LMDB: mdb_dbi_open from one transaction
  /// at a time, which must end before another opens one).
  mutable std::mutex dbi_mtx_;
  /// The databases of the compact snapshot; tries once more to open
  /// `subtrees` when absent (another process may have created it).
  store_subtree_dbs subtree_dbs() const;
  /// The same handles as they are now, without looking for `subtrees` (the
  /// commit, which may be creating it under `dbi_mtx_`).
  store_subtree_dbs subtree_handles() const;
  /// The events a compact entry stands for, expanded in `txn`; the last
  /// expansion is kept (by root and first seq: it cannot change while the
  /// entry exists, see store_subtree.hpp), so a reader paging through a
  /// large range (SSE, 1,000 at a time) walks the subtree once, not per page.
  std::shared_ptr<const std::vector<event_record>>
  expansion_of(MDB_txn* txn, const store_subtree_dbs& d, const subtree_stop& s) const;
  mutable std::mutex expansion_mtx_;
  mutable std::string expansion_key_;
  mutable std::shared_ptr<const std::vector<event_record>> expansion_;
  std::function<void(double)> on_commit_;
  std::atomic<bool> needs_migration_{false};
  std::atomic<uint64_t> releases_{0};
  std::atomic<uint64_t> drops_{0};
  /// Where this process maps the store's file, found in /proc/self/maps for
  /// a map of `map_ranges_size_` bytes: read again once the map was resized
  /// or the environment opened again (`open_env` clears it).
  std::mutex map_ranges_mtx_;
  size_t map_ranges_size_ = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> map_ranges_;
  /// Readers hold it shared; growing the map holds it exclusively, since LMDB
  /// allows mdb_env_set_mapsize only while this process has no transaction.
  mutable std::shared_mutex resize_mtx_;
};

/// Generates a new execution id: 26 characters, time-ordered (ULID-like,
/// lowercase Crockford base32). Thread-safe.
std::string make_execution_id();

/// The creation time in an id of `make_execution_id` (ms since the epoch).
/// @returns it, or -1 when `id` is not such an id. Thread-safe.
int64_t execution_id_ms(std::string_view id);

} // namespace canopy::core
