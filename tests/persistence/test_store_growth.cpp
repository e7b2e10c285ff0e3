// Tests of canopy::core::store under growth, concurrency and damage: the map
// growing, two processes committing, corrupt records, ids, and the writers'
// lock (runtime/docs/reference/cli.md#client-options). Child processes are real forks, reaped with a
// deadline.

#include "persistence/store.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::store_test;

namespace fs = std::filesystem;

// -- growth and concurrency ------------------------------------------------------------

TEST_CASE("the map grows when full and keeps every record readable",
          "[persistence][store]") {
  test::temp_dir dir;
  constexpr size_t initial = 64u << 10;
  auto db = open_store(dir.path, initial);
  auto start_size = db->map_size();
  CHECK(start_size < (1u << 20));
  // A reader on another thread while the map grows under it.
  std::atomic<bool> done{false};
  std::atomic<int> read_errors{0};
  std::atomic<int> reads{0};
  std::thread reader{[&] {
    while (!done.load()) {
      if (!db->last_seq() || !db->list({}))
        ++read_errors;
      ++reads;
    }
  }};
  const std::string blob(100 * 1024, 'x');
  constexpr int executions = 40; // ~4 MB of graphs plus steps and events
  std::vector<std::string> ids;
  for (int i = 0; i < executions; ++i) {
    auto id = make_execution_id();
    ids.push_back(id);
    write_batch b;
    b.executions.push_back(make_exec(id, "big", execution_status::completed));
    b.graphs.emplace_back(id, stored_graph{json{{"blob", blob}, {"i", i}}, "/", json::object()});
    b.steps.push_back(make_step(id, "s"));
    b.steps.back().result = json{{"stdout", blob.substr(0, 10000)}};
    b.events.push_back(make_event(id, id, event_type::execution_completed, json{{"i", i}}));
    commit_ok(*db, b);
    CHECK(b.events[0].seq == static_cast<uint64_t>(i + 1));
  }
  // One batch far larger than the current map: grows several times in one commit.
  {
    write_batch b;
    for (int i = 0; i < 30; ++i)
      b.graphs.emplace_back("single-" + std::to_string(i),
                            stored_graph{json{{"blob", blob}}, "/", json::object()});
    commit_ok(*db, b);
  }
  done = true;
  reader.join();
  CHECK(read_errors.load() == 0);
  CHECK(reads.load() > 0);
  CHECK(db->map_size() > start_size);
  CHECK(db->map_size() >= 7u * 1024 * 1024);
  for (int i = 0; i < executions; ++i) {
    auto g = get(db->graph(ids[static_cast<size_t>(i)]));
    CHECK(g.document["i"] == i);
    CHECK(g.document["blob"].get<std::string>().size() == blob.size());
    CHECK(get(db->steps(ids[static_cast<size_t>(i)])).size() == 1);
  }
  for (int i = 0; i < 30; ++i)
    CHECK(get(db->graph("single-" + std::to_string(i))).document["blob"] == blob);
  execution_filter f;
  f.graph = "big";
  CHECK(get(db->list(f)).size() == executions);
  CHECK(get(db->last_seq()) == static_cast<uint64_t>(executions));
  // And it survives a reopen.
  db.reset();
  db = open_store(dir.path, initial);
  CHECK(get(db->graph(ids.back())).document["i"] == executions - 1);
}

TEST_CASE("the map doubles before a commit once three quarters of it are used, not after a "
          "commit fills it",
          "[persistence][store]") {
  test::temp_dir dir;
  constexpr size_t initial = 1u << 20;
  auto db = open_store(dir.path, initial);
  auto start_size = db->map_size();
  // Fill to just past three quarters with commits that each fit easily.
  const std::string blob(8 * 1024, 'x');
  int i = 0;
  auto file_bytes = [&] { return get(db->usage()).file_bytes; };
  while (file_bytes() <= start_size / 4 * 3) {
    REQUIRE(db->map_size() == start_size); // no commit so far needed more room
    write_batch b;
    b.graphs.emplace_back("g" + std::to_string(i++),
                          stored_graph{json{{"blob", blob}}, "/", json::object()});
    commit_ok(*db, b);
  }
  REQUIRE(file_bytes() < start_size); // the map is not full
  // The next commit, however small, finds the map three quarters used.
  write_batch b;
  b.graphs.emplace_back("small", stored_graph{json{{"x", 1}}, "/", json::object()});
  commit_ok(*db, b);
  CHECK(db->map_size() == 2 * start_size);
  CHECK(get(db->graph("small")).document["x"] == 1);
}

TEST_CASE("two processes committing to one home get unique, increasing seqs",
          "[persistence][store]") {
  test::temp_dir dir;
  constexpr int commits = 150;
  constexpr int per_commit = 3;
  // Both processes start from a tiny map, so each also sees the other grow it.
  auto map_bytes = GENERATE(size_t{64u << 20}, size_t{64u << 10});
  INFO("initial map bytes: " << map_bytes);
  auto home = dir.path + "/home";
  // Fork before this process opens the store: an LMDB environment must not
  // cross a fork. Both processes open the home before either commits; then
  // they commit at the same time.
  int opened[2], go[2];
  REQUIRE(::pipe(opened) == 0);
  REQUIRE(::pipe(go) == 0);
  auto child = fork_child([&]() -> int {
    ::close(opened[0]);
    ::close(go[1]);
    auto db = store::open({home, map_bytes});
    if (!db)
      return 11;
    char c = 'o';
    if (::write(opened[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1)
      return 10;
    uint64_t last = 0;
    const std::string pad(2000, 'c');
    for (int i = 0; i < commits; ++i) {
      write_batch b;
      for (int j = 0; j < per_commit; ++j)
        b.events.push_back(
          make_event("child", "child", event_type::step_output, json{{"i", i}, {"j", j}, {"pad", pad}}));
      if ((*db)->commit(b))
        return 12;
      for (auto& e : b.events) {
        if (e.seq <= last)
          return 13;
        last = e.seq;
      }
    }
    return 0;
  });
  ::close(opened[1]);
  ::close(go[0]);
  char c = 0;
  REQUIRE(::read(opened[0], &c, 1) == 1);
  ::close(opened[0]);
  auto db = open_store(home, map_bytes);
  REQUIRE(::write(go[1], "g", 1) == 1);
  ::close(go[1]);
  uint64_t last = 0;
  bool increasing = true;
  const std::string pad(2000, 'p');
  for (int i = 0; i < commits; ++i) {
    write_batch b;
    for (int j = 0; j < per_commit; ++j)
      b.events.push_back(
        make_event("parent", "parent", event_type::step_output, json{{"i", i}, {"j", j}, {"pad", pad}}));
    commit_ok(*db, b);
    for (auto& e : b.events) {
      increasing = increasing && e.seq > last;
      last = e.seq;
    }
  }
  CHECK(increasing);
  REQUIRE(reap(child) == 0);
  constexpr uint64_t total = 2 * commits * per_commit;
  CHECK(get(db->last_seq()) == total);
  auto mine = get(db->tree_events("parent"));
  auto theirs = get(db->tree_events("child"));
  REQUIRE(mine.size() == commits * per_commit);
  REQUIRE(theirs.size() == commits * per_commit);
  std::set<uint64_t> all;
  for (auto* xs : {&mine, &theirs}) {
    // Each process's events keep their commit order.
    for (size_t k = 0; k < xs->size(); ++k) {
      auto& e = (*xs)[k];
      all.insert(e.seq);
      CHECK(e.data["i"] == static_cast<int>(k / per_commit));
      CHECK(e.data["j"] == static_cast<int>(k % per_commit));
      if (k > 0)
        CHECK(e.seq > (*xs)[k - 1].seq);
    }
  }
  CHECK(all.size() == total);
  CHECK(*all.begin() == 1u);
  CHECK(*all.rbegin() == total);
}

TEST_CASE("opening a home succeeds while another process grows its map",
          "[persistence][store]") {
  test::temp_dir dir;
  constexpr size_t tiny = 64u << 10;
  open_store(dir.path, tiny).reset();
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  auto child = fork_child([&]() -> int {
    ::close(ready[0]);
    auto db = store::open({dir.path, tiny});
    if (!db)
      return 11;
    if (::write(ready[1], "r", 1) != 1)
      return 10;
    const std::string pad(10000, 'g');
    for (int i = 0; i < 300; ++i) {
      write_batch b;
      b.events.push_back(make_event("grower", "grower", event_type::step_output, json{{"pad", pad}}));
      if ((*db)->commit(b))
        return 12;
    }
    return 0;
  });
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  // Open and read over and over while the other process grows the map.
  int opens = 0, open_failures = 0, read_failures = 0;
  std::string first_error;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    ++opens;
    auto db = store::open({dir.path, tiny});
    if (!db) {
      if (open_failures++ == 0)
        first_error = message_of(db.error());
      continue;
    }
    if (!(*db)->last_seq() || !(*db)->tree_events("grower", 0, 1))
      ++read_failures;
  }
  INFO("opens: " << opens << ", first open error: " << first_error);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(open_failures == 0);
  CHECK(read_failures == 0);
  auto db = open_store(dir.path, tiny);
  CHECK(get(db->last_seq()) == 300u);
}

// -- damage ----------------------------------------------------------------------

TEST_CASE("a corrupt record is reported as corrupt_record", "[persistence][store]") {
  test::temp_dir dir;
  {
    auto db = open_store(dir.path);
    write_batch b;
    b.executions.push_back(make_exec("good"));
    b.steps.push_back(make_step("good", "s"));
    b.events.push_back(make_event("good", "good"));
    commit_ok(*db, b);
  }
  // Write garbage with a raw LMDB transaction while no store is open.
  {
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    mdb_env_set_mapsize(env, 64u << 20);
    REQUIRE(mdb_env_open(env, dir.path.c_str(), 0, 0644) == 0);
    MDB_txn* txn = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
    auto put = [&](const char* db_name, const std::string& key, const std::string& val) {
      MDB_dbi dbi;
      REQUIRE(mdb_dbi_open(txn, db_name, 0, &dbi) == 0);
      MDB_val k{key.size(), const_cast<char*>(key.data())};
      MDB_val v{val.size(), const_cast<char*>(val.data())};
      REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
    };
    put("executions", "bad", "{not json");
    put("executions", "wrongtype", R"({"id": 7, "graph": "g", "status": "running"})");
    put("executions", "badstatus", R"({"id": "badstatus", "graph": "g", "status": "zzz"})");
    put("steps", std::string{"good"} + '\0' + "t", "\x01\x02garbage");
    put("graphs", "good", "[1, 2");
    put("live", "bad", "");
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
  }
  auto db = open_store(dir.path);
  for (auto id : {"bad", "wrongtype", "badstatus"}) {
    INFO("id " << id);
    auto rec = db->execution(id);
    REQUIRE_FALSE(rec);
    CHECK(is_errc(rec.error(), persistence_errc::corrupt_record));
  }
  auto steps = db->steps("good");
  REQUIRE_FALSE(steps);
  CHECK(is_errc(steps.error(), persistence_errc::corrupt_record));
  auto g = db->graph("good");
  REQUIRE_FALSE(g);
  CHECK(is_errc(g.error(), persistence_errc::corrupt_record));
  // A listing of every execution walks the records (these are written
  // around the status index, which listings of roots and by status walk).
  execution_filter every;
  every.roots_only = false;
  auto listed = db->list(every);
  REQUIRE_FALSE(listed);
  CHECK(is_errc(listed.error(), persistence_errc::corrupt_record));
  auto live = db->live();
  REQUIRE_FALSE(live);
  CHECK(is_errc(live.error(), persistence_errc::corrupt_record));
  // Good records stay readable, and the store still takes writes.
  CHECK(get(db->execution("good")).id == "good");
  CHECK(get(db->tree_events("good")).size() == 1);
  write_batch b;
  b.events.push_back(make_event("good", "good"));
  commit_ok(*db, b);
  CHECK(b.events[0].seq == 2);
}

// -- ids -------------------------------------------------------------------------

TEST_CASE("make_execution_id is 26 characters, unique and sorted in creation order",
          "[persistence][store]") {
  const std::string alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
  constexpr size_t n = 100000;
  std::vector<std::string> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i)
    ids.push_back(make_execution_id());
  bool sizes_ok = true, chars_ok = true, ordered = true;
  for (size_t i = 0; i < n; ++i) {
    sizes_ok = sizes_ok && ids[i].size() == 26;
    chars_ok = chars_ok && ids[i].find_first_not_of(alphabet) == std::string::npos;
    if (i > 0 && !(ids[i - 1] < ids[i])) {
      if (ordered)
        UNSCOPED_INFO("out of order at " << i << ": " << ids[i - 1] << " then " << ids[i]);
      ordered = false;
    }
  }
  CHECK(sizes_ok);
  CHECK(chars_ok);
  CHECK(ordered);
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == n);
  // The time prefix is the creation time in ms.
  auto decode_ms = [&](const std::string& id) {
    uint64_t ms = 0;
    for (size_t i = 0; i < 10; ++i)
      ms = ms * 32 + alphabet.find(id[i]);
    return static_cast<int64_t>(ms);
  };
  auto before = now_ms();
  auto id = make_execution_id();
  auto after = now_ms();
  CHECK(decode_ms(id) >= before - 1000);
  CHECK(decode_ms(id) <= after + 1000);
}

TEST_CASE("make_execution_id is unique and ordered per thread under contention",
          "[persistence][store]") {
  constexpr size_t threads = 4, per_thread = 25000;
  std::vector<std::vector<std::string>> ids(threads);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t)
    workers.emplace_back([&ids, t] {
      ids[t].reserve(per_thread);
      for (size_t i = 0; i < per_thread; ++i)
        ids[t].push_back(make_execution_id());
    });
  for (auto& w : workers)
    w.join();
  std::set<std::string> all;
  for (auto& xs : ids) {
    CHECK(std::is_sorted(xs.begin(), xs.end()));
    all.insert(xs.begin(), xs.end());
  }
  CHECK(all.size() == threads * per_thread);
}

// -- the writers' lock (runtime/docs/reference/cli.md#client-options) ---------------------------------------------

namespace {

/// Holds the writers' lock of `home` the way canopy's writers take it:
/// `flock(LOCK_EX)` on `store::write_lock_path(home)` through a descriptor of
/// its own (flock locks belong to the open file, so this conflicts with every
/// store, in this process too).
struct writers_lock_holder {
  explicit writers_lock_holder(const std::string& home) {
    fd = ::open(store::write_lock_path(home).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  }
  ~writers_lock_holder() { release(); }
  writers_lock_holder(const writers_lock_holder&) = delete;
  writers_lock_holder& operator=(const writers_lock_holder&) = delete;
  void release() {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }
  int fd = -1;
};

std::shared_ptr<store> open_store_waiting(const std::string& home,
                                          std::chrono::milliseconds write_wait) {
  store_options opts;
  opts.home = home;
  opts.write_wait = write_wait;
  auto db = store::open(opts);
  INFO("open " << home << ": " << (db ? std::string{} : message_of(db.error())));
  REQUIRE(db);
  return std::move(*db);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

TEST_CASE("a commit fails with store_busy once the writers' lock stayed taken for write_wait",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store_waiting(dir.path, std::chrono::milliseconds{500});
  write_batch first;
  first.executions.push_back(make_exec("e1"));
  first.events.push_back(make_event("e1", "e1", event_type::execution_queued));
  commit_ok(*db, first);
  writers_lock_holder holder{dir.path};
  write_batch second;
  second.executions.push_back(make_exec("e2"));
  second.events.push_back(make_event("e2", "e2", event_type::execution_queued));
  auto t0 = std::chrono::steady_clock::now();
  auto err = db->commit(second);
  auto waited = seconds_since(t0);
  CHECK(is_errc(err, persistence_errc::store_busy));
  CHECK(message_of(err)
        == "the store at " + dir.path
             + " is busy: another process has held its write lock for over 500 ms");
  CHECK(waited >= 0.5);
  CHECK(waited < 3.0);
  // Nothing of the batch is stored, and reads work while the lock is held.
  CHECK(is_errc(db->execution("e2").error(), persistence_errc::not_found));
  CHECK(get(db->execution("e1")).id == "e1");
  CHECK(ids_of(get(db->list({}))) == std::vector<std::string>{"e1"});
  CHECK(get(db->last_seq()) == 1u);
  // Opening the existing home needs no write, so it works too.
  auto again = open_store_waiting(dir.path, std::chrono::milliseconds{0});
  CHECK(get(again->execution("e1")).id == "e1");
  again.reset();
  holder.release();
  commit_ok(*db, second);
  CHECK(get(db->execution("e2")).id == "e2");
  CHECK(get(db->last_seq()) == 2u);
}

TEST_CASE("a commit waiting for the writers' lock goes through once it is released",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store_waiting(dir.path, std::chrono::seconds{30});
  writers_lock_holder holder{dir.path};
  std::atomic<bool> started{false};
  caf::error err;
  std::chrono::steady_clock::time_point done, released;
  std::thread writer([&] {
    write_batch b;
    b.executions.push_back(make_exec("e1"));
    started = true;
    err = db->commit(b);
    done = std::chrono::steady_clock::now();
  });
  while (!started)
    std::this_thread::yield();
  released = std::chrono::steady_clock::now();
  holder.release();
  writer.join();
  INFO("commit: " << message_of(err));
  CHECK_FALSE(err);
  // It could only commit after the release.
  CHECK(done >= released);
  CHECK(get(db->execution("e1")).id == "e1");
}

TEST_CASE("a process that dies holding the writers' lock releases it",
          "[persistence][store]") {
  test::temp_dir dir;
  open_store(dir.path).reset(); // the databases exist: opening needs no write
  // The child takes the lock like a writer would and dies with it (SIGKILL).
  int locked[2];
  REQUIRE(::pipe(locked) == 0);
  pid_t child = fork_child([&]() -> int {
    ::close(locked[0]);
    int fd = ::open(store::write_lock_path(dir.path).c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0)
      return 11;
    if (::write(locked[1], "l", 1) != 1)
      return 10;
    for (;;)
      ::pause();
  });
  // A failed REQUIRE must not leave the child holding the lock forever.
  struct kill_child {
    pid_t& pid;
    ~kill_child() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } guard{child};
  ::close(locked[1]);
  char c = 0;
  REQUIRE(::read(locked[0], &c, 1) == 1);
  ::close(locked[0]);
  auto db = open_store_waiting(dir.path, std::chrono::milliseconds{200});
  write_batch b;
  b.executions.push_back(make_exec("e1"));
  CHECK(is_errc(db->commit(b), persistence_errc::store_busy));
  REQUIRE(::kill(child, SIGKILL) == 0);
  CHECK(reap(child) == -1);
  child = -1;
  commit_ok(*db, b);
  CHECK(get(db->execution("e1")).id == "e1");
}

TEST_CASE("creating a home's databases waits for the writers' lock like a commit",
          "[persistence][store]") {
  test::temp_dir dir;
  // The folder exists, the databases do not: opening must write them.
  writers_lock_holder holder{dir.path};
  store_options opts;
  opts.home = dir.path;
  opts.write_wait = std::chrono::milliseconds{200};
  auto db = store::open(opts);
  REQUIRE_FALSE(db);
  CHECK(is_errc(db.error(), persistence_errc::store_busy));
  holder.release();
  auto created = open_store_waiting(dir.path, std::chrono::milliseconds{200});
  CHECK(get(created->last_seq()) == 0u);
}
