// Tests of canopy::core::store's interrupted roots (schema 4): the roots
// stored `stopped` with reason `interrupted` are listed from their own index
// range, which follows every change of such a root; a schema-3 home finds
// them among its stopped roots until its first write lists them; a schema-2
// home and one an older release left mid-build get them with the index.

#include "persistence/store.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <string>
#include <vector>

#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::store_test;

namespace {

/// The keys of `by_status` that start with `prefix`, read raw.
std::vector<std::string> raw_keys(const std::string& home, const std::string& prefix) {
  std::vector<std::string> out;
  with_raw_lmdb(home, [&](MDB_txn* txn, auto dbi_of) {
    MDB_cursor* cur = nullptr;
    REQUIRE(mdb_cursor_open(txn, dbi_of("by_status"), &cur) == 0);
    MDB_val k{prefix.size(), const_cast<char*>(prefix.data())}, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      std::string key{static_cast<const char*>(k.mv_data), k.mv_size};
      if (key.compare(0, prefix.size(), prefix) != 0)
        break;
      out.push_back(key);
    }
    mdb_cursor_close(cur);
  });
  return out;
}

/// The index prefix of interrupted roots (`stopped`, kind 'i').
const std::string interrupted_prefix = "3i";

execution_record stopped_root(const std::string& id, step_reason why) {
  auto x = make_exec(id, "g", execution_status::stopped);
  x.reason = why;
  return x;
}

std::vector<std::string> interrupted(store& db, size_t limit = 0, const std::string& before = {}) {
  execution_filter f;
  f.interrupted_only = true;
  f.limit = limit;
  f.before = before;
  std::vector<std::string> out;
  for (auto& x : get(db.list(f)))
    out.push_back(x.id);
  return out;
}

/// A history of `n` stopped roots, every `every`-th interrupted (the
/// others `requested`), one interrupted child and one completed root.
/// @returns the interrupted roots, newest first.
std::vector<std::string> stopped_history(store& db, int n, int every) {
  std::vector<std::string> out;
  write_batch b;
  for (int i = 0; i < n; ++i) {
    auto id = make_execution_id();
    bool hit = i % every == 0;
    auto why = hit ? step_reason::interrupted : step_reason::requested;
    b.executions.push_back(stopped_root(id, why));
    if (hit)
      out.insert(out.begin(), id);
  }
  auto parent = make_execution_id(), child = make_execution_id();
  b.executions.push_back(stopped_root(parent, step_reason::requested));
  auto kid = make_exec(child, "g", execution_status::stopped, parent);
  kid.reason = step_reason::interrupted;
  b.executions.push_back(kid);
  b.executions.push_back(make_exec(make_execution_id(), "g", execution_status::completed));
  commit_ok(db, b);
  return out;
}

/// A home whose store was closed after `stopped_history(n, every)`, as a
/// release before this one may have left it.
struct closed_history {
  test::temp_dir dir;
  std::vector<std::string> want; ///< its interrupted roots, newest first

  closed_history(int n, int every) {
    auto db = open_store(dir.path);
    want = stopped_history(*db, n, every);
  }
};

} // namespace

TEST_CASE("interrupted roots are listed apart and follow resumes, new stops and deletions",
          "[persistence][store][index]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto want = stopped_history(*db, 12, 4); // roots 0, 4 and 8
  REQUIRE(want.size() == 3);
  CHECK(get(db->schema()) == "4");
  CHECK(interrupted(*db) == want);
  CHECK(interrupted(*db, 2) == std::vector<std::string>{want[0], want[1]});
  CHECK(interrupted(*db, 0, want[1]) == std::vector<std::string>{want[2]});
  // A resume takes a root out; interrupted again, it is back; a stop by a
  // user (another reason) and a deletion take roots out for good.
  write_batch resume;
  auto x = get(db->execution(want[0]));
  x.status = execution_status::running;
  x.reason = step_reason::none;
  resume.executions.push_back(x);
  commit_ok(*db, resume);
  CHECK(interrupted(*db) == std::vector<std::string>{want[1], want[2]});
  write_batch again;
  again.executions.push_back(stopped_root(want[0], step_reason::interrupted));
  commit_ok(*db, again);
  CHECK(interrupted(*db) == want);
  write_batch other;
  other.executions.push_back(stopped_root(want[1], step_reason::requested));
  other.deleted_executions.push_back(want[2]);
  commit_ok(*db, other);
  CHECK(interrupted(*db) == std::vector<std::string>{want[0]});
  CHECK(raw_keys(dir.path, interrupted_prefix) == std::vector<std::string>{"3i" + want[0]});
  // The listing of stopped roots is the same as before: one entry each.
  execution_filter stopped;
  stopped.status = execution_status::stopped;
  CHECK(get(db->list(stopped)).size() == 12); // 11 roots (one deleted) and the parent
}

TEST_CASE("a schema-3 home finds its interrupted roots among the stopped ones until its first "
          "write lists them",
          "[persistence][store][index][migration]") {
  // More stopped roots than one listing transaction walks.
  closed_history h{4500, 7};
  auto& dir = h.dir;
  auto& want = h.want;
  // What the release before wrote: the status index, no interrupted roots.
  with_raw_lmdb(dir.path, [&](MDB_txn* txn, auto dbi_of) {
    auto by_status = dbi_of("by_status");
    MDB_cursor* cur = nullptr;
    REQUIRE(mdb_cursor_open(txn, by_status, &cur) == 0);
    MDB_val k{interrupted_prefix.size(), const_cast<char*>(interrupted_prefix.data())}, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
         rc == 0 && std::string{static_cast<const char*>(k.mv_data), 2} == interrupted_prefix;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
      REQUIRE(mdb_cursor_del(cur, 0) == 0);
    mdb_cursor_close(cur);
    raw_put(txn, dbi_of("meta"), "schema", "3");
  });
  REQUIRE(raw_keys(dir.path, interrupted_prefix).empty());
  {
    auto db = open_store(dir.path);
    CHECK(get(db->schema()) == "3");
    CHECK(db->needs_migration());
    CHECK(interrupted(*db) == want);
    CHECK(interrupted(*db, 5, want[2])
          == std::vector<std::string>(want.begin() + 3, want.begin() + 8));
    write_batch b;
    b.executions.push_back(make_exec(make_execution_id(), "g", execution_status::completed));
    commit_ok(*db, b);
    CHECK(get(db->schema()) == "4");
    CHECK_FALSE(db->needs_migration());
    CHECK(interrupted(*db) == want);
  }
  CHECK(raw_keys(dir.path, interrupted_prefix).size() == want.size());
  auto db = open_store(dir.path);
  CHECK_FALSE(db->needs_migration());
  CHECK(interrupted(*db) == want);
}

TEST_CASE("a home an older release left mid-build gets its index and interrupted roots built "
          "again from the start",
          "[persistence][store][index][migration]") {
  closed_history h{50, 5};
  auto& dir = h.dir;
  auto& want = h.want;
  // The older release's build under way: part of an index, no interrupted
  // roots, its own mark.
  with_raw_lmdb(dir.path, [&](MDB_txn* txn, auto dbi_of) {
    REQUIRE(mdb_drop(txn, dbi_of("by_status"), 0) == 0);
    raw_put(txn, dbi_of("by_status"), "3r" + want[0], "");
    raw_put(txn, dbi_of("meta"), "schema", "2>3");
  });
  auto db = open_store(dir.path);
  CHECK(get(db->schema()) == "2>3");
  CHECK(interrupted(*db) == want); // the records are walked
  write_batch b;
  b.executions.push_back(make_exec(make_execution_id(), "g", execution_status::completed));
  commit_ok(*db, b);
  CHECK(get(db->schema()) == "4");
  CHECK(interrupted(*db) == want);
  execution_filter stopped;
  stopped.status = execution_status::stopped;
  CHECK(get(db->list(stopped)).size() == 51);
  CHECK(get(db->status_counts())[static_cast<size_t>(execution_status::stopped)] == 52);
}
