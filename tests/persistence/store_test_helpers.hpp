#pragma once

// Helpers of the store's tests (test_store*.cpp): a real LMDB environment in
// a temporary home, records to put in it, and child processes for the tests
// of concurrency and of the writers' lock.

#include <catch2/catch.hpp>

#include <lmdb.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "persistence/store.hpp"

namespace canopy::core::store_test {

/// Runs `f(txn, dbi_of)` in one raw LMDB write transaction on `home` (what
/// an older release, or a crash, may have left; no store of this process
/// may be open on it).
inline void with_raw_lmdb(
  const std::string& home,
  const std::function<void(MDB_txn*, std::function<MDB_dbi(const char*)>)>& f) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == 0);
  mdb_env_set_maxdbs(env, 32);
  REQUIRE(mdb_env_open(env, home.c_str(), 0, 0644) == 0);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
  f(txn, [&](const char* name) {
    MDB_dbi dbi = 0;
    REQUIRE(mdb_dbi_open(txn, name, 0, &dbi) == 0);
    return dbi;
  });
  REQUIRE(mdb_txn_commit(txn) == 0);
  mdb_env_close(env);
}

/// Puts `val` under `key` in `dbi`, raw.
inline void raw_put(MDB_txn* txn, MDB_dbi dbi, std::string key, std::string val) {
  MDB_val k{key.size(), key.data()}, v{val.size(), val.data()};
  REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
}

inline std::shared_ptr<store> open_store(const std::string& home, size_t map_bytes = 64u << 20) {
  store_options opts;
  opts.home = home;
  opts.initial_map_bytes = map_bytes;
  auto db = store::open(opts);
  INFO("open " << home << ": " << (db ? std::string{} : message_of(db.error())));
  REQUIRE(db);
  return std::move(*db);
}

inline execution_record make_exec(const std::string& id, const std::string& graph = "g",
                                  execution_status status = execution_status::queued,
                                  const std::string& parent = {}, const std::string& root = {}) {
  execution_record r;
  r.id = id;
  r.graph = graph;
  r.status = status;
  r.parent_id = parent;
  r.root_id = root.empty() ? (parent.empty() ? id : parent) : root;
  r.depth = parent.empty() ? 0 : 1;
  r.created_at = now_ms();
  return r;
}

inline step_record make_step(const std::string& exec, const std::string& name,
                             step_status status = step_status::pending) {
  step_record s;
  s.execution_id = exec;
  s.step = name;
  s.status = status;
  return s;
}

inline event_record make_event(const std::string& exec, const std::string& root,
                               event_type type = event_type::step_started,
                               json data = nullptr) {
  event_record e;
  e.time = now_ms();
  e.type = type;
  e.execution_id = exec;
  e.root_id = root;
  e.data = std::move(data);
  return e;
}

inline void commit_ok(store& db, write_batch& batch) {
  auto err = db.commit(batch);
  INFO("commit: " << message_of(err));
  REQUIRE_FALSE(err);
}

template <class T>
T get(caf::expected<T> x) {
  INFO("error: " << (x ? std::string{} : message_of(x.error())));
  REQUIRE(x);
  return std::move(*x);
}

inline bool is_errc(const caf::error& err, persistence_errc code) {
  return err && err.category() == persistence_category && err.code() == static_cast<uint8_t>(code);
}

inline std::vector<std::string> ids_of(const std::vector<execution_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.id);
  return out;
}

inline std::vector<std::string> names_of(const std::vector<step_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.step);
  return out;
}

inline std::vector<uint64_t> seqs_of(const std::vector<event_record>& xs) {
  std::vector<uint64_t> out;
  for (auto& x : xs)
    out.push_back(x.seq);
  return out;
}

/// Waits for `pid` with a deadline (SIGKILL after it). @returns its exit code,
/// or -1 when it did not exit normally.
inline int reap(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds{120}) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    auto r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    if (r < 0)
      return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Forks a child that runs `f` (returning its exit code) and never returns
/// into Catch. Call only while this process holds no store of the home.
template <class F>
pid_t fork_child(F f) {
  auto pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 99;
    try {
      rc = f();
    } catch (...) {
      rc = 98;
    }
    ::_exit(rc);
  }
  return pid;
}

} // namespace canopy::core::store_test
