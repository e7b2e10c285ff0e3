// Tests of canopy::core::store's status index and counts (schema 3): listings by
// status and of roots walk the index, every status change and deletion keeps
// it, a materialised compact snapshot moves its executions, and a schema-2
// home opens as it is and gets the index with its first write.

#include "persistence/store.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "persistence/duration.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::store_test;

namespace {

using counts = std::array<uint64_t, 6>;

std::vector<std::string> ids_of(const std::vector<execution_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.id);
  return out;
}

std::vector<std::string> listed(store& db, std::optional<execution_status> s, bool roots_only,
                                size_t limit = 0, const std::string& before = {}) {
  execution_filter f;
  f.status = s;
  f.roots_only = roots_only;
  f.limit = limit;
  f.before = before;
  return ids_of(get(db.list(f)));
}

/// Roots a0..a5 and a child of a0, with fresh time-ordered ids.
struct history {
  std::vector<std::string> roots;
  std::string child;
};

history fill(store& db) {
  history h;
  write_batch b;
  const execution_status statuses[] = {execution_status::completed, execution_status::failed,
                                       execution_status::completed, execution_status::stopped,
                                       execution_status::running, execution_status::completed};
  for (auto s : statuses) {
    h.roots.push_back(make_execution_id());
    b.executions.push_back(make_exec(h.roots.back(), "g", s));
  }
  // The child first live, as a run writes it: in the children index.
  h.child = make_execution_id();
  b.executions.push_back(make_exec(h.child, "g", execution_status::running, h.roots[0]));
  b.executions.push_back(make_exec(h.child, "g", execution_status::completed, h.roots[0]));
  commit_ok(db, b);
  return h;
}

} // namespace

// -- the index ---------------------------------------------------------------------------

TEST_CASE("listings by status follow every status change and deletion, newest first",
          "[persistence][store][index]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto h = fill(*db);
  auto& r = h.roots;
  using es = execution_status;
  CHECK(listed(*db, es::completed, true) == std::vector<std::string>{r[5], r[2], r[0]});
  CHECK(listed(*db, es::completed, false) == std::vector<std::string>{h.child, r[5], r[2], r[0]});
  CHECK(listed(*db, es::completed, true, 2) == std::vector<std::string>{r[5], r[2]});
  CHECK(listed(*db, es::completed, true, 0, r[2]) == std::vector<std::string>{r[0]});
  CHECK(listed(*db, std::nullopt, true, 3) == std::vector<std::string>{r[5], r[4], r[3]});
  CHECK(listed(*db, std::nullopt, true, 0, r[1]) == std::vector<std::string>{r[0]});
  CHECK(listed(*db, es::queued, false).empty());
  CHECK(get(db->status_counts()) == counts{0, 1, 0, 1, 4, 1});
  // A status change moves the execution; a deletion removes it.
  write_batch b;
  auto ended = get(db->execution(r[4]));
  ended.status = es::failed;
  b.executions.push_back(ended);
  b.deleted_executions.push_back(r[2]);
  commit_ok(*db, b);
  CHECK(listed(*db, es::running, true).empty());
  CHECK(listed(*db, es::failed, true) == std::vector<std::string>{r[4], r[1]});
  CHECK(listed(*db, es::completed, true) == std::vector<std::string>{r[5], r[0]});
  CHECK(get(db->status_counts()) == counts{0, 0, 0, 1, 3, 2});
  write_batch t;
  t.deleted_trees.push_back(r[0]);
  commit_ok(*db, t);
  CHECK(listed(*db, es::completed, false) == std::vector<std::string>{r[5]});
  CHECK(get(db->status_counts()) == counts{0, 0, 0, 1, 1, 2});
}

TEST_CASE("a listing by status reads only the records of that status",
          "[persistence][store][index]") {
  test::temp_dir dir;
  std::string failed;
  {
    auto db = open_store(dir.path);
    failed = fill(*db).roots[1];
  }
  // A newer record that does not decode, outside the index: a walk of the
  // records would stop at it; the index never reads it.
  with_raw_lmdb(dir.path, [&](MDB_txn* txn, auto dbi_of) {
    raw_put(txn, dbi_of("executions"), make_execution_id(), "\x81\xa2id\xc1");
  });
  auto db = open_store(dir.path);
  CHECK(listed(*db, execution_status::failed, true) == std::vector<std::string>{failed});
  CHECK(listed(*db, execution_status::failed, false) == std::vector<std::string>{failed});
  CHECK(listed(*db, std::nullopt, true, 2).size() == 2);
}

TEST_CASE("a materialised compact snapshot moves its executions in the index and counts",
          "[persistence][store][index]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto root = make_execution_id(), child = make_execution_id();
  write_batch live;
  live.executions.push_back(make_exec(root, "g", execution_status::running));
  live.executions.push_back(make_exec(child, "g", execution_status::running, root));
  commit_ok(*db, live);
  write_batch stop;
  auto r = get(db->execution(root));
  r.status = execution_status::stopped;
  r.reason = step_reason::requested;
  stop.executions.push_back(r);
  subtree_stop s;
  s.target = root;
  s.root_id = root;
  s.child_reason = step_reason::parent_stopped;
  s.time = now_ms();
  s.events = 1;
  stop.subtree_stops.push_back(s);
  commit_ok(*db, stop);
  // Covered: counted as stored, listed as resolved.
  CHECK(get(db->status_counts()) == counts{0, 1, 0, 1, 0, 0});
  CHECK(listed(*db, execution_status::running, false).empty());
  CHECK(listed(*db, execution_status::stopped, false) == std::vector<std::string>{child, root});
  REQUIRE(get(db->materialize(root)) == materialize_outcome::done);
  CHECK(get(db->status_counts()) == counts{0, 0, 0, 2, 0, 0});
  CHECK(listed(*db, execution_status::stopped, false) == std::vector<std::string>{child, root});
  CHECK(listed(*db, execution_status::running, false).empty());
}

// -- migration ---------------------------------------------------------------------------

TEST_CASE("a schema-2 home opens as it is and its first write builds the status index",
          "[persistence][store][index][migration]") {
  test::temp_dir dir;
  history h;
  {
    auto db = open_store(dir.path);
    h = fill(*db);
    // More than one build transaction's worth.
    for (int n = 0; n < 3; ++n) {
      write_batch b;
      for (int i = 0; i < 1500; ++i) {
        auto id = make_execution_id();
        b.executions.push_back(make_exec(id, "bulk", execution_status::completed));
      }
      commit_ok(*db, b);
    }
  }
  // What the release before wrote: no index, no counts, schema "2".
  with_raw_lmdb(dir.path, [&](MDB_txn* txn, auto dbi_of) {
    REQUIRE(mdb_drop(txn, dbi_of("by_status"), 1) == 0);
    auto meta = dbi_of("meta");
    for (char s = '0'; s < '6'; ++s) {
      std::string key = std::string{"count"} + '\0' + s;
      MDB_val k{key.size(), key.data()};
      mdb_del(txn, meta, &k, nullptr);
    }
    raw_put(txn, meta, "schema", "2");
  });
  auto& r = h.roots;
  {
    auto db = open_store(dir.path);
    CHECK(get(db->schema()) == "2");
    CHECK(db->needs_migration());
    // Read as it is: the records are walked, the counts counted.
    CHECK(listed(*db, execution_status::failed, true) == std::vector<std::string>{r[1]});
    CHECK(get(db->status_counts()) == counts{0, 1, 0, 1, 4504, 1});
    write_batch b;
    auto x = get(db->execution(r[4]));
    x.status = execution_status::completed;
    b.executions.push_back(x);
    commit_ok(*db, b);
    CHECK(get(db->schema()) == "4");
    CHECK_FALSE(db->needs_migration());
    CHECK(get(db->status_counts()) == counts{0, 0, 0, 1, 4505, 1});
    CHECK(listed(*db, execution_status::running, false).empty());
    CHECK(listed(*db, execution_status::failed, true) == std::vector<std::string>{r[1]});
    CHECK(listed(*db, execution_status::completed, false, 1).size() == 1);
    CHECK(listed(*db, execution_status::completed, false).size() == 4505);
  }
  // The next open reads the index.
  auto db = open_store(dir.path);
  CHECK_FALSE(db->needs_migration());
  CHECK(listed(*db, execution_status::stopped, true) == std::vector<std::string>{r[3]});
}
