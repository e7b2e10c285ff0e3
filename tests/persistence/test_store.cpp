// Tests of canopy::core::store against a real LMDB environment in a temporary home:
// opening and round trips. Every test opens its own home; nothing is shared
// between tests. (Indexes and deletion, agents, growth and concurrency: the
// other test_store_*.cpp files.)

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

// -- opening ---------------------------------------------------------------------

TEST_CASE("open creates the home folder and its databases", "[persistence][store]") {
  test::temp_dir dir;
  auto home = dir.path + "/nested/deeper/home";
  REQUIRE_FALSE(fs::exists(home));
  {
    auto db = open_store(home);
    CHECK(db->home() == home);
    CHECK(fs::is_directory(home));
    CHECK(fs::exists(home + "/data.mdb"));
    CHECK(get(db->last_seq()) == 0u);
    CHECK(get(db->list({})).empty());
    CHECK(get(db->live()).empty());
    write_batch b;
    b.executions.push_back(make_exec("x1"));
    commit_ok(*db, b);
  }
  // Reopening finds what was committed.
  auto db = open_store(home);
  CHECK(get(db->execution("x1")).id == "x1");
}

TEST_CASE("open fails with io_error when the home cannot be created",
          "[persistence][store]") {
  test::temp_dir dir;
  auto file = dir.write("plain-file", "not a folder");
  store_options opts;
  opts.home = file + "/home";
  auto db = store::open(opts);
  REQUIRE_FALSE(db);
  CHECK(is_errc(db.error(), persistence_errc::io_error));
}

// -- round trips -----------------------------------------------------------------

TEST_CASE("an execution record round-trips with every field", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  execution_record r;
  r.id = make_execution_id();
  r.graph = "research";
  r.status = execution_status::stopped;
  r.reason = step_reason::requested;
  r.error = "step 'x' failed: boom";
  r.parent_id = "parent-id";
  r.root_id = "root-id";
  r.depth = 3;
  r.parent_step = "review";
  r.inputs = json{{"topic", "actors"}, {"n", 4}, {"nested", {{"a", json::array({1, 2})}}}};
  r.outputs = json{{"report", "done"}};
  r.created_at = 1700000000001;
  r.started_at = 1700000000002;
  r.ended_at = 1700000000003;
  r.owner_pid = 4242;
  r.owner_start = 987654321;
  r.agent = "helper";
  r.node = "gpu-1";
  write_batch b;
  b.executions.push_back(r);
  commit_ok(*db, b);
  auto back = get(db->execution(r.id));
  CHECK(to_json(back) == to_json(r));
  CHECK(back.agent == "helper");
  CHECK(back.node == "gpu-1");
  CHECK(back.id == r.id);
  CHECK(back.status == execution_status::stopped);
  CHECK(back.reason == step_reason::requested);
  CHECK(back.error == r.error);
  CHECK(back.parent_id == "parent-id");
  CHECK(back.root_id == "root-id");
  CHECK(back.depth == 3);
  CHECK(back.parent_step == "review");
  CHECK(back.inputs == r.inputs);
  CHECK(back.outputs == r.outputs);
  CHECK(back.created_at == r.created_at);
  CHECK(back.started_at == r.started_at);
  CHECK(back.ended_at == r.ended_at);
  CHECK(back.owner_pid == 4242);
  CHECK(back.owner_start == 987654321u);
  SECTION("a null outputs stays null") {
    r.outputs = nullptr;
    write_batch b2;
    b2.executions.push_back(r);
    commit_ok(*db, b2);
    CHECK(get(db->execution(r.id)).outputs.is_null());
  }
  SECTION("an unknown id is not_found") {
    auto missing = db->execution("no-such-id");
    REQUIRE_FALSE(missing);
    CHECK(is_errc(missing.error(), persistence_errc::not_found));
  }
}

TEST_CASE("a step record round-trips with every field", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  step_record s;
  s.execution_id = "e1";
  s.step = "draft";
  s.status = step_status::failed;
  s.attempt = 3;
  s.result = json{{"exit_code", 1}, {"stdout", "x\ny"}, {"stderr", ""}, {"json", nullptr}};
  s.error = "exit code 1";
  s.reason = step_reason::sibling_failed;
  s.node = "worker-7";
  s.child_id = "child-1";
  s.pid = 31337;
  s.started_at = 1700000000010;
  s.ended_at = 1700000000020;
  write_batch b;
  b.executions.push_back(make_exec("e1"));
  b.steps.push_back(s);
  commit_ok(*db, b);
  auto steps = get(db->steps("e1"));
  REQUIRE(steps.size() == 1);
  CHECK(to_json(steps[0]) == to_json(s));
  CHECK(steps[0].status == step_status::failed);
  CHECK(steps[0].attempt == 3);
  CHECK(steps[0].result == s.result);
  CHECK(steps[0].error == "exit code 1");
  CHECK(steps[0].reason == step_reason::sibling_failed);
  CHECK(steps[0].node == "worker-7");
  CHECK(steps[0].child_id == "child-1");
  CHECK(steps[0].pid == 31337);
  CHECK(steps[0].started_at == s.started_at);
  CHECK(steps[0].ended_at == s.ended_at);
  // A later write of the same step replaces it.
  s.status = step_status::completed;
  s.attempt = 4;
  s.error = nullptr;
  write_batch b2;
  b2.steps.push_back(s);
  commit_ok(*db, b2);
  steps = get(db->steps("e1"));
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].status == step_status::completed);
  CHECK(steps[0].attempt == 4);
  CHECK(steps[0].error.is_null());
}

TEST_CASE("a stored graph round-trips", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  stored_graph g;
  g.document = json{{"name", "g"}, {"steps", {{"a", {{"fn", "noop"}}}}}};
  g.base_dir = "/some/folder";
  g.files = json{{"/some/folder/child.json", {{"steps", {{"b", {{"fn", "noop"}}}}}}}};
  write_batch b;
  b.executions.push_back(make_exec("e1"));
  b.graphs.emplace_back("e1", g);
  commit_ok(*db, b);
  auto back = get(db->graph("e1"));
  CHECK(back.document == g.document);
  CHECK(back.base_dir == g.base_dir);
  CHECK(back.files == g.files);
  auto missing = db->graph("e2");
  REQUIRE_FALSE(missing);
  CHECK(is_errc(missing.error(), persistence_errc::not_found));
}

TEST_CASE("the registered graphs of an owner list by name, newest version each, from a "
          "cursor",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  auto reg = [&](const std::string& owner, const std::string& name, int version) {
    registered_graph g;
    g.owner = owner;
    g.name = name;
    g.version = version;
    g.document = json{{"name", name}, {"v", version}};
    g.created_at = 1000 + version;
    b.registered.push_back(g);
  };
  reg("alice", "b", 1);
  reg("alice", "b", 2);
  reg("alice", "a", 1);
  reg("alice", "ab", 1);
  reg("alice", "c", 1);
  reg("bob", "a", 7);
  commit_ok(*db, b);
  auto names = [&](const std::string& owner, const std::string& after, size_t limit) {
    std::vector<std::string> out;
    for (auto& g : get(db->registered_graphs(owner, after, limit)))
      out.push_back(g.name + "@" + std::to_string(g.version) + ":"
                    + std::to_string(g.document["v"].get<int>()));
    return out;
  };
  using v = std::vector<std::string>;
  CHECK(names("alice", "", 0) == v{"a@1:1", "ab@1:1", "b@2:2", "c@1:1"});
  CHECK(names("alice", "", 2) == v{"a@1:1", "ab@1:1"});
  CHECK(names("alice", "a", 2) == v{"ab@1:1", "b@2:2"});
  CHECK(names("alice", "ab", 0) == v{"b@2:2", "c@1:1"});
  CHECK(names("alice", "b", 1) == v{"c@1:1"});
  CHECK(names("alice", "c", 5).empty());
  CHECK(names("bob", "", 0) == v{"a@7:7"});
  CHECK(names("carol", "", 0).empty());
}

TEST_CASE("events round-trip and their seqs are assigned into the batch",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  event_record e = make_event("c1", "r1", event_type::step_failed, json{{"error", "boom"}});
  e.time = 1700000000123;
  e.parent_id = "r1";
  e.step = "draft";
  e.status = step_status::failed;
  e.reason = step_reason::sibling_failed;
  write_batch b;
  b.events.push_back(make_event("r1", "r1", event_type::execution_queued));
  b.events.push_back(e);
  b.events.push_back(make_event("r1", "r1", event_type::execution_failed));
  commit_ok(*db, b);
  REQUIRE(b.events.size() == 3);
  CHECK(b.events[0].seq == 1);
  CHECK(b.events[1].seq == 2);
  CHECK(b.events[2].seq == 3);
  CHECK(get(db->last_seq()) == 3u);
  // The seq keeps rising across commits.
  write_batch b2;
  b2.events.push_back(make_event("r1", "r1"));
  b2.events.push_back(make_event("r2", "r2"));
  commit_ok(*db, b2);
  CHECK(b2.events[0].seq == 4);
  CHECK(b2.events[1].seq == 5);
  CHECK(get(db->last_seq()) == 5u);
  auto events = get(db->tree_events("r1"));
  REQUIRE(events.size() == 4);
  CHECK(seqs_of(events) == std::vector<uint64_t>{1, 2, 3, 4});
  auto& back = events[1];
  e.seq = 2;
  CHECK(to_json(back) == to_json(e));
  CHECK(back.time == e.time);
  CHECK(back.type == event_type::step_failed);
  CHECK(back.execution_id == "c1");
  CHECK(back.root_id == "r1");
  CHECK(back.parent_id == "r1");
  CHECK(back.step == "draft");
  CHECK(to_string(back.status) == std::string{"failed"});
  CHECK(back.reason == step_reason::sibling_failed);
  CHECK(back.data == json{{"error", "boom"}});
  // Other trees' events are not part of this tree.
  CHECK(seqs_of(get(db->tree_events("r2"))) == std::vector<uint64_t>{5});
}

TEST_CASE("event seqs are strictly increasing over many commits", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  uint64_t last = 0;
  for (int i = 0; i < 200; ++i) {
    write_batch b;
    for (int j = 0; j < i % 4; ++j)
      b.events.push_back(make_event("r", "r", event_type::step_output, json{{"i", i}, {"j", j}}));
    b.executions.push_back(make_exec("r", "g", execution_status::running));
    commit_ok(*db, b);
    for (auto& e : b.events) {
      CHECK(e.seq == last + 1);
      last = e.seq;
    }
  }
  CHECK(get(db->last_seq()) == last);
  auto all = get(db->tree_events("r"));
  REQUIRE(all.size() == last);
  for (size_t i = 0; i < all.size(); ++i)
    CHECK(all[i].seq == i + 1);
}
