// The store's lifecycle: opening a home (its environment, databases and
// schema check), the writers' lock, releasing the write cache and the map's pages.

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
#include <thread>

#include "persistence/error.hpp"
#include "persistence/store_lmdb.hpp"

namespace canopy::core {

using namespace store_lmdb;

namespace {

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

} // namespace

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
  if (has_by_status_)
    same("by_status", by_status_);
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
  // `by_status` came with schema 3: a home of an earlier schema lacks it
  // until its migration creates it.
  {
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn, "by_status", create ? MDB_CREATE : 0, &dbi);
    if (rc == 0) {
      by_status_ = dbi;
      has_by_status_ = true;
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
    indexed_ = true;
  } else if (auto found = as_string(v); found == text_schema || found == migrating_schema
                                        || found == binary_schema || found == indexing_schema
                                        || found == old_indexing_schema) {
    // Readable as it is (the decoders read both encodings, listings walk
    // the records); the first write migrates it (see `migrate`).
    needs_migration_ = true;
  } else if (found == indexed_schema || found == interrupted_schema) {
    // The status index is whole (listings read it); the interrupted roots
    // are not listed apart yet (`execution_filter::interrupted_only` walks
    // the stopped roots) until the first write lists them.
    needs_migration_ = true;
    indexed_ = has_by_status_.load();
  } else if (found == schema_version) {
    indexed_ = has_by_status_.load();
  } else {
    bad_schema = found;
    mdb_txn_abort(txn);
    return -1;
  }
  // Committing (even a read-only transaction) keeps the database handles.
  return mdb_txn_commit(txn);
}

int store::open_env(size_t map_bytes) {
  {
    // A new environment maps the file elsewhere.
    std::lock_guard<std::mutex> guard{map_ranges_mtx_};
    map_ranges_.clear();
  }
  int rc = mdb_env_create(&env_);
  if (rc != 0) {
    env_ = nullptr;
    return rc;
  }
  // 16 named databases today; headroom for a few more without a new binary
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
  // Reading /proc/self/maps walks every mapping of the process (each
  // thread's stack among them): done again only once the map was resized or
  // the environment opened again (`open_env`), either of which may move it;
  // both wait for `resize_mtx_`, held here.
  MDB_envinfo info;
  if (mdb_env_info(env_, &info) != 0)
    return make_error(persistence_errc::store_error, "the store's map size is unknown");
  std::lock_guard<std::mutex> ranges_guard{map_ranges_mtx_};
  if (map_ranges_.empty() || map_ranges_size_ != info.me_mapsize) {
    map_ranges_ = mappings_of(fd);
    map_ranges_size_ = info.me_mapsize;
  }
  // A shared file mapping: the pages stay in the page cache, and whoever
  // touches one again faults it back in with its current contents.
  for (auto [lo, hi] : map_ranges_)
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
  // process holds the writers' lock (runtime/docs/reference/cli.md#client-options).
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

} // namespace canopy::core
