// `store::release_write_cache`: LMDB keeps every dirty page of its largest
// write transaction allocated until the environment closes; the store closes
// and opens it again, and must read and write exactly as before.

#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/store_writer.hpp"
#include "persistence/store.hpp"
#include "runtime/node/memory.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/mapped_kib.hpp"

using namespace canopy::core;

namespace {

template <class T>
T get(caf::expected<T> x) {
  REQUIRE(x);
  return std::move(*x);
}

execution_record exec(int i) {
  execution_record r;
  r.id = "e" + std::to_string(100000 + i);
  r.graph = "g";
  r.root_id = r.id;
  r.status = execution_status::completed;
  r.inputs = {{"payload", std::string(300, 'x')}};
  r.created_at = 100;
  return r;
}

/// Bytes the heap has allocated, or nothing when this build cannot tell
/// (a sanitizer's allocator).
std::optional<size_t> allocated() {
  heap_figures h;
  if (allocator_figures(h))
    return h.used_bytes;
  return std::nullopt;
}

/// Opens a store in `dir` and commits executions 0 to n - 1 in one transaction.
std::shared_ptr<store> store_with(const test::temp_dir& dir, int n) {
  auto db = get(store::open(store_options{dir.path + "/home"}));
  write_batch big;
  for (int i = 0; i < n; ++i)
    big.executions.push_back(exec(i));
  REQUIRE(!db->commit(big));
  return db;
}

/// Checks that a store of 20,000 executions (`store_with`) reads them and
/// takes a write as before.
void check_reads_and_writes(store& db) {
  CHECK(get(db.execution(exec(0).id)).inputs == exec(0).inputs);
  CHECK(get(db.execution(exec(19999).id)).id == exec(19999).id);
  write_batch more;
  more.executions.push_back(exec(20000));
  REQUIRE(!db.commit(more));
  CHECK(get(db.execution(exec(20000).id)).id == exec(20000).id);
  CHECK(get(db.execution(exec(12345).id)).inputs == exec(12345).inputs);
}

/// A store, its writer actor, and a write through the writer that waits
/// for its answer.
struct writer_fixture {
  static caf::actor_system_config& quiet(caf::actor_system_config& cfg) {
    cfg.set("logger.console", caf::atom("none"));
    return cfg;
  }
  test::temp_dir dir;
  std::shared_ptr<store> db = get(store::open(store_options{dir.path + "/home"}));
  caf::actor_system_config cfg;
  caf::actor_system sys{quiet(cfg)};
  store_writer_actor writer = spawn_store_writer(sys, db);
  caf::scoped_actor self{sys};
  ~writer_fixture() { self->send_exit(writer, caf::exit_reason::user_shutdown); }
  bool write(write_batch b) {
    bool ok = false;
    self->request(writer, caf::infinite, write_atom::value, std::move(b))
      .receive([&](bool x) { ok = x; }, [&](caf::error& err) { FAIL(sys.render(err)); });
    return ok;
  }
};

} // namespace

TEST_CASE("dropping the store's mapped pages takes them out of the process's RSS, and every "
          "read and write after it sees the same store",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = store_with(dir, 20000);
  auto file = dir.path + "/home/data.mdb";
  // Reading every record goes through LMDB's map: about 8 MB of pages.
  for (int i = 0; i < 20000; i += 7)
    REQUIRE(get(db->execution(exec(i).id)).id == exec(i).id);
  auto before = test::mapped_kib(file);
  INFO("mapped before: " << before << " KiB");
  CHECK(before > 2048);
  REQUIRE(!db->drop_mapped_pages());
  CHECK(db->mapped_page_drops() == 1);
  CHECK(test::mapped_kib(file) < 64);
  // The pages come back from the page cache with their contents.
  check_reads_and_writes(*db);
}

TEST_CASE("the mapped pages are dropped where the map is after the store's environment was "
          "opened again and after the map grew",
          "[persistence][store]") {
  test::temp_dir dir;
  store_options opts{dir.path + "/home"};
  opts.initial_map_bytes = size_t{1} << 20; // grows with the first large write
  auto db = get(store::open(opts));
  auto file = dir.path + "/home/data.mdb";
  auto read_all = [&](int n) {
    for (int i = 0; i < n; i += 3)
      REQUIRE(get(db->execution(exec(i).id)).id == exec(i).id);
  };
  write_batch first;
  first.executions.push_back(exec(0));
  REQUIRE(!db->commit(first));
  REQUIRE(!db->drop_mapped_pages()); // finds the map of 1 MiB
  // The map grows (and moves) to take 20,000 executions.
  write_batch big;
  for (int i = 1; i < 20000; ++i)
    big.executions.push_back(exec(i));
  REQUIRE(!db->commit(big));
  read_all(20000);
  CHECK(test::mapped_kib(file) > 2048);
  REQUIRE(!db->drop_mapped_pages());
  CHECK(test::mapped_kib(file) < 64);
  // Opened again: the same size, mapped anew.
  REQUIRE(!db->release_write_cache());
  read_all(20000);
  CHECK(test::mapped_kib(file) > 2048);
  REQUIRE(!db->drop_mapped_pages());
  CHECK(test::mapped_kib(file) < 64);
  CHECK(db->mapped_page_drops() == 3);
  check_reads_and_writes(*db);
}

TEST_CASE("reads and writes from other threads while the mapped pages are dropped again and "
          "again see every record",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = store_with(dir, 5000);
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&, t] {
      for (int i = t; !done.load(); i = (i + 37) % 5000) {
        auto x = db->execution(exec(i).id);
        if (!x || x->inputs != exec(i).inputs)
          failures.fetch_add(1);
      }
    });
  int written = 5000;
  for (int round = 0; round < 200; ++round) {
    REQUIRE(!db->drop_mapped_pages());
    write_batch more;
    for (int i = 0; i < 10; ++i)
      more.executions.push_back(exec(written++));
    REQUIRE(!db->commit(more));
  }
  done.store(true);
  for (auto& r : readers)
    r.join();
  CHECK(failures.load() == 0);
  CHECK(db->mapped_page_drops() == 200);
  CHECK(get(db->execution(exec(written - 1).id)).inputs == exec(written - 1).inputs);
}

TEST_CASE("releasing the write cache after a large transaction keeps every record and gives "
          "LMDB's pages back",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = store_with(dir, 20000);
  auto before = allocated();
  REQUIRE(!db->release_write_cache());
  auto after = allocated();
  if (before && after) {
    INFO("allocated before " << *before << " B, after " << *after << " B");
    // About 8 MB of records: their dirty pages were kept until now.
    CHECK(*before > *after + (size_t{4} << 20));
  } else {
    WARN("no heap figures in this build: the memory is not checked");
  }
  // Everything reads as before, and the store writes again.
  check_reads_and_writes(*db);
}

TEST_CASE("reads from other threads wait for a release of the write cache and then succeed",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = get(store::open(store_options{dir.path + "/home"}));
  write_batch b;
  b.executions.push_back(exec(1));
  REQUIRE(!db->commit(b));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&] {
      while (!done.load())
        if (!db->execution(exec(1).id))
          failures.fetch_add(1);
    });
  for (int i = 0; i < 20; ++i)
    REQUIRE(!db->release_write_cache());
  done.store(true);
  for (auto& r : readers)
    r.join();
  CHECK(failures.load() == 0);
}

TEST_CASE("the store writer hands LMDB's write cache back once idle after a large commit, "
          "and writes on afterwards",
          "[persistence][store][writer]") {
  writer_fixture fx;
  auto& db = fx.db;
  auto write = [&](write_batch b) { return fx.write(std::move(b)); };
  write_batch big;
  for (int i = 0; i < 2000; ++i)
    big.executions.push_back(exec(i));
  REQUIRE(write(std::move(big)));
  // About a second without writes, then one release (bounded wait).
  CHECK(test::eventually([&] { return db->write_cache_releases() == 1; },
                         std::chrono::seconds{20}));
  CHECK(get(db->execution(exec(1999).id)).id == exec(1999).id);
  write_batch small;
  small.executions.push_back(exec(2000));
  REQUIRE(write(std::move(small)));
  CHECK(get(db->execution(exec(2000).id)).id == exec(2000).id);
}

TEST_CASE("the store writer drops the store's mapped pages once the process's resident file "
          "pages grew by 2 MiB since the last drop, and not before",
          "[persistence][store][writer]") {
  writer_fixture fx;
  auto& db = fx.db;
  auto file = fx.dir.path + "/home/data.mdb";
  int next = 0;
  auto write = [&](int n) {
    write_batch b;
    for (int i = 0; i < n; ++i)
      b.executions.push_back(exec(next++));
    return fx.write(std::move(b));
  };
  // The writer answers a write before it looks at the growth: a message
  // it answers after that look (it takes its messages in order) makes the
  // drop count exact, and no read below races with the look.
  auto settled_drops = [&] {
    fx.self->request(fx.writer, caf::infinite, unsubscribe_atom::value,
                       caf::actor_cast<caf::actor>(fx.self))
      .receive([](bool) {}, [&](caf::error& err) { FAIL(fx.sys.render(err)); });
    return db->mapped_page_drops();
  };
  // About 6 MB of records.
  for (int k = 0; k < 10; ++k)
    REQUIRE(write(2000));
  auto drops = settled_drops();
  // Reading every record maps the whole file (a reader beside the writer).
  for (int i = 0; i < next; i += 7)
    REQUIRE(get(db->execution(exec(i).id)).id == exec(i).id);
  auto read_all = test::mapped_kib(file);
  INFO("mapped after reading everything: " << read_all << " KiB");
  REQUIRE(read_all > 4096);
  // The next commit sees the growth and drops the pages.
  REQUIRE(write(1));
  CHECK(settled_drops() == drops + 1);
  CHECK(test::mapped_kib(file) < 64);
  // Small commits map a few pages each: no drop.
  for (int k = 0; k < 5; ++k)
    REQUIRE(write(1));
  CHECK(settled_drops() == drops + 1);
  auto after = test::mapped_kib(file);
  INFO("mapped after five small commits: " << after << " KiB");
  CHECK(after > 0);
  CHECK(after < 2048);
  CHECK(get(db->execution(exec(next - 1).id)).id == exec(next - 1).id);
}
