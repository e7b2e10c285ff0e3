#include "persistence/store.hpp"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <unordered_set>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "persistence/records_into.hpp"
#include "persistence/store_lmdb.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy {

using namespace store_lmdb;

namespace {

/// `execution_filter::created_after`: how much older than the bound an id's
/// time may be before the walk stops (an id's time precedes its record's
/// `created_at` by the few instructions between them).
constexpr int64_t created_after_margin_ms = 60'000;

/// A read-only transaction that aborts when it goes out of scope.
struct read_txn {
  MDB_txn* txn = nullptr;
  ~read_txn() {
    if (txn)
      mdb_txn_abort(txn);
  }
};

int mkdirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return errno;
    }
    if (i < path.size())
      cur += path[i];
  }
  return 0;
}

/// Execution `id` as stored in `txn`, or nothing.
std::optional<execution_record> load_execution(MDB_txn* txn, unsigned executions,
                                               const std::string& id) {
  MDB_val k = as_val(id), v;
  if (mdb_get(txn, executions, &k, &v) != 0)
    return std::nullopt;
  auto rec = decode_execution(as_view(v));
  if (!rec)
    return std::nullopt;
  return std::move(*rec);
}

/// The `stop.requested` / `stop.handled` event of request `r` on `target`.
event_record stop_event(const execution_record& target, const stop_record& r, const char* type,
                        int64_t time) {
  if (r.handled)
    return make_event(target, type, time, {}, to_string(target.status), target.reason,
                      {{"stop_id", r.id}});
  return make_event(target, type, time, {}, {}, {},
                    {{"stop_id", r.id}, {"mode", r.force ? "force" : "graceful"}, {"who", r.who}});
}

/// The one rule that answers stop requests (SPEC §4.1, §4.4, §13 rule 10): a
/// request whose target is terminal, or gone, is `handled` in the same
/// transaction that made it so, with result `stopped` when the target is
/// `stopped` and `no_execution` otherwise. So no request stays pending for
/// an execution that has ended, whatever raced with it. Only the requests of
/// `candidates` (executions this transaction ended, targets of new or
/// re-checked requests, every pending target when the commit stored a
/// compact snapshot) are looked at; the scan of the pending index reads keys
/// only. A target is read resolved: one a compact snapshot covers is
/// `stopped`. Appends the `stop.handled` events to `out`.
/// @returns an LMDB code.
int settle_stops(MDB_txn* txn, const store_subtree::dbs& d, unsigned stops, unsigned pending,
                 const std::unordered_set<std::string>& candidates,
                 std::vector<event_record>& out) {
  MDB_stat stat;
  int rc = mdb_stat(txn, pending, &stat);
  if (rc != 0 || stat.ms_entries == 0 || candidates.empty())
    return rc;
  store_subtree::resolver resolve{txn, d};
  MDB_cursor* cur;
  if ((rc = mdb_cursor_open(txn, pending, &cur)) != 0)
    return rc;
  MDB_val k, v;
  int r = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
  while (r == 0) {
    auto key = as_string(k);
    auto sep = key.find('\0');
    if (sep == std::string::npos || candidates.count(key.substr(0, sep)) == 0) {
      r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      continue;
    }
    auto target = load_execution(txn, d.executions, key.substr(0, sep));
    // A target covered by a compact snapshot is `stopped`.
    if (target)
      resolve.resolve(*target);
    if (target && !is_terminal(target->status)) {
      r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      continue;
    }
    auto sid = key.substr(sep + 1);
    MDB_val sk = as_val(sid), sv;
    if (mdb_get(txn, stops, &sk, &sv) == 0) {
      if (auto req = decode_stop(as_view(sv))) {
        req->handled = true;
        req->handled_at = now_ms();
        req->result = target && target->status == execution_status::stopped ? "stopped"
                                                                            : "no_execution";
        auto text = encode(*req);
        MDB_val nv = as_val(text);
        if ((rc = mdb_put(txn, stops, &sk, &nv, 0)) != 0)
          break;
        if (target)
          out.push_back(stop_event(*target, *req, "stop.handled", req->handled_at));
      }
    }
    if ((rc = mdb_cursor_del(cur, 0)) != 0)
      break;
    r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
  }
  mdb_cursor_close(cur);
  return rc;
}

} // namespace

void write_batch::append(write_batch&& other) {
  if (other.empty())
    return;
  if (empty()) {
    *this = std::move(other);
    return;
  }
  nested.push_back(std::move(other));
}

namespace {

size_t event_count(const write_batch& b) {
  auto n = b.events.size();
  for (auto& x : b.nested)
    n += event_count(x);
  return n;
}

void move_events(write_batch& b, std::vector<event_record>& out) {
  for (auto& e : b.events)
    out.push_back(std::move(e));
  b.events.clear();
  for (auto& x : b.nested)
    move_events(x, out);
}

} // namespace

void write_batch::take_events(std::vector<event_record>& out) {
  // One allocation of the exact size: a commit's events can be many, and
  // a doubling vector would hold up to twice their size while subscribers
  // read them.
  if (out.empty() && nested.empty()) {
    out = std::move(events);
    events.clear();
    return;
  }
  out.reserve(out.size() + event_count(*this));
  move_events(*this, out);
}

size_t write_batch::weight() const {
  size_t n = executions.size() + steps.size() + graphs.size() + events.size()
             + deleted_executions.size() + deleted_trees.size() + stops.size()
             + settle_stops.size() + counters.size() + registered.size() + agents.size()
             + history.size() + subtree_stops.size();
  for (auto& g : encoded_graphs)
    n += 1 + g.second.size() / 512;
  for (auto& x : nested)
    n += x.weight();
  return n;
}

void write_batch::collect_subtree_stops(std::vector<subtree_stop>& out) const {
  out.insert(out.end(), subtree_stops.begin(), subtree_stops.end());
  for (auto& n : nested)
    n.collect_subtree_stops(out);
}

// -- opening ------------------------------------------------------------------------

store::~store() {
  if (env_)
    mdb_env_close(env_);
  if (lock_fd_ >= 0)
    ::close(lock_fd_);
}

std::string store::write_lock_path(const std::string& home) {
  return home + "/write.lock";
}

std::vector<std::pair<const char*, unsigned*>> store::named_databases() {
  return {{"meta", &meta_},         {"executions", &executions_},
          {"steps", &steps_},       {"children", &children_},
          {"graphs", &graphs_},     {"events", &events_},
          {"live", &live_},         {"stops", &stops_},
          {"pending", &pending_},   {"counters", &counters_},
          {"registry", &registry_}, {"agents", &agents_},
          {"history", &history_},   {"agent_runs", &agent_runs_}};
}

int store::check_databases() {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn);
  if (rc != 0)
    return rc;
  auto same = [&](const char* name, unsigned expected) {
    MDB_dbi dbi;
    if (rc == 0 && (rc = mdb_dbi_open(txn, name, 0, &dbi)) == 0 && dbi != expected)
      rc = MDB_BAD_DBI;
  };
  for (auto& db : named_databases())
    same(db.first, *db.second);
  if (has_subtrees_)
    same("subtrees", subtrees_);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return rc;
  }
  // Committing (even a read-only transaction) keeps the database handles.
  return mdb_txn_commit(txn);
}

int store::open_databases(bool create, std::string& bad_schema) {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_, nullptr, create ? 0 : MDB_RDONLY, &txn);
  while (rc == MDB_MAP_RESIZED) {
    // Another process grew the map since we opened: adopt its size.
    mdb_env_set_mapsize(env_, 0);
    rc = mdb_txn_begin(env_, nullptr, create ? 0 : MDB_RDONLY, &txn);
  }
  if (rc != 0)
    return rc;
  for (auto& db : named_databases()) {
    MDB_dbi dbi;
    if ((rc = mdb_dbi_open(txn, db.first, create ? MDB_CREATE : 0, &dbi)) != 0) {
      mdb_txn_abort(txn);
      return rc;
    }
    *db.second = dbi;
  }
  // `subtrees` came with the compact snapshot: a home written before lacks
  // it until a write creates it (see the top of store.hpp).
  {
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn, "subtrees", create ? MDB_CREATE : 0, &dbi);
    if (rc == 0) {
      subtrees_ = dbi;
      has_subtrees_ = true;
    } else if (rc != MDB_NOTFOUND) {
      mdb_txn_abort(txn);
      return rc;
    }
  }
  std::string key = "schema", val = schema_version;
  MDB_val k = as_val(key), v;
  if (mdb_get(txn, meta_, &k, &v) == MDB_NOTFOUND) {
    if (!create) {
      mdb_txn_abort(txn);
      return MDB_NOTFOUND;
    }
    v = as_val(val);
    if ((rc = mdb_put(txn, meta_, &k, &v, 0)) != 0) {
      mdb_txn_abort(txn);
      return rc;
    }
  } else if (auto found = as_string(v); found == text_schema || found == migrating_schema) {
    // Readable as it is (the decoders read both encodings); the first write
    // migrates it (see `migrate`).
    needs_migration_ = true;
  } else if (found != schema_version) {
    bad_schema = found;
    mdb_txn_abort(txn);
    return -1;
  }
  // Committing (even a read-only transaction) keeps the database handles.
  return mdb_txn_commit(txn);
}

int store::open_env(size_t map_bytes) {
  int rc = mdb_env_create(&env_);
  if (rc != 0) {
    env_ = nullptr;
    return rc;
  }
  // 15 named databases today; headroom for a few more without a new binary
  // refusing to open a home another version created.
  mdb_env_set_maxdbs(env_, 32);
  mdb_env_set_maxreaders(env_, 510);
  // The map size is persisted by LMDB; a larger existing map wins.
  mdb_env_set_mapsize(env_, map_bytes);
  rc = mdb_env_open(env_, home_.c_str(), MDB_NOTLS, 0644);
  if (rc != 0) {
    mdb_env_close(env_);
    env_ = nullptr;
  }
  return rc;
}

caf::error store::unusable() const {
  return make_error(persistence_errc::store_error,
                    "store in '" + home_ + "' could not be opened again");
}

caf::error store::release_write_cache() {
  // The order of `commit` (which may hold dbi_mtx_ while it writes).
  std::lock_guard<std::mutex> dbis{dbi_mtx_};
  std::unique_lock<std::shared_mutex> excl{resize_mtx_};
  if (env_ == nullptr)
    return unusable();
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  // Closed before it is opened again: LMDB's locks on its lock file are the
  // process's, so a second handle open at once would lose them with the first.
  mdb_env_close(env_);
  env_ = nullptr;
  // The databases are opened in the same order, so they get the same
  // handles, which readers copy without this lock (`subtree_dbs`): checked,
  // never reassigned.
  int rc = open_env(info.me_mapsize);
  if (rc == 0)
    rc = check_databases();
  if (rc != 0) {
    if (env_ != nullptr) {
      mdb_env_close(env_);
      env_ = nullptr;
    }
    return make_error(persistence_errc::store_error, "store in '" + home_
                                                       + "' could not be opened again: "
                                                       + mdb_strerror(rc));
  }
  releases_.fetch_add(1, std::memory_order_relaxed);
  return caf::none;
}

namespace {

/// The address ranges where this process maps the file open as `fd`
/// (/proc/self/maps; LMDB does not tell where its map is).
std::vector<std::pair<uintptr_t, uintptr_t>> mappings_of(int fd) {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  struct stat sb;
  if (::fstat(fd, &sb) != 0)
    return out;
  std::ifstream in{"/proc/self/maps"};
  std::string line;
  while (std::getline(in, line)) {
    // start-end perms offset major:minor inode path
    unsigned long long lo = 0, hi = 0, off = 0, ino = 0;
    unsigned maj = 0, min = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu", &lo, &hi, perms, &off, &maj,
                    &min, &ino)
          == 7
        && ino == sb.st_ino && makedev(maj, min) == sb.st_dev)
      out.emplace_back(static_cast<uintptr_t>(lo), static_cast<uintptr_t>(hi));
  }
  return out;
}

} // namespace

caf::error store::drop_mapped_pages() {
  std::shared_lock<std::shared_mutex> guard{resize_mtx_};
  if (env_ == nullptr)
    return unusable();
  int fd = -1;
  if (mdb_env_get_fd(env_, &fd) != 0)
    return make_error(persistence_errc::store_error, "the store's file is not open");
  // A shared file mapping: the pages stay in the page cache, and whoever
  // touches one again faults it back in with its current contents.
  for (auto [lo, hi] : mappings_of(fd))
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0)
      return make_error(persistence_errc::store_error,
                        std::string{"madvise of the store's map failed: "}
                          + std::strerror(errno));
  drops_.fetch_add(1, std::memory_order_relaxed);
  return caf::none;
}

caf::expected<std::shared_ptr<store>> store::open(const store_options& opts) {
  if (auto rc = mkdirs(opts.home); rc != 0)
    return make_error(persistence_errc::io_error,
                      "cannot create home '" + opts.home + "': " + std::strerror(rc));
  std::shared_ptr<store> s{new store};
  s->home_ = opts.home;
  s->write_wait_ = std::max(opts.write_wait, std::chrono::milliseconds{0});
  auto lock_path = write_lock_path(opts.home);
  s->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (s->lock_fd_ < 0)
    return make_error(persistence_errc::io_error, "cannot open the writers' lock '" + lock_path
                                                    + "': " + std::strerror(errno));
  int rc = s->open_env(opts.initial_map_bytes);
  if (rc != 0)
    return make_error(persistence_errc::store_error,
                      "cannot open store in '" + opts.home + "': " + mdb_strerror(rc));
  // An existing home needs no write: opening it must work while another
  // process holds the writers' lock (SPEC §13 rule 16).
  std::string bad_schema;
  rc = s->open_databases(false, bad_schema);
  if (rc == MDB_NOTFOUND) {
    if (auto err = s->lock_writers())
      return err;
    rc = s->open_databases(true, bad_schema);
    s->unlock_writers();
  }
  if (rc == -1)
    return make_error(persistence_errc::store_error,
                      "store in '" + opts.home + "' has schema " + bad_schema
                        + ", this canopy reads schema " + schema_version);
  if (rc != 0)
    return lmdb_error("opening the databases", rc);
  return s;
}

// -- the writers' lock ---------------------------------------------------------------

namespace {

/// `5 s` or `500 ms`.
std::string describe_wait(std::chrono::milliseconds d) {
  if (d.count() >= 1000 && d.count() % 1000 == 0)
    return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

/// Back-off between tries for a taken writers' lock: short at first (a
/// commit takes a few ms), never long enough to matter against the wait.
constexpr std::chrono::milliseconds first_lock_poll{1};
constexpr std::chrono::milliseconds max_lock_poll{20};

} // namespace

caf::error store::lock_writers() {
  auto deadline = std::chrono::steady_clock::now() + write_wait_;
  auto pause = first_lock_poll;
  for (;;) {
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0)
      return caf::none;
    if (errno == EINTR)
      continue;
    if (errno != EWOULDBLOCK)
      return make_error(persistence_errc::io_error, "cannot lock '" + write_lock_path(home_)
                                                      + "': " + std::strerror(errno));
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return make_error(persistence_errc::store_busy,
                        "the store at " + home_
                          + " is busy: another process has held its write lock for over "
                          + describe_wait(write_wait_));
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause,
                                                                             deadline - now));
    pause = std::min(pause * 2, max_lock_poll);
  }
}

void store::unlock_writers() {
  ::flock(lock_fd_, LOCK_UN);
}

// -- reads ---------------------------------------------------------------------------

store_subtree::dbs store::subtree_dbs() const {
  if (!has_subtrees_) {
    // Another process may have created it since: look once more. Never
    // waits: while this process's writer is creating it, nothing of it is
    // committed yet.
    std::unique_lock<std::mutex> lock{dbi_mtx_, std::try_to_lock};
    if (lock.owns_lock() && !has_subtrees_) {
      std::shared_lock<std::shared_mutex> guard{resize_mtx_};
      MDB_txn* txn = nullptr;
      if (env_ != nullptr && mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn) == 0) {
        MDB_dbi dbi;
        if (mdb_dbi_open(txn, "subtrees", 0, &dbi) != 0) {
          mdb_txn_abort(txn);
        } else if (mdb_txn_commit(txn) == 0) {
          // Committing (even a read-only transaction) keeps the handle.
          subtrees_ = dbi;
          has_subtrees_ = true;
        }
      }
    }
  }
  store_subtree::dbs d;
  d.executions = executions_;
  d.steps = steps_;
  d.children = children_;
  d.events = events_;
  d.live = live_;
  d.agent_runs = agent_runs_;
  d.has_subtrees = has_subtrees_;
  if (d.has_subtrees)
    d.subtrees = subtrees_;
  return d;
}

size_t store::map_size() const {
  std::shared_lock<std::shared_mutex> guard{resize_mtx_};
  if (env_ == nullptr)
    return 0;
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  return info.me_mapsize;
}

template <class F>
caf::error store::read(F&& f) const {
  std::shared_lock<std::shared_mutex> guard{resize_mtx_};
  if (env_ == nullptr)
    return unusable();
  read_txn t;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc == MDB_MAP_RESIZED) {
    // Another process grew the map: adopt its size (needs no open txn here).
    guard.unlock();
    {
      std::unique_lock<std::shared_mutex> excl{resize_mtx_};
      mdb_env_set_mapsize(env_, 0);
    }
    guard.lock();
    rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  }
  if (rc != 0)
    return lmdb_error("mdb_txn_begin (read)", rc);
  return f(t.txn);
}

template <class T, class Decode>
caf::expected<T> store::get_record(unsigned dbi, const std::string& key,
                                   const std::string& missing, Decode decode) const {
  T out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_val k = as_val(key), v;
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc == MDB_NOTFOUND)
      return make_error(persistence_errc::not_found, missing);
    if (rc != 0)
      return lmdb_error("mdb_get", rc);
    auto rec = decode(as_view(v));
    if (!rec)
      return rec.error();
    out = std::move(*rec);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<execution_record> store::execution(const std::string& id) const {
  auto d = subtree_dbs();
  execution_record out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_val k = as_val(id), v;
    int rc = mdb_get(txn, executions_, &k, &v);
    if (rc == MDB_NOTFOUND)
      return make_error(persistence_errc::not_found, "no execution '" + id + "'");
    if (rc != 0)
      return lmdb_error("mdb_get", rc);
    auto rec = decode_execution(as_view(v));
    if (!rec)
      return rec.error();
    out = std::move(*rec);
    // A terminal record is returned as stored without another read.
    if (!is_terminal(out.status) && d.has_subtrees)
      store_subtree::resolver{txn, d}.resolve(out);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

namespace {

/// Decodes every record of `dbi` whose key starts with `prefix`, in key
/// order, into `out`. @returns nothing, or the first decoding error.
template <class T, class Decode>
caf::error decode_prefix(MDB_txn* txn, unsigned dbi, const std::string& prefix, Decode decode,
                         std::vector<T>& out) {
  caf::error bad;
  scan_prefix(txn, dbi, prefix, prefix, [&](const MDB_val&, const MDB_val& v) {
    auto rec = decode(as_view(v));
    if (!rec) {
      bad = rec.error();
      return false;
    }
    out.push_back(std::move(*rec));
    return true;
  });
  return bad;
}

} // namespace

caf::expected<std::vector<step_record>> store::steps(const std::string& id) const {
  auto d = subtree_dbs();
  std::vector<step_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    auto bad = decode_prefix(txn, steps_, id + '\0', decode_step, out);
    if (!bad && d.has_subtrees)
      store_subtree::resolver{txn, d}.resolve_steps(id, out);
    return bad;
  });
  if (err)
    return err;
  return out;
}

namespace {

/// Appends the children of `id` (the children index `dbi`) to `out`.
void append_children(MDB_txn* txn, unsigned dbi, const std::string& id,
                     std::vector<std::string>& out) {
  auto prefix = id + '\0';
  scan_prefix(txn, dbi, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
    out.emplace_back(static_cast<const char*>(k.mv_data) + prefix.size(),
                     k.mv_size - prefix.size());
    return true;
  });
}

/// `id` and every execution below it in the children index `dbi`, parents
/// before their children.
std::vector<std::string> walk_subtree(MDB_txn* txn, unsigned dbi, const std::string& id) {
  std::vector<std::string> ids{id};
  for (size_t i = 0; i < ids.size(); ++i)
    append_children(txn, dbi, ids[i], ids);
  return ids;
}

/// The graph name in a registry key `owner \0 name \0 version`.
std::string_view registry_name(const MDB_val& k, size_t owner_prefix) {
  auto rest = std::string_view{static_cast<const char*>(k.mv_data), k.mv_size}.substr(owner_prefix);
  return rest.substr(0, rest.find('\0'));
}

} // namespace

caf::expected<std::vector<std::string>> store::children(const std::string& id) const {
  std::vector<std::string> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    append_children(txn, children_, id, out);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::set<std::string>> store::subtree_ids(const std::string& id) const {
  std::vector<std::string> ids;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    ids = walk_subtree(txn, children_, id);
    return caf::none;
  });
  if (err)
    return err;
  return std::set<std::string>(ids.begin(), ids.end());
}

caf::expected<stored_graph> store::graph(const std::string& id) const {
  return get_record<stored_graph>(graphs_, id, "no graph for execution '" + id + "'",
                                  decode_graph);
}

caf::expected<std::vector<execution_record>> store::list(const execution_filter& f) const {
  auto d = subtree_dbs();
  std::vector<execution_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    // Roots are never covered (a root target is written as it is).
    std::optional<store_subtree::resolver> resolve;
    if (!f.roots_only && d.has_subtrees)
      resolve.emplace(txn, d);
    MDB_cursor* cur;
    mdb_cursor_open(txn, executions_, &cur);
    MDB_val k, v;
    // Ids are time-ordered: walk backwards for newest first, from the
    // cursor when one is given.
    int rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    if (!f.before.empty()) {
      k = as_val(f.before);
      rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
      rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    }
    for (; rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
      if (f.created_after != 0) {
        // Every older id is older still: past the margin, nothing qualifies.
        auto id_ms = execution_id_ms(as_view(k));
        if (id_ms >= 0 && id_ms + created_after_margin_ms < f.created_after)
          break;
      }
      auto rec = decode_execution(as_view(v));
      if (!rec) {
        mdb_cursor_close(cur);
        return rec.error();
      }
      if (f.roots_only && !rec->parent_id.empty())
        continue;
      if (f.owner && rec->owner != *f.owner)
        continue;
      if (resolve)
        resolve->resolve(*rec);
      if (f.status && rec->status != *f.status)
        continue;
      if (!f.graph.empty() && rec->graph != f.graph)
        continue;
      if (rec->created_at < f.created_after)
        continue;
      out.push_back(std::move(*rec));
      if (f.limit != 0 && out.size() >= f.limit)
        break;
    }
    mdb_cursor_close(cur);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

/// Reads a sequence log (`prefix` + 8-byte seq keys): the records with seq >
/// `after`, in seq order, at most `limit` (0: all), decoded by `decode`.
template <class T, class Decode>
caf::expected<std::vector<T>> store::read_log(unsigned dbi, const std::string& prefix,
                                              uint64_t after, size_t limit,
                                              Decode decode) const {
  std::vector<T> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    caf::error bad;
    scan_prefix(txn, dbi, prefix, prefix + seq_key(after + 1),
                [&](const MDB_val& k, const MDB_val& v) {
                  if (k.mv_size != prefix.size() + 8)
                    return true;
                  auto rec = decode(as_view(v));
                  if (!rec) {
                    bad = rec.error();
                    return false;
                  }
                  out.push_back(std::move(*rec));
                  return limit == 0 || out.size() < limit;
                });
    return bad;
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::vector<event_record>>
store::tree_events(const std::string& root_id, uint64_t after, size_t limit) const {
  std::vector<event_record> out;
  if (after == ~uint64_t{0})
    return out;
  auto d = subtree_dbs();
  auto err = read([&](MDB_txn* txn) -> caf::error {
    auto prefix = root_id + '\0';
    auto full = [&] { return limit != 0 && out.size() >= limit; };
    // Takes one stored entry, expanding a compact one; false once full.
    auto take = [&](event_record&& e) {
      if (auto s = store_subtree::from_compact_entry(e)) {
        auto evs = expansion_of(txn, d, *s);
        auto i = std::upper_bound(evs->begin(), evs->end(), after,
                                  [](uint64_t a, const event_record& x) { return a < x.seq; });
        for (; i != evs->end(); ++i) {
          if (full())
            return false;
          out.push_back(*i);
        }
      } else if (e.seq > after) {
        out.push_back(std::move(e));
      }
      return !full();
    };
    auto start = prefix + seq_key(after + 1);
    caf::error bad;
    // A compact entry before `after + 1` may stand for events after it: its
    // range holds no other entry, so only the one right before can.
    if (after > 0) {
      MDB_cursor* cur;
      if (int rc = mdb_cursor_open(txn, events_, &cur); rc != 0)
        return lmdb_error("mdb_cursor_open", rc);
      MDB_val k = as_val(start), v;
      int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
      rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
      if (rc == 0 && k.mv_size == prefix.size() + 8
          && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
        if (auto e = decode_event(as_view(v)); e && e->type == store_subtree::compact_type)
          if (auto s = store_subtree::from_compact_entry(*e); s && s->first_seq + s->events > after + 1)
            take(std::move(*e));
      }
      mdb_cursor_close(cur);
    }
    if (full())
      return caf::none;
    scan_prefix(txn, events_, prefix, start, [&](const MDB_val& k, const MDB_val& v) {
      if (k.mv_size != prefix.size() + 8)
        return true;
      auto e = decode_event(as_view(v));
      if (!e) {
        bad = e.error();
        return false;
      }
      return take(std::move(*e));
    });
    return bad;
  });
  if (err)
    return err;
  return out;
}

std::shared_ptr<const std::vector<event_record>>
store::expansion_of(MDB_txn* txn, const store_subtree::dbs& d, const subtree_stop& s) const {
  auto key = pair_key(s.root_id, seq_key(s.first_seq));
  {
    std::lock_guard<std::mutex> guard{expansion_mtx_};
    if (expansion_ && expansion_key_ == key)
      return expansion_;
  }
  auto evs = std::make_shared<const std::vector<event_record>>(
    store_subtree::expand(txn, d, s, false).events);
  std::lock_guard<std::mutex> guard{expansion_mtx_};
  expansion_key_ = std::move(key);
  expansion_ = evs;
  return evs;
}

caf::expected<std::vector<event_record>> store::subtree_events(const subtree_stop& s) const {
  if (s.events == 0 || s.first_seq == 0)
    return std::vector<event_record>{};
  auto evs = tree_events(s.root_id, s.first_seq - 1, s.events);
  if (!evs)
    return evs;
  auto end = s.first_seq + s.events;
  evs->erase(std::remove_if(evs->begin(), evs->end(),
                            [&](const event_record& e) { return e.seq >= end; }),
             evs->end());
  return evs;
}

caf::expected<std::vector<subtree_stop>> store::subtree_stops(const std::string& root_id) const {
  std::vector<subtree_stop> out;
  auto d = subtree_dbs();
  if (!d.has_subtrees)
    return out;
  auto err = read([&](MDB_txn* txn) {
    return decode_prefix(txn, d.subtrees, root_id + '\0', decode_subtree_stop, out);
  });
  if (err)
    return err;
  return out;
}

caf::expected<stop_record> store::stop(const std::string& id) const {
  return get_record<stop_record>(stops_, id, "no stop request '" + id + "'", decode_stop);
}

caf::expected<std::vector<stop_record>> store::pending_stops() const {
  std::vector<stop_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    caf::error bad;
    scan_prefix(txn, pending_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
      auto key = as_string(k);
      auto sep = key.find('\0');
      if (sep == std::string::npos)
        return true;
      auto sid = key.substr(sep + 1);
      MDB_val sk = as_val(sid), sv;
      if (mdb_get(txn, stops_, &sk, &sv) != 0)
        return true;
      auto rec = decode_stop(as_view(sv));
      if (!rec) {
        bad = rec.error();
        return false;
      }
      out.push_back(std::move(*rec));
      return true;
    });
    return bad;
  });
  if (err)
    return err;
  std::sort(out.begin(), out.end(),
            [](const stop_record& a, const stop_record& b) { return a.id < b.id; });
  return out;
}

caf::expected<tree_counters> store::counters(const std::string& id) const {
  auto x = get_record<tree_counters>(counters_, id, "", decode_counters);
  if (!x && x.error().category() == persistence_category
      && x.error().code() == static_cast<uint8_t>(persistence_errc::not_found))
    return tree_counters{};
  return x;
}

caf::expected<std::vector<execution_record>> store::live() const {
  auto d = subtree_dbs();
  std::vector<execution_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    caf::error bad;
    // Covered executions keep their `live` entry until materialised.
    store_subtree::resolver resolve{txn, d};
    scan_prefix(txn, live_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
      MDB_val kk = k, ev;
      if (mdb_get(txn, executions_, &kk, &ev) != 0)
        return true;
      auto rec = decode_execution(as_view(ev));
      if (!rec) {
        bad = rec.error();
        return false;
      }
      if (!resolve.resolve(*rec))
        out.push_back(std::move(*rec));
      return true;
    });
    return bad;
  });
  if (err)
    return err;
  return out;
}

namespace {

const std::string seq_meta_key = "seq";

/// Reads the last assigned seq from `meta` (0 when none).
uint64_t read_seq(MDB_txn* txn, unsigned meta) {
  MDB_val k = as_val(seq_meta_key), v;
  if (mdb_get(txn, meta, &k, &v) != 0 || v.mv_size != 8)
    return 0;
  return seq_of(v);
}

} // namespace

namespace {

std::string version_key(int version) {
  std::string out(4, '\0');
  auto v = static_cast<uint32_t>(version);
  for (int i = 3; i >= 0; --i, v >>= 8)
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return out;
}

std::string registry_prefix(const std::string& owner, const std::string& name) {
  return owner + '\0' + name + '\0';
}

/// The newest version stored under `prefix` (0 when none).
int newest_version(MDB_txn* txn, unsigned dbi, const std::string& prefix) {
  int newest = 0;
  scan_prefix(txn, dbi, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
    if (k.mv_size == prefix.size() + 4) {
      auto p = static_cast<const unsigned char*>(k.mv_data) + prefix.size();
      newest = static_cast<int>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16)
                                | (uint32_t{p[2]} << 8) | uint32_t{p[3]});
    }
    return true;
  });
  return newest;
}


/// The newest history seq stored under `prefix` (0 when none), found from
/// the end of the prefix's range: O(log n), whatever the history's length.
uint64_t newest_history_seq(MDB_txn* txn, unsigned dbi, const std::string& prefix) {
  MDB_cursor* cur;
  if (mdb_cursor_open(txn, dbi, &cur) != 0)
    return 0;
  auto past = prefix + std::string(8, '\xff');
  MDB_val k = as_val(past), v;
  int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  // The first key >= past is outside the prefix (or past itself, seq 2^64-1).
  if (rc == 0 && as_string(k) == past) {
    mdb_cursor_close(cur);
    return ~uint64_t{0};
  }
  rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
  uint64_t newest = 0;
  if (rc == 0 && k.mv_size == prefix.size() + 8
      && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0)
    newest = seq_of(k);
  mdb_cursor_close(cur);
  return newest;
}

} // namespace

caf::expected<registered_graph> store::registered(const std::string& owner,
                                                  const std::string& name, int version) const {
  if (version <= 0) {
    int newest = 0;
    auto err = read([&](MDB_txn* txn) -> caf::error {
      newest = newest_version(txn, registry_, registry_prefix(owner, name));
      return caf::none;
    });
    if (err)
      return err;
    if (newest == 0)
      return make_error(persistence_errc::not_found, "no graph '" + name + "'");
    version = newest;
  }
  return get_record<registered_graph>(registry_,
                                      registry_prefix(owner, name) + version_key(version),
                                      "no graph '" + name + "' version "
                                        + std::to_string(version),
                                      decode_registered_graph);
}

caf::expected<std::vector<registered_graph>>
store::registered_graphs(const std::string& owner, const std::string& after,
                         size_t limit) const {
  std::vector<registered_graph> out;
  auto prefix = owner + '\0';
  // A name never holds NUL: `after`'s own keys (after \0 version) sort
  // before `after` \1, every longer or greater name at or after it.
  auto start = after.empty() ? prefix : prefix + after + '\1';
  auto err = read([&](MDB_txn* txn) -> caf::error {
    // Keys are owner \0 name \0 version (big endian): a name's newest
    // version is the last of its run of keys.
    std::string name;
    MDB_val newest{0, nullptr}; // valid until the read ends
    caf::error bad;
    auto emit = [&] {
      if (name.empty())
        return true;
      auto g = decode_registered_graph(as_view(newest));
      if (!g) {
        bad = g.error();
        return false;
      }
      out.push_back(std::move(*g));
      return limit == 0 || out.size() < limit;
    };
    bool more = true;
    scan_prefix(txn, registry_, prefix, start, [&](const MDB_val& k, const MDB_val& v) {
      auto this_name = registry_name(k, prefix.size());
      if (this_name != name) {
        if (!(more = emit()))
          return false;
        name = std::string{this_name};
      }
      newest = v;
      return true;
    });
    if (more)
      emit();
    return bad;
  });
  if (err)
    return err;
  return out;
}

caf::expected<store_usage> store::usage() const {
  store_usage out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_envinfo info;
    MDB_stat st;
    if (int rc = mdb_env_info(env_, &info); rc != 0)
      return make_error(persistence_errc::io_error, mdb_strerror(rc));
    if (int rc = mdb_env_stat(env_, &st); rc != 0)
      return make_error(persistence_errc::io_error, mdb_strerror(rc));
    // The free list is database 0: each value is a list of page numbers
    // whose first word is its length (what `mdb_stat -f` sums).
    uint64_t free_pages = 0;
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, 0, &cur); rc != 0)
      return make_error(persistence_errc::io_error, mdb_strerror(rc));
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      size_t n = 0;
      if (v.mv_size >= sizeof(n))
        std::memcpy(&n, v.mv_data, sizeof(n));
      free_pages += n;
    }
    mdb_cursor_close(cur);
    out.file_bytes = (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
    out.free_bytes = free_pages * st.ms_psize;
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<size_t> store::registered_count(const std::string& owner) const {
  size_t count = 0;
  auto prefix = owner + '\0';
  auto err = read([&](MDB_txn* txn) -> caf::error {
    // Keys are owner \0 name \0 version: a name's versions are adjacent.
    std::string last;
    scan_prefix(txn, registry_, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
      auto name = registry_name(k, prefix.size());
      if (count == 0 || name != last) {
        ++count;
        last = std::string{name};
      }
      return true;
    });
    return caf::none;
  });
  if (err)
    return err;
  return count;
}

caf::expected<agent_record> store::agent(const std::string& owner,
                                         const std::string& name) const {
  return get_record<agent_record>(agents_, pair_key(owner, name), "no agent '" + name + "'",
                                  decode_agent);
}

caf::expected<std::vector<agent_record>>
store::agents(const std::optional<std::string>& owner) const {
  std::vector<agent_record> out;
  auto err = read([&](MDB_txn* txn) {
    return decode_prefix(txn, agents_, owner ? *owner + '\0' : std::string{}, decode_agent,
                         out);
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::vector<history_entry>> store::history(const std::string& owner,
                                                         const std::string& name,
                                                         uint64_t after, size_t limit) const {
  if (after == ~uint64_t{0})
    return std::vector<history_entry>{};
  return read_log<history_entry>(history_, agent_prefix(owner, name), after, limit,
                                 decode_history);
}

caf::expected<std::vector<std::pair<std::string, std::string>>>
store::agent_runs(const std::string& owner, const std::string& name) const {
  auto d = subtree_dbs();
  std::vector<std::pair<std::string, std::string>> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    auto prefix = agent_prefix(owner, name);
    // Covered runs keep their entry until materialised.
    store_subtree::resolver resolve{txn, d};
    scan_prefix(txn, agent_runs_, prefix, prefix, [&](const MDB_val& k, const MDB_val& v) {
      std::string id{static_cast<const char*>(k.mv_data) + prefix.size(),
                     k.mv_size - prefix.size()};
      if (resolve.active())
        if (auto rec = load_execution(txn, executions_, id); rec && resolve.covering(*rec))
          return true;
      out.emplace_back(std::move(id), as_string(v));
      return true;
    });
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<uint64_t> store::last_seq() const {
  uint64_t seq = 0;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    seq = read_seq(txn, meta_);
    return caf::none;
  });
  if (err)
    return err;
  return seq;
}

caf::expected<std::string> store::schema() const {
  std::string out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_val k = as_val(schema_key), v;
    if (int rc = mdb_get(txn, meta_, &k, &v); rc != 0)
      return lmdb_error("reading the schema", rc);
    out = as_string(v);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

// -- writes --------------------------------------------------------------------------

caf::error store::grow() {
  std::unique_lock<std::shared_mutex> excl{resize_mtx_};
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  int rc = mdb_env_set_mapsize(env_, info.me_mapsize * 2);
  if (rc != 0)
    return lmdb_error("mdb_env_set_mapsize", rc);
  return caf::none;
}

caf::error store::write_once(const std::function<int(MDB_txn*)>& f, const char* what) {
  if (auto err = lock_writers())
    return err;
  struct unlock_at_exit {
    store* self;
    ~unlock_at_exit() { self->unlock_writers(); }
  } unlock{this};
  for (;;) {
    int rc;
    {
      std::shared_lock<std::shared_mutex> guard{resize_mtx_};
      if (env_ == nullptr)
        return unusable();
      MDB_txn* txn = nullptr;
      rc = mdb_txn_begin(env_, nullptr, 0, &txn);
      if (rc == MDB_MAP_RESIZED) {
        guard.unlock();
        {
          std::unique_lock<std::shared_mutex> excl{resize_mtx_};
          mdb_env_set_mapsize(env_, 0);
        }
        continue;
      }
      if (rc != 0)
        return lmdb_error("mdb_txn_begin", rc);
      rc = f(txn);
      if (rc == 0)
        rc = mdb_txn_commit(txn);
      else
        mdb_txn_abort(txn);
    }
    if (rc == MDB_MAP_FULL) {
      if (auto err = grow())
        return err;
      continue;
    }
    if (rc != 0)
      return lmdb_error(what, rc);
    return caf::none;
  }
}

caf::error store::commit(write_batch& batch) {
  // A home of the previous schema is rewritten before the first write, so
  // no binary record is ever written under schema 1.
  if (needs_migration_)
    if (auto err = migrate())
      return err;
  auto began = std::chrono::steady_clock::now();
  // Events the store writes itself (`stop.requested`, `stop.handled`), after
  // the batch's own; handed to the batch once committed.
  std::vector<event_record> generated;
  // The first write of this process in a home without `subtrees` creates it
  // (its handle is private to the transaction until it commits, and no other
  // transaction of this process may open a database meanwhile).
  std::unique_lock<std::mutex> creating{dbi_mtx_, std::defer_lock};
  if (!has_subtrees_)
    creating.lock();
  MDB_dbi created_subtrees = 0;
  auto err = write_once(
    [&](MDB_txn* txn) {
      int rc = 0;
      store_subtree::dbs d;
      d.executions = executions_;
      d.steps = steps_;
      d.children = children_;
      d.events = events_;
      d.live = live_;
      d.agent_runs = agent_runs_;
      d.has_subtrees = true;
      if (has_subtrees_) {
        d.subtrees = subtrees_;
      } else {
        if ((rc = mdb_dbi_open(txn, "subtrees", MDB_CREATE, &created_subtrees)) != 0)
          return rc;
        d.subtrees = created_subtrees;
      }
      bool any_subtree_stop = false;
      auto put = [&](unsigned dbi, const std::string& key, const std::string& val,
                     unsigned flags = 0) {
        if (rc != 0)
          return;
        MDB_val k = as_val(key), v = as_val(val);
        rc = mdb_put(txn, dbi, &k, &v, flags);
      };
      auto del_prefix = [&](unsigned dbi, const std::string& prefix) {
        MDB_cursor* cur;
        if (rc != 0 || (rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
          return;
        MDB_val k = as_val(prefix), v;
        int r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        while (r == 0 && k.mv_size >= prefix.size()
               && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
          if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
          r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
          if (r != 0)
            break;
        }
        mdb_cursor_close(cur);
      };
      static const std::string empty;
      // One counter per store, in the same transaction: seqs are strictly
      // increasing across every process that writes this home.
      uint64_t seq = read_seq(txn, meta_);
      uint64_t first_seq = seq;
      generated.clear();
      // Executions whose pending stop requests this commit may answer.
      std::unordered_set<std::string> settle;
      // Most commits find no request pending: then ended executions need
      // not be gathered (a stop snapshot ends thousands).
      MDB_stat pending_stat;
      bool any_pending = mdb_stat(txn, pending_, &pending_stat) == 0
                         && pending_stat.ms_entries > 0;
      // Deleted executions of another root, by root: id → the last seq
      // assigned when it was deleted. Their events are in that root's log
      // (SPEC §4.9: nothing of them remains); they are removed after the
      // whole batch, with one scan of each such root's log per commit,
      // however many nested batches delete executions of that tree.
      std::map<std::string, std::map<std::string, uint64_t>> deleted_in_tree;
      auto del_events_of = [&](const std::string& root,
                               const std::map<std::string, uint64_t>& ids) {
        uint64_t last = 0;
        for (auto& id : ids)
          last = std::max(last, id.second);
        MDB_cursor* cur;
        if (rc != 0 || (rc = mdb_cursor_open(txn, events_, &cur)) != 0)
          return;
        auto prefix = root + '\0';
        MDB_val k = as_val(prefix), v;
        int r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        while (r == 0 && k.mv_size == prefix.size() + 8
               && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
          auto event_seq = seq_of(k);
          if (event_seq > last)
            break; // written after every deletion: kept
          auto ex = decode_event_execution(as_view(v));
          auto i = ex ? ids.find(*ex) : ids.end();
          if (i != ids.end() && event_seq <= i->second) {
            if ((rc = mdb_cursor_del(cur, 0)) != 0)
              break;
            r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
          } else {
            r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
          }
        }
        mdb_cursor_close(cur);
      };
      // Before a batch touches an execution a stored compact snapshot
      // covers (or its target), that snapshot is materialised: the per-node
      // records the write then changes are there (see store.hpp).
      auto materialize_touched = [&](const write_batch& b) {
        if (rc != 0 || !store_subtree::any_stops(txn, d))
          return;
        std::unordered_set<std::string> seen;
        auto touch = [&](const std::string& root, const std::string& id,
                         const std::string& parent) {
          if (rc == 0 && seen.insert(id).second)
            rc = store_subtree::materialize_touching(txn, d, root, id, parent);
        };
        for (auto& id : b.deleted_executions)
          if (auto rec = load_execution(txn, executions_, id))
            touch(rec->root_id, id, rec->parent_id);
        for (auto& x : b.executions)
          touch(x.root_id, x.id, x.parent_id);
        for (auto& x : b.steps)
          if (seen.count(x.execution_id) == 0)
            if (auto rec = load_execution(txn, executions_, x.execution_id))
              touch(rec->root_id, rec->id, rec->parent_id);
      };
      // One execution and everything keyed by it (see write_batch).
      auto delete_execution = [&](const std::string& id) {
        MDB_val k = as_val(id);
        execution_record rec;
        MDB_val v;
        if (mdb_get(txn, executions_, &k, &v) == 0) {
          if (auto r = decode_execution(as_view(v)))
            rec = std::move(*r);
          mdb_del(txn, executions_, &k, nullptr);
          if (!rec.parent_id.empty()) {
            auto ck = pair_key(rec.parent_id, id);
            MDB_val ckv = as_val(ck);
            mdb_del(txn, children_, &ckv, nullptr);
          }
          if (!rec.agent.empty()) {
            auto rk = agent_prefix(rec.owner, rec.agent) + id;
            MDB_val rkv = as_val(rk);
            mdb_del(txn, agent_runs_, &rkv, nullptr);
          }
        }
        mdb_del(txn, graphs_, &k, nullptr);
        mdb_del(txn, live_, &k, nullptr);
        if (rec.root_id.empty() || rec.root_id == id)
          del_prefix(d.subtrees, id + '\0');
        del_prefix(steps_, id + '\0');
        del_prefix(events_, id + '\0');
        if (!rec.root_id.empty() && rec.root_id != id)
          deleted_in_tree[rec.root_id][id] = seq;
        mdb_del(txn, counters_, &k, nullptr);
      };
      // `root` and every execution below it (the children index holds every
      // child ever created), when `root` is a root whose stored status is
      // terminal and none of them is live; else nothing.
      auto settled_tree = [&](const std::string& root) {
        auto rec = load_execution(txn, executions_, root);
        if (!rec || rec->root_id != root || !is_terminal(rec->status))
          return std::vector<std::string>{};
        auto ids = walk_subtree(txn, children_, root);
        for (auto& id : ids) {
          MDB_val k = as_val(id), v;
          if (mdb_get(txn, live_, &k, &v) == 0)
            return std::vector<std::string>{};
        }
        return ids;
      };
      std::string kbuf, vbuf;
      std::function<void(write_batch&)> apply = [&](write_batch& b) {
        materialize_touched(b);
        for (auto& id : b.deleted_executions)
          delete_execution(id);
        for (auto& root : b.deleted_trees)
          for (auto& id : settled_tree(root))
            delete_execution(id);
        for (auto& x : b.executions) {
          if (any_pending && is_terminal(x.status))
            settle.insert(x.id);
          put(executions_, x.id, encode(x));
          if (rc == 0) {
            MDB_val lk = as_val(x.id), lv = as_val(empty);
            if (is_terminal(x.status)) {
              int r = mdb_del(txn, live_, &lk, nullptr);
              if (r != 0 && r != MDB_NOTFOUND)
                rc = r;
            } else {
              rc = mdb_put(txn, live_, &lk, &lv, 0);
            }
          }
          // The child index is written while the child lives, not again in
          // the final records (a stop snapshot of a large tree).
          if (!x.parent_id.empty() && !is_terminal(x.status))
            put(children_, pair_key(x.parent_id, x.id), empty);
          // An agent's runs that are not terminal, for its busy policy.
          if (!x.agent.empty() && rc == 0) {
            auto rk = agent_prefix(x.owner, x.agent) + x.id;
            if (is_terminal(x.status)) {
              MDB_val k = as_val(rk);
              int r = mdb_del(txn, agent_runs_, &k, nullptr);
              if (r != 0 && r != MDB_NOTFOUND)
                rc = r;
            } else {
              put(agent_runs_, rk, x.root_id);
            }
          }
        }
        for (auto& x : b.graphs)
          put(graphs_, x.first, encode(x.second));
        for (auto& x : b.encoded_graphs)
          put(graphs_, x.first, x.second);
        for (auto& x : b.stops) {
          if (rc != 0)
            break;
          // A request is stored once, however often it is delivered; the
          // store answers it (see `settle_stops`), never its writers.
          MDB_val k = as_val(x.id), v;
          if (mdb_get(txn, stops_, &k, &v) == 0)
            continue;
          stop_record r = x;
          r.handled = false;
          r.result.clear();
          r.handled_at = 0;
          put(stops_, r.id, encode(r));
          put(pending_, pair_key(r.target, r.id), empty);
          if (auto target = load_execution(txn, executions_, r.target))
            generated.push_back(stop_event(*target, r, "stop.requested", r.requested_at));
          settle.insert(r.target);
        }
        for (auto& id : b.settle_stops)
          settle.insert(id);
        for (auto& x : b.counters) {
          if (rc != 0)
            break;
          auto merged = x.second;
          MDB_val k = as_val(x.first), v;
          if (mdb_get(txn, counters_, &k, &v) == 0)
            if (auto old = decode_counters(as_view(v))) {
              merged.steps = std::max(merged.steps, old->steps);
              merged.spent = std::max(merged.spent, old->spent);
              merged.run_ms = std::max(merged.run_ms, old->run_ms);
              merged.budget = std::max(merged.budget, old->budget);
            }
          put(counters_, x.first, encode(merged));
        }
        for (auto& x : b.registered) {
          if (rc != 0)
            break;
          auto prefix = registry_prefix(x.owner, x.name);
          if (x.version <= 0)
            x.version = newest_version(txn, registry_, prefix) + 1;
          put(registry_, prefix + version_key(x.version), encode(x));
        }
        for (auto& x : b.agents)
          put(agents_, pair_key(x.owner, x.name), encode(x));
        for (auto& x : b.history) {
          if (rc != 0)
            break;
          // Entries written earlier in this transaction are seen here, so
          // several entries of one agent in one batch get consecutive seqs.
          auto prefix = agent_prefix(x.owner, x.agent);
          x.seq = newest_history_seq(txn, history_, prefix) + 1;
          put(history_, prefix + seq_key(x.seq), encode(x));
        }
        // Steps and events (most of a batch) share two buffers.
        for (auto& x : b.steps) {
          pair_key_into(kbuf, x.execution_id, x.step);
          encode_into(vbuf, x);
          put(steps_, kbuf, vbuf);
        }
        for (auto& e : b.events) {
          e.seq = ++seq;
          // The newest tree's events go at the very end of the database:
          // appending skips the search; elsewhere it is a normal insert.
          pair_key_into(kbuf, e.root_id, seq_key(e.seq));
          encode_into(vbuf, e);
          auto& key = kbuf;
          auto& val = vbuf;
          put(events_, key, val, MDB_APPEND);
          if (rc == MDB_KEYEXIST) {
            rc = 0;
            put(events_, key, val);
          }
        }
        // Compact snapshots: a reserved seq range, one compact entry at its
        // first seq (none for an empty range) and the record.
        for (auto& x : b.subtree_stops) {
          if (rc != 0)
            break;
          x.first_seq = seq + 1;
          seq += x.events;
          if (x.events > 0) {
            auto key = pair_key(x.root_id, seq_key(x.first_seq));
            auto val = encode(store_subtree::compact_entry(x));
            put(events_, key, val, MDB_APPEND);
            if (rc == MDB_KEYEXIST) {
              rc = 0;
              put(events_, key, val);
            }
          }
          put(d.subtrees, pair_key(x.root_id, x.target), encode(x));
          any_subtree_stop = true;
        }
        for (auto& n : b.nested)
          apply(n);
      };
      apply(batch);
      for (auto& [root, ids] : deleted_in_tree)
        del_events_of(root, ids);
      // A pending request whose target a compact snapshot of this commit
      // covers is answered now, like one whose target became terminal.
      if (any_subtree_stop && any_pending && rc == 0)
        scan_prefix(txn, pending_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
          auto key = as_view(k);
          auto sep = key.find('\0');
          if (sep != std::string_view::npos)
            settle.emplace(key.substr(0, sep));
          return true;
        });
      if (!settle.empty() && rc == 0)
        rc = settle_stops(txn, d, stops_, pending_, settle, generated);
      for (auto& e : generated) {
        e.seq = ++seq;
        put(events_, pair_key(e.root_id, seq_key(e.seq)), encode(e));
      }
      if (seq != first_seq)
        put(meta_, seq_meta_key, seq_key(seq));
      return rc;
    },
    "commit");
  if (!err && created_subtrees != 0) {
    subtrees_ = created_subtrees;
    has_subtrees_ = true;
  }
  if (creating.owns_lock())
    creating.unlock();
  if (err)
    return err;
  if (!generated.empty()) {
    write_batch tail;
    tail.events = std::move(generated);
    batch.nested.push_back(std::move(tail));
  }
  if (on_commit_)
    on_commit_(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  return caf::none;
}

caf::expected<materialize_outcome> store::materialize(const std::string& root_id,
                                                        const std::function<bool()>& give_way) {
  if (needs_migration_)
    if (auto err = migrate())
      return err;
  auto d = subtree_dbs();
  if (!d.has_subtrees)
    return materialize_outcome::done;
  bool gave = false; // `give_way` answered true
  auto err = write_once(
    [&](MDB_txn* txn) {
      std::vector<std::string> targets;
      auto prefix = root_id + '\0';
      scan_prefix(txn, d.subtrees, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
        targets.emplace_back(static_cast<const char*>(k.mv_data) + prefix.size(),
                             k.mv_size - prefix.size());
        return true;
      });
      for (auto& t : targets) {
        int rc = store_subtree::materialize(txn, d, root_id, t, give_way);
        gave = rc == store_subtree::gave_way;
        if (rc != 0)
          return rc; // rolled back
      }
      return 0;
    },
    "materialize");
  if (gave)
    return materialize_outcome::gave_way;
  if (err)
    return err;
  {
    // The kept expansion may be of an entry just materialised: one event
    // record per execution of a large subtree, for nothing now.
    std::lock_guard<std::mutex> guard{expansion_mtx_};
    expansion_key_.clear();
    expansion_.reset();
  }
  return materialize_outcome::done;
}

std::string make_execution_id() {
  static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
  static std::mutex mtx;
  static std::mt19937_64 rng{std::random_device{}()};
  static uint64_t last_ms = 0;
  static uint64_t last_lo = 0, last_hi = 0;
  std::lock_guard<std::mutex> guard{mtx};
  auto ms = static_cast<uint64_t>(now_ms());
  uint64_t hi, lo; // 80 random bits: 16 in hi, 64 in lo
  if (ms <= last_ms) {
    // Same millisecond: increment the previous randomness to stay ordered.
    ms = last_ms;
    lo = last_lo + 1;
    hi = last_hi + (lo == 0 ? 1 : 0);
  } else {
    lo = rng();
    hi = rng() & 0x7fff; // leave headroom for increments
  }
  last_ms = ms;
  last_lo = lo;
  last_hi = hi;
  std::string out(26, '0');
  // 48-bit time → 10 chars; 80 random bits → 16 chars.
  for (int i = 9; i >= 0; --i) {
    out[static_cast<size_t>(i)] = alphabet[ms & 31];
    ms >>= 5;
  }
  for (int i = 25; i >= 10; --i) {
    out[static_cast<size_t>(i)] = alphabet[lo & 31];
    lo = (lo >> 5) | ((hi & 31) << 59);
    hi >>= 5;
  }
  return out;
}

int64_t execution_id_ms(std::string_view id) {
  static const std::string_view alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
  if (id.size() != 26)
    return -1;
  int64_t ms = 0;
  for (size_t i = 0; i < 10; ++i) {
    auto d = alphabet.find(id[i]);
    if (d == std::string_view::npos)
      return -1;
    ms = ms * 32 + static_cast<int64_t>(d);
  }
  return ms;
}

} // namespace canopy
