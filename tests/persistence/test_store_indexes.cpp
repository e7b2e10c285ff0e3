// Tests of canopy::core::store's indexes and deletions (steps, children, listings,
// tree events, live executions, deleted executions and trees), each in its
// own temporary home.

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

// -- indexes ---------------------------------------------------------------------

TEST_CASE("steps() returns only that execution's steps", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  for (auto id : {"a", "ab", "b", "a0"})
    b.executions.push_back(make_exec(id));
  b.steps.push_back(make_step("a", "y"));
  b.steps.push_back(make_step("a", "x"));
  b.steps.push_back(make_step("ab", "x"));
  b.steps.push_back(make_step("ab", "z"));
  b.steps.push_back(make_step("a0", "q"));
  b.steps.push_back(make_step("b", "w"));
  commit_ok(*db, b);
  auto a = get(db->steps("a"));
  CHECK(names_of(a) == std::vector<std::string>{"x", "y"});
  for (auto& s : a)
    CHECK(s.execution_id == "a");
  CHECK(names_of(get(db->steps("ab"))) == std::vector<std::string>{"x", "z"});
  CHECK(names_of(get(db->steps("a0"))) == std::vector<std::string>{"q"});
  CHECK(names_of(get(db->steps("b"))) == std::vector<std::string>{"w"});
  CHECK(get(db->steps("")).empty());
  CHECK(get(db->steps("c")).empty());
  CHECK(get(db->steps("abc")).empty());
}

TEST_CASE("children() lists the direct children oldest first", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto p = make_execution_id();
  auto c1 = make_execution_id();
  auto c2 = make_execution_id();
  auto gc = make_execution_id();
  auto other = make_execution_id();
  write_batch b;
  // Written out of order: the index sorts.
  b.executions.push_back(make_exec(p));
  b.executions.push_back(make_exec(c2, "g", execution_status::queued, p, p));
  b.executions.push_back(make_exec(gc, "g", execution_status::queued, c1, p));
  b.executions.push_back(make_exec(c1, "g", execution_status::queued, p, p));
  b.executions.push_back(make_exec(other));
  // Prefix isolation: "p" and "pq" are different parents.
  b.executions.push_back(make_exec("p"));
  b.executions.push_back(make_exec("pq"));
  b.executions.push_back(make_exec("k1", "g", execution_status::queued, "p", "p"));
  b.executions.push_back(make_exec("k2", "g", execution_status::queued, "pq", "pq"));
  commit_ok(*db, b);
  CHECK(get(db->children(p)) == std::vector<std::string>{c1, c2});
  CHECK(get(db->children(c1)) == std::vector<std::string>{gc});
  CHECK(get(db->children(c2)).empty());
  CHECK(get(db->children(other)).empty());
  CHECK(get(db->children("p")) == std::vector<std::string>{"k1"});
  CHECK(get(db->children("pq")) == std::vector<std::string>{"k2"});
  // Rewriting a child does not duplicate its index entry.
  write_batch b2;
  b2.executions.push_back(make_exec(c1, "g", execution_status::running, p, p));
  commit_ok(*db, b2);
  CHECK(get(db->children(p)) == std::vector<std::string>{c1, c2});
}

TEST_CASE("list() returns newest first, roots only, filtered by status and graph",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto r1 = make_exec(make_execution_id(), "alpha", execution_status::completed);
  auto r2 = make_exec(make_execution_id(), "beta", execution_status::failed);
  auto c = make_exec(make_execution_id(), "alpha", execution_status::completed, r2.id, r2.id);
  auto r3 = make_exec(make_execution_id(), "alpha", execution_status::running);
  write_batch b;
  for (auto* r : {&r3, &c, &r1, &r2})
    b.executions.push_back(*r);
  commit_ok(*db, b);
  SECTION("roots only, newest first") {
    CHECK(ids_of(get(db->list({}))) == std::vector<std::string>{r3.id, r2.id, r1.id});
  }
  SECTION("with children") {
    execution_filter f;
    f.roots_only = false;
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{r3.id, c.id, r2.id, r1.id});
  }
  SECTION("by status") {
    execution_filter f;
    f.status = execution_status::completed;
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{r1.id});
    f.roots_only = false;
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{c.id, r1.id});
    f.status = execution_status::stopped;
    CHECK(get(db->list(f)).empty());
  }
  SECTION("by graph") {
    execution_filter f;
    f.graph = "alpha";
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{r3.id, r1.id});
    f.graph = "beta";
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{r2.id});
    f.graph = "gamma";
    CHECK(get(db->list(f)).empty());
  }
  SECTION("by status and graph together, with a limit") {
    execution_filter f;
    f.graph = "alpha";
    f.roots_only = false;
    f.limit = 2;
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{r3.id, c.id});
    f.status = execution_status::completed;
    f.limit = 1;
    CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{c.id});
  }
}

TEST_CASE("list() with created_after keeps what was created since, and stops at old ids",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto now = now_ms();
  // An id made long ago (its time prefix is 2020), then three made now whose
  // records say when they were created.
  auto old_ms = int64_t{1'577'836'800'000};
  std::string old_id(26, '0');
  {
    static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
    auto ms = static_cast<uint64_t>(old_ms);
    for (int i = 9; i >= 0; --i, ms >>= 5)
      old_id[static_cast<size_t>(i)] = alphabet[ms & 31];
  }
  REQUIRE(execution_id_ms(old_id) == old_ms);
  auto ancient = make_exec(old_id, "alpha", execution_status::completed);
  ancient.created_at = old_ms;
  auto two_hours = make_exec(make_execution_id(), "alpha", execution_status::completed);
  two_hours.created_at = now - 2 * 3'600'000;
  auto ten_minutes = make_exec(make_execution_id(), "beta", execution_status::failed);
  ten_minutes.created_at = now - 10 * 60'000;
  auto fresh = make_exec(make_execution_id(), "alpha", execution_status::running);
  fresh.created_at = now;
  CHECK(execution_id_ms(fresh.id) >= now - 1000);
  CHECK(execution_id_ms("not an id") == -1);
  CHECK(execution_id_ms(std::string(26, 'u')) == -1); // 'u' is not in the alphabet
  write_batch b;
  for (auto* r : {&ancient, &two_hours, &ten_minutes, &fresh})
    b.executions.push_back(*r);
  commit_ok(*db, b);

  execution_filter f;
  f.created_after = now - 30 * 60'000;
  CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{fresh.id, ten_minutes.id});
  f.created_after = now - 3 * 3'600'000;
  CHECK(ids_of(get(db->list(f))) ==
        std::vector<std::string>{fresh.id, ten_minutes.id, two_hours.id});
  f.graph = "alpha";
  CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{fresh.id, two_hours.id});
  f.limit = 1;
  CHECK(ids_of(get(db->list(f))) == std::vector<std::string>{fresh.id});
  // Without the bound the old one is there; with one after it, it is not.
  execution_filter any;
  CHECK(get(db->list(any)).size() == 4);
  any.created_after = old_ms + 1;
  CHECK(get(db->list(any)).size() == 3);
}

TEST_CASE("tree_events honours after and limit and keeps trees apart",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  // Interleaved trees whose root ids are prefixes of each other.
  std::vector<uint64_t> a_seqs, ab_seqs;
  for (int i = 0; i < 10; ++i) {
    write_batch b;
    b.events.push_back(make_event("a", "a", event_type::step_output, json{{"i", i}}));
    b.events.push_back(make_event("ab-child", "ab", event_type::step_output, json{{"i", i}}));
    if (i % 3 == 0)
      b.events.push_back(make_event("a-child", "a", event_type::step_output, json{{"i", i}}));
    commit_ok(*db, b);
    for (auto& e : b.events)
      (e.root_id == "a" ? a_seqs : ab_seqs).push_back(e.seq);
  }
  REQUIRE(a_seqs.size() == 14);
  CHECK(seqs_of(get(db->tree_events("a"))) == a_seqs);
  CHECK(seqs_of(get(db->tree_events("ab"))) == ab_seqs);
  CHECK(get(db->tree_events("")).empty());
  CHECK(get(db->tree_events("b")).empty());
  SECTION("after skips everything up to and including that seq") {
    auto after = a_seqs[5];
    std::vector<uint64_t> want(a_seqs.begin() + 6, a_seqs.end());
    CHECK(seqs_of(get(db->tree_events("a", after))) == want);
    // A seq that belongs to another tree works as a cursor too.
    auto foreign = ab_seqs[3];
    want.clear();
    for (auto s : a_seqs)
      if (s > foreign)
        want.push_back(s);
    CHECK(seqs_of(get(db->tree_events("a", foreign))) == want);
    CHECK(get(db->tree_events("a", a_seqs.back())).empty());
    CHECK(get(db->tree_events("a", 1u << 30)).empty());
  }
  SECTION("limit caps the answer from the start of the range") {
    CHECK(seqs_of(get(db->tree_events("a", 0, 3)))
          == std::vector<uint64_t>(a_seqs.begin(), a_seqs.begin() + 3));
    CHECK(seqs_of(get(db->tree_events("a", a_seqs[2], 2)))
          == std::vector<uint64_t>{a_seqs[3], a_seqs[4]});
    CHECK(seqs_of(get(db->tree_events("a", 0, 1000))) == a_seqs);
  }
  SECTION("paging with after and limit visits every event once") {
    std::vector<uint64_t> seen;
    uint64_t cursor = 0;
    for (;;) {
      auto page = get(db->tree_events("a", cursor, 4));
      if (page.empty())
        break;
      CHECK(page.size() <= 4);
      for (auto& e : page)
        seen.push_back(e.seq);
      cursor = page.back().seq;
    }
    CHECK(seen == a_seqs);
  }
}

TEST_CASE("live() follows the execution status", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto put = [&](const std::string& id, execution_status s) {
    write_batch b;
    b.executions.push_back(make_exec(id, "g", s));
    commit_ok(*db, b);
  };
  put("e2", execution_status::queued);
  put("e1", execution_status::running);
  put("e3", execution_status::completed);
  CHECK(ids_of(get(db->live())) == std::vector<std::string>{"e1", "e2"});
  put("e2", execution_status::running);
  put("e1", execution_status::stopping);
  CHECK(ids_of(get(db->live())) == std::vector<std::string>{"e1", "e2"});
  auto live = get(db->live());
  CHECK(live[0].status == execution_status::stopping);
  CHECK(live[1].status == execution_status::running);
  SECTION("every terminal status removes the entry") {
    put("e1", execution_status::stopped);
    CHECK(ids_of(get(db->live())) == std::vector<std::string>{"e2"});
    put("e2", execution_status::failed);
    CHECK(get(db->live()).empty());
    put("e4", execution_status::running);
    put("e4", execution_status::completed);
    CHECK(get(db->live()).empty());
  }
  SECTION("a resumed execution is live again") {
    put("e3", execution_status::running);
    CHECK(ids_of(get(db->live())) == std::vector<std::string>{"e1", "e2", "e3"});
  }
  SECTION("the last write of a batch decides") {
    write_batch b;
    b.executions.push_back(make_exec("e5", "g", execution_status::queued));
    b.executions.push_back(make_exec("e5", "g", execution_status::running));
    b.executions.push_back(make_exec("e5", "g", execution_status::completed));
    b.executions.push_back(make_exec("e6", "g", execution_status::completed));
    b.executions.push_back(make_exec("e6", "g", execution_status::running));
    commit_ok(*db, b);
    CHECK(ids_of(get(db->live())) == std::vector<std::string>{"e1", "e2", "e6"});
  }
}

TEST_CASE("deleted_executions removes the record, steps, graph and child index entry",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(make_exec("p", "g", execution_status::running));
  b.executions.push_back(make_exec("c", "g", execution_status::running, "p", "p"));
  b.executions.push_back(make_exec("cd", "g", execution_status::running, "p", "p"));
  for (auto id : {"p", "c", "cd"}) {
    b.steps.push_back(make_step(id, "s1"));
    b.steps.push_back(make_step(id, "s2"));
    b.graphs.emplace_back(id, stored_graph{json{{"steps", json::object()}}, "/", json::object()});
  }
  b.events.push_back(make_event("c", "p", event_type::execution_queued));
  commit_ok(*db, b);
  REQUIRE(get(db->children("p")) == std::vector<std::string>{"c", "cd"});

  write_batch del;
  del.deleted_executions.push_back("c");
  commit_ok(*db, del);

  auto rec = db->execution("c");
  REQUIRE_FALSE(rec);
  CHECK(is_errc(rec.error(), persistence_errc::not_found));
  CHECK(get(db->steps("c")).empty());
  auto g = db->graph("c");
  REQUIRE_FALSE(g);
  CHECK(is_errc(g.error(), persistence_errc::not_found));
  CHECK(get(db->children("p")) == std::vector<std::string>{"cd"});
  CHECK(ids_of(get(db->live())) == std::vector<std::string>{"cd", "p"});
  execution_filter all;
  all.roots_only = false;
  CHECK(ids_of(get(db->list(all))) == std::vector<std::string>{"p", "cd"});
  // Neighbours, including one whose id extends the deleted one, are untouched.
  CHECK(names_of(get(db->steps("cd"))) == std::vector<std::string>{"s1", "s2"});
  CHECK(names_of(get(db->steps("p"))) == std::vector<std::string>{"s1", "s2"});
  CHECK(get(db->execution("cd")).id == "cd");
  CHECK(get(db->graph("cd")).base_dir == "/");
  CHECK(get(db->graph("p")).base_dir == "/");

  SECTION("deleting an unknown id is harmless") {
    write_batch again;
    again.deleted_executions.push_back("c");
    again.deleted_executions.push_back("never-existed");
    commit_ok(*db, again);
    CHECK(get(db->children("p")) == std::vector<std::string>{"cd"});
  }
  SECTION("a deleted execution can be written again in a later batch") {
    write_batch again;
    again.executions.push_back(make_exec("c", "g", execution_status::queued, "p", "p"));
    commit_ok(*db, again);
    CHECK(get(db->children("p")) == std::vector<std::string>{"c", "cd"});
    CHECK(get(db->steps("c")).empty());
  }
}

TEST_CASE("deleted_trees removes a settled root's whole tree and leaves a live one and its "
          "neighbours alone",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  // Tree r: r → c → g (grandchild); tree q, live; another root r2.
  b.executions.push_back(make_exec("r", "g", execution_status::running));
  b.executions.push_back(make_exec("c", "g", execution_status::running, "r", "r"));
  auto grand = make_exec("g", "g", execution_status::running, "c", "r");
  grand.depth = 2;
  b.executions.push_back(grand);
  b.executions.push_back(make_exec("q", "g", execution_status::running));
  b.executions.push_back(make_exec("r2", "g", execution_status::completed));
  for (auto id : {"r", "c", "g", "q", "r2"}) {
    b.steps.push_back(make_step(id, "s1"));
    b.graphs.emplace_back(id, stored_graph{json{{"steps", json::object()}}, "/", json::object()});
  }
  b.events.push_back(make_event("r", "r", event_type::execution_queued));
  b.events.push_back(make_event("g", "r", event_type::execution_queued));
  b.events.push_back(make_event("r2", "r2", event_type::execution_queued));
  tree_counters tc;
  tc.steps = 3;
  b.counters.emplace_back("r", tc);
  commit_ok(*db, b);
  // The whole tree settles (children first, as a snapshot writes them).
  write_batch end;
  for (auto id : {"g", "c", "r"}) {
    auto x = get(db->execution(id));
    x.status = execution_status::completed;
    end.executions.push_back(x);
  }
  commit_ok(*db, end);

  SECTION("a live root is kept whole") {
    write_batch del;
    del.deleted_trees.push_back("q");
    commit_ok(*db, del);
    CHECK(get(db->execution("q")).id == "q");
    CHECK(names_of(get(db->steps("q"))) == std::vector<std::string>{"s1"});
  }
  SECTION("a child id is not a tree") {
    write_batch del;
    del.deleted_trees.push_back("c");
    commit_ok(*db, del);
    CHECK(get(db->execution("c")).id == "c");
  }
  SECTION("a settled root goes with every execution below it") {
    write_batch del;
    del.deleted_trees.push_back("r");
    commit_ok(*db, del);
    for (auto id : {"r", "c", "g"}) {
      INFO(id);
      auto rec = db->execution(id);
      REQUIRE_FALSE(rec);
      CHECK(is_errc(rec.error(), persistence_errc::not_found));
      CHECK(get(db->steps(id)).empty());
      CHECK_FALSE(db->graph(id));
      CHECK(get(db->children(id)).empty());
    }
    CHECK(get(db->tree_events("r", 0)).empty());
    CHECK(get(db->counters("r")).steps == 0);
    // Its neighbours are untouched.
    CHECK(get(db->execution("r2")).id == "r2");
    CHECK(seqs_of(get(db->tree_events("r2", 0))).size() == 1);
    CHECK(get(db->execution("q")).id == "q");
    execution_filter all;
    all.roots_only = false;
    CHECK(ids_of(get(db->list(all))) == std::vector<std::string>{"r2", "q"});
  }
}

TEST_CASE("a deleted tree takes the stop requests of its executions with it",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(make_exec("r", "g", execution_status::running));
  b.executions.push_back(make_exec("c", "g", execution_status::running, "r", "r"));
  b.executions.push_back(make_exec("q", "g", execution_status::running));
  commit_ok(*db, b);
  // A request on the child, one on the root, one on another tree.
  write_batch asks;
  for (auto [stop_id, target] : {std::pair<const char*, const char*>{"s-child", "c"},
                                 {"s-root", "r"},
                                 {"s-other", "q"}}) {
    stop_record req;
    req.id = stop_id;
    req.target = target;
    req.requested_at = 1;
    req.who = "test";
    asks.stops.push_back(req);
  }
  commit_ok(*db, asks);
  // The tree settles (its requests are answered), then goes.
  write_batch end;
  for (auto id : {"c", "r"}) {
    auto x = get(db->execution(id));
    x.status = execution_status::stopped;
    end.executions.push_back(x);
  }
  commit_ok(*db, end);
  REQUIRE(get(db->stop("s-child")).handled);
  REQUIRE(get(db->stop("s-root")).handled);
  write_batch del;
  del.deleted_trees.push_back("r");
  commit_ok(*db, del);
  for (auto id : {"s-child", "s-root"}) {
    INFO(id);
    auto gone = db->stop(id);
    REQUIRE_FALSE(gone);
    CHECK(is_errc(gone.error(), persistence_errc::not_found));
  }
  // The other tree's request is untouched, still pending.
  auto kept = get(db->stop("s-other"));
  CHECK_FALSE(kept.handled);
  REQUIRE(get(db->pending_stops()).size() == 1);
  CHECK(get(db->pending_stops()).front().id == "s-other");
}

TEST_CASE("deleting a planned child leaves none of its events in its root's log",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  // A root with two children; events of all three in the root's log, and a
  // grandchild's tree of its own (a root whose id extends the child's).
  write_batch b;
  b.executions.push_back(make_exec("r", "g", execution_status::running));
  b.executions.push_back(make_exec("c", "g", execution_status::queued, "r", "r"));
  b.executions.push_back(make_exec("k", "g", execution_status::running, "r", "r"));
  b.executions.push_back(make_exec("c2", "g", execution_status::running));
  b.steps.push_back(make_step("c", "s1"));
  b.graphs.emplace_back("c", stored_graph{json{{"steps", json::object()}}, "/", json::object()});
  b.events.push_back(make_event("r", "r", event_type::execution_started));
  b.events.push_back(make_event("c", "r", event_type::execution_queued));
  b.events.push_back(make_event("k", "r", event_type::execution_queued));
  b.events.push_back(make_event("c", "r", event_type::step_pending));
  b.events.push_back(make_event("c2", "c2", event_type::execution_queued));
  commit_ok(*db, b);
  REQUIRE(get(db->tree_events("r")).size() == 4);

  // A stop during its creation deletes the planned child, and writes on.
  write_batch del;
  del.deleted_executions.push_back("c");
  del.events.push_back(make_event("r", "r", event_type::execution_stopped));
  commit_ok(*db, del);

  std::vector<std::string> left;
  for (auto& e : get(db->tree_events("r")))
    left.push_back(e.execution_id + ":" + to_string(e.type));
  CHECK(left == std::vector<std::string>{"r:execution.started", "k:execution.queued",
                                         "r:execution.stopped"});
  CHECK(get(db->children("r")) == std::vector<std::string>{"k"});
  auto rec = db->execution("c");
  REQUIRE_FALSE(rec);
  CHECK(is_errc(rec.error(), persistence_errc::not_found));
  CHECK(get(db->steps("c")).empty());
  auto g = db->graph("c");
  REQUIRE_FALSE(g);
  CHECK(is_errc(g.error(), persistence_errc::not_found));
  CHECK(ids_of(get(db->live())) == std::vector<std::string>{"c2", "k", "r"});
  // Other trees keep their events.
  CHECK(get(db->tree_events("c2")).size() == 1);
}

TEST_CASE("a child created and deleted in one commit by nested batches leaves no events",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(make_exec("r", "g", execution_status::running));
  b.events.push_back(make_event("r", "r", event_type::execution_started));
  // Two nested levels each plan a child and delete it (a stop during creation
  // gathered level by level into one snapshot).
  for (auto id : {"c1", "c2"}) {
    write_batch planned;
    planned.executions.push_back(make_exec(id, "g", execution_status::queued, "r", "r"));
    planned.events.push_back(make_event(id, "r", event_type::execution_queued));
    write_batch removal;
    removal.deleted_executions.push_back(id);
    removal.events.push_back(make_event("r", "r", event_type::step_pending));
    planned.append(std::move(removal));
    b.append(std::move(planned));
  }
  commit_ok(*db, b);
  std::vector<std::string> left;
  for (auto& e : get(db->tree_events("r")))
    left.push_back(e.execution_id + ":" + to_string(e.type));
  CHECK(left == std::vector<std::string>{"r:execution.started", "r:step.pending",
                                         "r:step.pending"});
  CHECK(get(db->children("r")).empty());
  CHECK_FALSE(db->execution("c1"));
  CHECK_FALSE(db->execution("c2"));
}
