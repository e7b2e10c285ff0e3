#include "actors/store_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <deque>
#include <map>
#include <unordered_map>

#include <fcntl.h>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/messages.hpp"
#include "actors/process/subprocess.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

using clock_type = std::chrono::steady_clock;

/// A materialisation gives way to any message that arrives while it runs
/// (its transaction is rolled back: a write waits a few microseconds, not
/// the seconds a stopped tree of 100,000 executions takes). Each time it gave
/// way to a write, the quiet it waits for doubles, up to this: a store that
/// is written to every second or two does not redo the work over and over.
/// (Giving way to another message, a subscription say, costs no wait.)
constexpr auto max_idle_wait = std::chrono::milliseconds{32000};

/// Writes that arrived while a commit ran share one transaction, up to about
/// this many records (`write_batch::weight`). LMDB keeps every dirty page of
/// its largest transaction allocated until the environment closes, so an
/// unbounded group would hold its size in memory for good; a larger group
/// holds more heap per starting execution, with no gain in step throughput
/// (measured: runtime/docs/benchmarks.md#design-measurements).
/// Smaller groups cost more commits. A single write is never split.
constexpr size_t group_weight = 4096;

/// A commit of at least this many records leaves enough of LMDB's dirty pages
/// allocated (about a page per few records) for the writer to hand them back
/// once idle (`store::release_write_cache`).
constexpr size_t release_weight = 1024;

/// The writer unmaps the store's file pages (`store::drop_mapped_pages`)
/// once the process's resident file pages grew by this much since the last
/// time: LMDB reads every page it changes through its map, and the kernel
/// maps up to 16 neighbouring pages with each fault, so a burst of writes
/// would otherwise leave most of the file counted in the process's RSS until
/// the writer is idle. Each drop costs the next commits faults on the pages
/// they touch again. A growth of resident pages, not a count of records,
/// decides: a count of records does not say how much a commit mapped
/// (measured: runtime/docs/benchmarks.md#design-measurements).
constexpr long drop_pages_growth = 2L << 20;

/// Without a readable `/proc/self/statm`, the writer unmaps them after this
/// many records committed instead.
constexpr size_t drop_pages_weight = 8192;

/// The process's resident file-backed bytes (`/proc/self/statm`'s third
/// field: the store's mapped pages, and the code and data of the program
/// and its libraries), or -1 when it cannot be read. One `pread`: a few
/// microseconds.
long resident_file_bytes(int statm_fd) {
  if (statm_fd < 0)
    return -1;
  char buf[160];
  auto n = ::pread(statm_fd, buf, sizeof buf - 1, 0);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  long size = 0, resident = 0, shared = 0;
  if (std::sscanf(buf, "%ld %ld %ld", &size, &resident, &shared) != 3)
    return -1;
  static const long page = ::sysconf(_SC_PAGESIZE);
  return shared * page;
}

/// Writes committed in one transaction, and who waits for it. The writes
/// wait in a deque (one node each), not nested in one batch: a vector of
/// thousands of batches would double its buffer, and copy every batch, as it
/// grows while the writer is behind.
struct write_group {
  std::deque<write_batch> writes;
  std::vector<commit_waiter> waiting;
  size_t weight = 0;
};

struct store_writer_state {
  std::shared_ptr<store> db;
  std::vector<write_group> pending; ///< in arrival order
  bool flush_scheduled = false;
  std::vector<caf::actor> subscribers;
  store_writer_options opts;
  /// Trees with a compact snapshot this writer committed and has not yet
  /// materialised, and when (the first such commit); `idle_armed` while an
  /// `idle_atom` is on its way.
  std::map<std::string, clock_type::time_point> compact_roots;
  /// A large group was committed since LMDB's write cache was last handed
  /// back (`release_write_cache`): hand it back once idle.
  bool cache_to_release = false;
  /// Records committed since the file pages were last unmapped.
  size_t mapped_weight = 0;
  /// `/proc/self/statm`, open for the writer's life (-1: unreadable), and
  /// the process's resident file bytes right after the last unmapping.
  int statm_fd = -1;
  long file_bytes_after_drop = -1;
  bool idle_armed = false;
  /// The quiet a materialisation waits for: `opts.idle_delay`, doubled each
  /// time one gave way to a write (up to `max_idle_wait`).
  clock_type::duration idle_wait{};
  /// The last materialisation gave way, and no write has come since.
  bool gave_way = false;
  clock_type::time_point last_write;
  /// The epoch of every tree this process owns (see store_writer.hpp), and
  /// this process as an owner.
  std::unordered_map<std::string, uint64_t> held;
  tree_lease self;
  store_writer_state();
  ~store_writer_state();
  store_writer_state(const store_writer_state&) = delete;
  store_writer_state& operator=(const store_writer_state&) = delete;
  static const char* name;
};

store_writer_state::store_writer_state()
  : statm_fd(::open("/proc/self/statm", O_RDONLY | O_CLOEXEC)),
    file_bytes_after_drop(resident_file_bytes(statm_fd)) {
  self.pid = ::getpid();
  self.start = process_start_time(::getpid());
}

store_writer_state::~store_writer_state() {
  if (statm_fd >= 0)
    ::close(statm_fd);
}

const char* store_writer_state::name = "store_writer";

using writer_pointer = store_writer_actor::stateful_pointer<store_writer_state>;

/// Unmaps the store's file pages now (`store::drop_mapped_pages`) and starts
/// counting the growth again.
void drop_pages_now(store_writer_state& st) {
  st.mapped_weight = 0;
  (void) st.db->drop_mapped_pages(); // a failure leaves the pages mapped, nothing else
  st.file_bytes_after_drop = resident_file_bytes(st.statm_fd);
}

/// Asks for an `idle_atom` after `opts.idle_delay` while compact snapshots or a
/// write cache to hand back wait.
void arm_idle(writer_pointer self) {
  auto& st = self->state;
  if (st.idle_armed || (st.compact_roots.empty() && !st.cache_to_release))
    return;
  st.idle_armed = true;
  self->delayed_send(self, st.opts.idle_delay, idle_atom::value);
}

/// Idle-time work: once no write came for `idle_wait`, materialises the
/// compact snapshots of one tree, the oldest (so `live()` and recovery no
/// longer walk them), giving way to any message that arrives meanwhile, then
/// waits again for the next; once none is left, hands back LMDB's write
/// cache if a large transaction ran since the last time. Without that quiet,
/// a tree committed `overdue_after` ago is materialised all the same,
/// giving way only after `overdue_slice` of work.
void on_idle(writer_pointer self) {
  auto& st = self->state;
  st.idle_armed = false;
  auto now = clock_type::now();
  bool quiet = now - st.last_write >= st.idle_wait;
  auto oldest = std::min_element(st.compact_roots.begin(), st.compact_roots.end(),
                                 [](auto& a, auto& b) { return a.second < b.second; });
  bool overdue = oldest != st.compact_roots.end()
                 && now - oldest->second >= st.opts.overdue_after;
  if (quiet || overdue) {
    if (oldest != st.compact_roots.end()) {
      auto root = oldest->first;
      auto slice = quiet ? clock_type::duration::zero()
                         : clock_type::duration{st.opts.overdue_slice};
      auto give_way = [self, slice, began = clock_type::now()] {
        return !self->mailbox().empty() && clock_type::now() - began >= slice;
      };
      auto done = st.db->materialize(root, give_way);
      st.gave_way = quiet && done && *done == materialize_outcome::gave_way;
      if (done && *done == materialize_outcome::done) {
        st.compact_roots.erase(root);
        st.idle_wait = st.opts.idle_delay;
      }
      // Given way, the snapshot stays compact (every reader resolves it)
      // until the next quiet: longer if it was a write that came.
      // A failure (a busy store) leaves it compact too: try again later.
      // Committed or rolled back, it was one transaction as large as the
      // subtree (or the part it reached): LMDB keeps its dirty pages, and
      // every page it read or changed is mapped
      // (measured: runtime/docs/benchmarks.md#design-measurements).
      st.cache_to_release = true;
      drop_pages_now(st);
    }
    if (quiet && st.cache_to_release && st.compact_roots.empty()) {
      // LMDB would keep the dirty pages of its largest transaction allocated
      // for good. A failure here makes every later call of the store report it.
      st.cache_to_release = false;
      (void) st.db->release_write_cache();
    }
  }
  arm_idle(self);
}

/// Unmaps the store's file pages once the resident file bytes grew by
/// `drop_pages_growth` since the last time (or, without a readable statm,
/// once `drop_pages_weight` records were committed).
void drop_pages_if_grown(store_writer_state& st, size_t committed) {
  st.mapped_weight += committed;
  auto now = resident_file_bytes(st.statm_fd);
  if (now >= 0 && st.file_bytes_after_drop >= 0
        ? now - st.file_bytes_after_drop >= drop_pages_growth
        : st.mapped_weight >= drop_pages_weight)
    drop_pages_now(st);
}

/// Gives write `b`'s lease claim the epoch this process holds for its tree
/// (none yet: 0, one acquired earlier in the same transaction), or this
/// process as the owner when it acquires.
void stamp_claim(store_writer_state& st, write_batch& b) {
  auto& c = b.lease;
  if (c.root.empty())
    return;
  if (c.acquire) {
    if (c.owner.pid == 0)
      c.owner = st.self;
    return;
  }
  auto i = st.held.find(c.root);
  c.epoch = i == st.held.end() ? 0 : i->second;
}

/// Keeps or forgets the epoch of write `b`'s tree after its commit
/// (`err`: the commit failed). @returns the answer to its writer.
caf::error settle_claim(writer_pointer self, write_batch& b, const caf::error& err) {
  auto& st = self->state;
  auto& c = b.lease;
  if (err) {
    if (!c.root.empty())
      st.held.erase(c.root);
    return err;
  }
  if (c.outcome == lease_outcome::fenced) {
    st.held.erase(c.root);
    if (st.opts.on_fenced)
      st.opts.on_fenced(c.root);
    return make_error(persistence_errc::fenced,
                      "execution " + c.root + " was taken over by another process");
  }
  if (c.last)
    st.held.erase(c.root);
  else if (c.outcome == lease_outcome::acquired)
    st.held[c.root] = c.epoch;
  return caf::none;
}

/// Commits one group in one transaction and answers its writers.
void commit_group(writer_pointer self, write_group group) {
  auto& st = self->state;
  write_batch batch;
  auto n = group.writes.size();
  if (n == 1) {
    batch = std::move(group.writes.front());
  } else {
    batch.nested.reserve(n);
    for (auto& w : group.writes)
      batch.nested.push_back(std::move(w));
  }
  group.writes.clear();
  // Write i of the group, which answers promise i (the commit may append a
  // batch of its own to `nested`, after them: indices stay valid).
  auto part = [&](size_t i) -> write_batch& { return n == 1 ? batch : batch.nested[i]; };
  for (size_t i = 0; i < n; ++i)
    stamp_claim(st, part(i));
  auto err = st.db->commit(batch);
  for (size_t i = 0; i < n; ++i)
    group.waiting[i].answer(settle_claim(self, part(i), err));
  std::vector<subtree_stop> compact;
  if (!err)
    batch.collect_subtree_stops(compact);
  for (auto& s : compact)
    st.compact_roots.emplace(s.root_id, clock_type::now()); // the first commit's time stays
  if (!err) {
    if (batch.weight() >= release_weight)
      st.cache_to_release = true;
    drop_pages_if_grown(st, batch.weight());
  }
  arm_idle(self);
  if (!err && !st.subscribers.empty()) {
    auto events = std::make_shared<std::vector<event_record>>();
    batch.take_events(*events);
    // The events of compact snapshots are not in the batch: read them back
    // (a plain read after the commit) and merge them in seq order.
    if (!compact.empty()) {
      for (auto& s : compact) {
        auto evs = st.db->subtree_events(s);
        if (!evs)
          continue; // the commit stands; its readers still see them in the log
        for (auto& e : *evs)
          events->push_back(std::move(e));
      }
      std::stable_sort(events->begin(), events->end(),
                       [](const event_record& a, const event_record& b) { return a.seq < b.seq; });
    }
    if (!events->empty()) {
      event_list shared = std::move(events);
      for (auto& s : st.subscribers)
        caf::anon_send(s, events_atom::value, shared); // subscribers are untyped
    }
  }
}

/// Commits every buffered write, group by group in arrival order.
void flush(writer_pointer self) {
  auto& st = self->state;
  st.flush_scheduled = false;
  auto groups = std::move(st.pending);
  st.pending.clear();
  for (auto& g : groups)
    commit_group(self, std::move(g));
}

/// Adds `batch` to the group that commits next (a new group once the last
/// is full) and makes sure a flush comes after it.
void enqueue_write(writer_pointer self, write_batch batch, commit_waiter waiter) {
  auto& st = self->state;
  st.last_write = clock_type::now();
  if (st.gave_way) {
    st.gave_way = false;
    st.idle_wait = std::min<clock_type::duration>(st.idle_wait * 2, max_idle_wait);
  }
  auto weight = batch.weight();
  if (st.pending.empty() || st.pending.back().weight >= group_weight)
    st.pending.emplace_back();
  auto& g = st.pending.back();
  g.writes.push_back(std::move(batch));
  g.waiting.push_back(std::move(waiter));
  g.weight += weight;
  if (!st.flush_scheduled) {
    // The flush message queues behind every write already in the
    // mailbox: all of them join this commit.
    st.flush_scheduled = true;
    self->send(self, flush_atom::value);
  }
}

store_writer_actor::behavior_type store_writer(writer_pointer self,
                           std::shared_ptr<store> db, store_writer_options opts) {
  self->state.db = std::move(db);
  self->state.opts = opts;
  self->state.idle_wait = opts.idle_delay;
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const caf::actor& a) { return a.address() == msg.source; }),
               subs.end());
  });
  return {
    [=](write_atom, write_batch& batch) -> caf::result<bool> {
      enqueue_write(self, std::move(batch), commit_waiter{self->make_response_promise(), {}});
      return caf::delegated<bool>{};
    },
    [=](write_atom, write_batch& batch, commit_ticket& ticket) {
      enqueue_write(self, std::move(batch), commit_waiter{{}, std::move(ticket)});
    },
    [=](flush_atom) { flush(self); },
    [=](idle_atom) { on_idle(self); },
    [=](subscribe_atom, caf::actor& who) -> caf::result<uint64_t> {
      self->monitor(who);
      self->state.subscribers.push_back(std::move(who));
      // Everything up to this seq is committed; later events are sent live.
      auto last = self->state.db->last_seq();
      if (!last)
        return last.error();
      return *last;
    },
    // Answered after every event already committed was sent to the
    // subscribers (a commit sends its events in the handler that commits).
    [=](sync_atom) { return true; },
    [=](unsubscribe_atom, const caf::actor& who) {
      auto& subs = self->state.subscribers;
      subs.erase(std::remove(subs.begin(), subs.end(), who), subs.end());
      // Answered after every event already committed was sent to `who`.
      return true;
    },
  };
}

} // namespace

caf::error commit_and_wait(const store_writer_actor& writer, std::optional<millis> bound,
                           write_batch batch) {
  return tell_and_await(writer, bound, write_atom::value, std::move(batch));
}

store_writer_actor spawn_store_writer(caf::actor_system& sys, std::shared_ptr<store> db,
                              store_writer_options opts) {
  return sys.spawn<caf::detached>(store_writer, std::move(db), opts);
}

} // namespace canopy::core
