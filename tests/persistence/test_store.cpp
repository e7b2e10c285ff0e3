// Tests of canopy::store against a real LMDB environment in a temporary home.
// Every test opens its own home; nothing is shared between tests.

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

using namespace canopy;

namespace fs = std::filesystem;

namespace {

// -- helpers -------------------------------------------------------------------

std::shared_ptr<store> open_store(const std::string& home, size_t map_bytes = 64u << 20) {
  store_options opts;
  opts.home = home;
  opts.initial_map_bytes = map_bytes;
  auto db = store::open(opts);
  INFO("open " << home << ": " << (db ? std::string{} : message_of(db.error())));
  REQUIRE(db);
  return std::move(*db);
}

execution_record make_exec(const std::string& id, const std::string& graph = "g",
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

step_record make_step(const std::string& exec, const std::string& name,
                      step_status status = step_status::pending) {
  step_record s;
  s.execution_id = exec;
  s.step = name;
  s.status = status;
  return s;
}

event_record make_event(const std::string& exec, const std::string& root,
                        const std::string& type = "step.started", json data = nullptr) {
  event_record e;
  e.time = now_ms();
  e.type = type;
  e.execution_id = exec;
  e.root_id = root;
  e.data = std::move(data);
  return e;
}

void commit_ok(store& db, write_batch& batch) {
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

bool is_errc(const caf::error& err, persistence_errc code) {
  return err && err.category() == persistence_category
         && err.code() == static_cast<uint8_t>(code);
}

std::vector<std::string> ids_of(const std::vector<execution_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.id);
  return out;
}

std::vector<std::string> names_of(const std::vector<step_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.step);
  return out;
}

std::vector<uint64_t> seqs_of(const std::vector<event_record>& xs) {
  std::vector<uint64_t> out;
  for (auto& x : xs)
    out.push_back(x.seq);
  return out;
}

/// Waits for `pid` with a deadline (SIGKILL after it). @returns its exit code,
/// or -1 when it did not exit normally.
int reap(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds{120}) {
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

} // namespace

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
  r.reason = "requested";
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
  CHECK(back.reason == "requested");
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
  s.reason = "sibling_failed";
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
  CHECK(steps[0].reason == "sibling_failed");
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
  event_record e = make_event("c1", "r1", "step.failed", json{{"error", "boom"}});
  e.time = 1700000000123;
  e.parent_id = "r1";
  e.step = "draft";
  e.status = "failed";
  e.reason = "sibling_failed";
  write_batch b;
  b.events.push_back(make_event("r1", "r1", "execution.queued"));
  b.events.push_back(e);
  b.events.push_back(make_event("r1", "r1", "execution.failed"));
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
  CHECK(back.type == "step.failed");
  CHECK(back.execution_id == "c1");
  CHECK(back.root_id == "r1");
  CHECK(back.parent_id == "r1");
  CHECK(back.step == "draft");
  CHECK(back.status == "failed");
  CHECK(back.reason == "sibling_failed");
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
      b.events.push_back(make_event("r", "r", "step.output", json{{"i", i}, {"j", j}}));
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
    b.events.push_back(make_event("a", "a", "step.output", json{{"i", i}}));
    b.events.push_back(make_event("ab-child", "ab", "step.output", json{{"i", i}}));
    if (i % 3 == 0)
      b.events.push_back(make_event("a-child", "a", "step.output", json{{"i", i}}));
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
  b.events.push_back(make_event("c", "p", "execution.queued"));
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
  b.events.push_back(make_event("r", "r", "execution.queued"));
  b.events.push_back(make_event("g", "r", "execution.queued"));
  b.events.push_back(make_event("r2", "r2", "execution.queued"));
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
  b.events.push_back(make_event("r", "r", "execution.started"));
  b.events.push_back(make_event("c", "r", "execution.queued"));
  b.events.push_back(make_event("k", "r", "execution.queued"));
  b.events.push_back(make_event("c", "r", "step.pending"));
  b.events.push_back(make_event("c2", "c2", "execution.queued"));
  commit_ok(*db, b);
  REQUIRE(get(db->tree_events("r")).size() == 4);

  // A stop during its creation deletes the planned child, and writes on.
  write_batch del;
  del.deleted_executions.push_back("c");
  del.events.push_back(make_event("r", "r", "execution.stopped"));
  commit_ok(*db, del);

  std::vector<std::string> left;
  for (auto& e : get(db->tree_events("r")))
    left.push_back(e.execution_id + ":" + e.type);
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
  b.events.push_back(make_event("r", "r", "execution.started"));
  // Two nested levels each plan a child and delete it (a stop during creation
  // gathered level by level into one snapshot).
  for (auto id : {"c1", "c2"}) {
    write_batch planned;
    planned.executions.push_back(make_exec(id, "g", execution_status::queued, "r", "r"));
    planned.events.push_back(make_event(id, "r", "execution.queued"));
    write_batch removal;
    removal.deleted_executions.push_back(id);
    removal.events.push_back(make_event("r", "r", "step.pending"));
    planned.append(std::move(removal));
    b.append(std::move(planned));
  }
  commit_ok(*db, b);
  std::vector<std::string> left;
  for (auto& e : get(db->tree_events("r")))
    left.push_back(e.execution_id + ":" + e.type);
  CHECK(left == std::vector<std::string>{"r:execution.started", "r:step.pending",
                                         "r:step.pending"});
  CHECK(get(db->children("r")).empty());
  CHECK_FALSE(db->execution("c1"));
  CHECK_FALSE(db->execution("c2"));
}

// -- agents ----------------------------------------------------------------------

namespace {

agent_record make_agent(const std::string& owner, const std::string& name,
                        busy_policy on_busy = busy_policy::cancel_previous) {
  agent_record a;
  a.owner = owner;
  a.name = name;
  a.graph.document = json{{"name", "chat-" + name}, {"steps", {{"reply", {{"fn", "echo"}}}}}};
  a.graph.base_dir = "/agents/" + name;
  a.graph.files = json{{"/agents/" + name + "/sub.json", {{"steps", json::object()}}}};
  a.on_busy = on_busy;
  a.created_at = 1700000000100;
  a.updated_at = 1700000000200;
  return a;
}

history_entry make_entry(const std::string& owner, const std::string& agent,
                         const std::string& role, json content,
                         const std::string& execution_id = "x") {
  history_entry h;
  h.owner = owner;
  h.agent = agent;
  h.role = role;
  h.content = std::move(content);
  h.execution_id = execution_id;
  h.time = now_ms();
  return h;
}

execution_record make_agent_run(const std::string& id, const std::string& owner,
                                const std::string& agent,
                                execution_status status = execution_status::running,
                                const std::string& parent = {}, const std::string& root = {}) {
  auto r = make_exec(id, "chat", status, parent, root);
  r.owner = owner;
  r.agent = agent;
  return r;
}

std::vector<uint64_t> seqs_of(const std::vector<history_entry>& xs) {
  std::vector<uint64_t> out;
  for (auto& x : xs)
    out.push_back(x.seq);
  return out;
}

std::vector<std::string> names_of(const std::vector<agent_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.owner + "/" + x.name);
  return out;
}

using run_list = std::vector<std::pair<std::string, std::string>>;

} // namespace

TEST_CASE("busy policy names round-trip and an unknown name is rejected",
          "[persistence][store]") {
  for (auto p : {busy_policy::cancel_previous, busy_policy::queue, busy_policy::reject}) {
    busy_policy back = p == busy_policy::reject ? busy_policy::queue : busy_policy::reject;
    REQUIRE(from_string(to_string(p), back));
    CHECK(back == p);
  }
  CHECK(std::string{to_string(busy_policy::cancel_previous)} == "cancel_previous");
  CHECK(std::string{to_string(busy_policy::queue)} == "queue");
  CHECK(std::string{to_string(busy_policy::reject)} == "reject");
  busy_policy x = busy_policy::queue;
  CHECK_FALSE(from_string("cancel", x));
  CHECK_FALSE(from_string("", x));
  CHECK_FALSE(from_string("Queue", x));
  CHECK(x == busy_policy::queue);
}

TEST_CASE("an execution's agent survives encoding and decoding", "[persistence][store]") {
  auto r = make_agent_run("e1", "alice", "helper");
  auto back = execution_from_json(json::parse(encode_json(r)));
  REQUIRE(back);
  CHECK(back->agent == "helper");
  CHECK(back->owner == "alice");
  CHECK(to_json(*back) == to_json(r));
  CHECK(to_json(r).at("agent") == "helper");
  auto decoded = execution_from_json(to_json(r));
  REQUIRE(decoded);
  CHECK(decoded->agent == "helper");
  // Omitted when empty, and absent means empty.
  auto plain = make_exec("e2");
  CHECK(json::parse(encode_json(plain)).count("agent") == 0);
  CHECK(to_json(plain).count("agent") == 0);
  auto plain_back = execution_from_json(json::parse(encode_json(plain)));
  REQUIRE(plain_back);
  CHECK(plain_back->agent.empty());
  // Through the store too.
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(r);
  commit_ok(*db, b);
  CHECK(get(db->execution("e1")).agent == "helper");
}

TEST_CASE("an agent record round-trips through the store", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto a = make_agent("alice", "helper", busy_policy::queue);
  a.node = "gpu-1";
  write_batch b;
  b.agents.push_back(a);
  commit_ok(*db, b);
  auto back = get(db->agent("alice", "helper"));
  CHECK(back.node == "gpu-1");
  CHECK(back.owner == "alice");
  CHECK(back.name == "helper");
  CHECK(back.graph.document == a.graph.document);
  CHECK(back.graph.base_dir == a.graph.base_dir);
  CHECK(back.graph.files == a.graph.files);
  CHECK(back.on_busy == busy_policy::queue);
  CHECK(back.created_at == a.created_at);
  CHECK(back.updated_at == a.updated_at);
  SECTION("an unknown agent is not_found, naming it") {
    for (auto [owner, name] : {std::pair<std::string, std::string>{"alice", "other"},
                               {"bob", "helper"}, {"alice", "help"}, {"", "helper"}}) {
      auto missing = db->agent(owner, name);
      REQUIRE_FALSE(missing);
      CHECK(is_errc(missing.error(), persistence_errc::not_found));
      CHECK(message_of(missing.error()).find("'" + name + "'") != std::string::npos);
    }
  }
  SECTION("replacing it keeps created_at as given") {
    auto b2 = make_agent("alice", "helper", busy_policy::reject);
    b2.graph.document["name"] = "chat-v2";
    b2.created_at = a.created_at;
    b2.updated_at = 1700000009999;
    write_batch w;
    w.agents.push_back(b2);
    commit_ok(*db, w);
    auto x = get(db->agent("alice", "helper"));
    CHECK(x.on_busy == busy_policy::reject);
    CHECK(x.graph.document["name"] == "chat-v2");
    CHECK(x.created_at == 1700000000100);
    CHECK(x.updated_at == 1700000009999);
    CHECK(get(db->agents("alice")).size() == 1);
  }
  SECTION("it survives reopening the store") {
    db.reset();
    db = open_store(dir.path);
    CHECK(get(db->agent("alice", "helper")).on_busy == busy_policy::queue);
  }
  SECTION("an agent of the CLI has an empty owner") {
    write_batch w;
    w.agents.push_back(make_agent("", "helper"));
    commit_ok(*db, w);
    CHECK(get(db->agent("", "helper")).owner.empty());
    CHECK(get(db->agent("alice", "helper")).on_busy == busy_policy::queue);
  }
}

TEST_CASE("agents() lists one owner's agents or every owner's, by owner and name",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  CHECK(get(db->agents()).empty());
  CHECK(get(db->agents("alice")).empty());
  write_batch b;
  // Written out of order: the store sorts. "al" and "alice" are different owners.
  for (auto [owner, name] : {std::pair<std::string, std::string>{"bob", "z"},
                             {"alice", "b"}, {"al", "x"}, {"alice", "a"}, {"", "cli"},
                             {"alice", "ab"}})
    b.agents.push_back(make_agent(owner, name));
  commit_ok(*db, b);
  CHECK(names_of(get(db->agents("alice")))
        == std::vector<std::string>{"alice/a", "alice/ab", "alice/b"});
  CHECK(names_of(get(db->agents("al"))) == std::vector<std::string>{"al/x"});
  CHECK(names_of(get(db->agents("bob"))) == std::vector<std::string>{"bob/z"});
  CHECK(names_of(get(db->agents(std::string{}))) == std::vector<std::string>{"/cli"});
  CHECK(get(db->agents("carol")).empty());
  CHECK(names_of(get(db->agents()))
        == std::vector<std::string>{"/cli", "al/x", "alice/a", "alice/ab", "alice/b", "bob/z"});
}

TEST_CASE("history entries get seqs from 1 per agent in commit order",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  CHECK(get(db->history("alice", "helper")).empty());
  write_batch b1;
  b1.history.push_back(make_entry("alice", "helper", "user", "hello", "r1"));
  commit_ok(*db, b1);
  CHECK(b1.history[0].seq == 1);
  // Several in one batch, mixed with other agents and owners.
  write_batch b2;
  b2.history.push_back(make_entry("alice", "helper", "agent", json{{"text", "hi"}}, "r1"));
  b2.history.push_back(make_entry("alice", "other", "user", "q", "r2"));
  b2.history.push_back(make_entry("alice", "helper", "user", "again", "r3"));
  b2.history.push_back(make_entry("bob", "helper", "user", "bob's", "r4"));
  b2.history.push_back(make_entry("alice", "helpe", "user", "prefix", "r5"));
  b2.history.push_back(make_entry("alice", "helperx", "user", "extended", "r6"));
  commit_ok(*db, b2);
  CHECK(b2.history[0].seq == 2);
  CHECK(b2.history[1].seq == 1);
  CHECK(b2.history[2].seq == 3);
  CHECK(b2.history[3].seq == 1);
  CHECK(b2.history[4].seq == 1);
  CHECK(b2.history[5].seq == 1);
  // A nested batch continues the count.
  write_batch b3, inner;
  b3.history.push_back(make_entry("alice", "helper", "agent", nullptr, "r3"));
  inner.history.push_back(make_entry("alice", "helper", "user", json::array({1, 2}), "r7"));
  b3.append(std::move(inner));
  commit_ok(*db, b3);
  CHECK(b3.history[0].seq == 4);
  REQUIRE(b3.nested.size() == 1);
  CHECK(b3.nested[0].history[0].seq == 5);

  auto h = get(db->history("alice", "helper"));
  CHECK(seqs_of(h) == std::vector<uint64_t>{1, 2, 3, 4, 5});
  REQUIRE(h.size() == 5);
  CHECK(h[0].role == "user");
  CHECK(h[0].content == "hello");
  CHECK(h[0].execution_id == "r1");
  CHECK(h[0].owner == "alice");
  CHECK(h[0].agent == "helper");
  CHECK(h[0].time == b1.history[0].time);
  CHECK(h[1].role == "agent");
  CHECK(h[1].content == json{{"text", "hi"}});
  CHECK(h[3].content.is_null());
  CHECK(h[4].content == json::array({1, 2}));
  CHECK(seqs_of(get(db->history("alice", "other"))) == std::vector<uint64_t>{1});
  CHECK(get(db->history("bob", "helper")).at(0).content == "bob's");
  CHECK(get(db->history("alice", "helpe")).at(0).content == "prefix");
  CHECK(get(db->history("alice", "helperx")).at(0).content == "extended");
  CHECK(get(db->history("carol", "helper")).empty());
  CHECK(get(db->history("alice", "")).empty());

  SECTION("after and limit select a window") {
    CHECK(seqs_of(get(db->history("alice", "helper", 2))) == std::vector<uint64_t>{3, 4, 5});
    CHECK(seqs_of(get(db->history("alice", "helper", 0, 2))) == std::vector<uint64_t>{1, 2});
    CHECK(seqs_of(get(db->history("alice", "helper", 1, 3)))
          == std::vector<uint64_t>{2, 3, 4});
    CHECK(get(db->history("alice", "helper", 5)).empty());
    CHECK(get(db->history("alice", "helper", 99)).empty());
    CHECK(get(db->history("alice", "helper", ~uint64_t{0})).empty());
  }
  SECTION("they survive reopening the store and the count goes on") {
    db.reset();
    db = open_store(dir.path);
    CHECK(seqs_of(get(db->history("alice", "helper"))) == std::vector<uint64_t>{1, 2, 3, 4, 5});
    write_batch b4;
    b4.history.push_back(make_entry("alice", "helper", "user", "later"));
    b4.history.push_back(make_entry("alice", "other", "user", "later"));
    commit_ok(*db, b4);
    CHECK(b4.history[0].seq == 6);
    CHECK(b4.history[1].seq == 2);
    CHECK(get(db->history("alice", "helper", 5)).at(0).content == "later");
  }
}

TEST_CASE("history seqs keep counting past 255 entries", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  for (int i = 0; i < 30; ++i) {
    write_batch b;
    for (int j = 0; j < 10; ++j)
      b.history.push_back(make_entry("o", "a", "user", json{{"i", i * 10 + j}}));
    commit_ok(*db, b);
    for (int j = 0; j < 10; ++j)
      CHECK(b.history[static_cast<size_t>(j)].seq == static_cast<uint64_t>(i * 10 + j + 1));
  }
  auto h = get(db->history("o", "a"));
  REQUIRE(h.size() == 300);
  for (size_t i = 0; i < h.size(); ++i) {
    CHECK(h[i].seq == i + 1);
    CHECK(h[i].content["i"] == static_cast<int>(i));
  }
  CHECK(seqs_of(get(db->history("o", "a", 254, 3))) == std::vector<uint64_t>{255, 256, 257});
}

TEST_CASE("agent_runs indexes the agent's executions that are not terminal",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(make_agent_run("r1", "alice", "helper", execution_status::queued));
  // A run started by an `agent` step: a child, with its tree's root id.
  b.executions.push_back(
    make_agent_run("r2", "alice", "helper", execution_status::running, "p", "root0"));
  b.executions.push_back(make_agent_run("r3", "alice", "other"));
  b.executions.push_back(make_agent_run("r4", "bob", "helper"));
  b.executions.push_back(make_agent_run("r5", "alice", "helperx"));
  b.executions.push_back(make_agent_run("r6", "alice", "helper", execution_status::completed));
  // Executions without an agent never appear.
  auto plain = make_exec("r7", "chat", execution_status::running);
  plain.owner = "alice";
  b.executions.push_back(plain);
  commit_ok(*db, b);
  CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r1", "r1"}, {"r2", "root0"}});
  CHECK(get(db->agent_runs("alice", "other")) == run_list{{"r3", "r3"}});
  CHECK(get(db->agent_runs("bob", "helper")) == run_list{{"r4", "r4"}});
  CHECK(get(db->agent_runs("alice", "helperx")) == run_list{{"r5", "r5"}});
  CHECK(get(db->agent_runs("alice", "help")).empty());
  CHECK(get(db->agent_runs("alice", "")).empty());
  CHECK(get(db->agent_runs("", "helper")).empty());

  SECTION("a run disappears once it is written terminal") {
    for (auto status : {execution_status::stopping, execution_status::running}) {
      write_batch w;
      w.executions.push_back(make_agent_run("r1", "alice", "helper", status));
      commit_ok(*db, w);
      CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r1", "r1"}, {"r2", "root0"}});
    }
    write_batch w;
    w.executions.push_back(make_agent_run("r1", "alice", "helper", execution_status::stopped));
    w.executions.push_back(
      make_agent_run("r2", "alice", "helper", execution_status::failed, "p", "root0"));
    w.executions.push_back(make_agent_run("r3", "alice", "other", execution_status::completed));
    commit_ok(*db, w);
    CHECK(get(db->agent_runs("alice", "helper")).empty());
    CHECK(get(db->agent_runs("alice", "other")).empty());
    CHECK(get(db->agent_runs("bob", "helper")) == run_list{{"r4", "r4"}});
    // Writing a terminal record again is harmless; a resumed run is back.
    write_batch again;
    again.executions.push_back(
      make_agent_run("r1", "alice", "helper", execution_status::stopped));
    again.executions.push_back(
      make_agent_run("r3", "alice", "other", execution_status::running));
    commit_ok(*db, again);
    CHECK(get(db->agent_runs("alice", "helper")).empty());
    CHECK(get(db->agent_runs("alice", "other")) == run_list{{"r3", "r3"}});
  }
  SECTION("the last write of a batch decides") {
    write_batch w;
    w.executions.push_back(make_agent_run("r8", "alice", "helper", execution_status::queued));
    w.executions.push_back(make_agent_run("r8", "alice", "helper", execution_status::completed));
    w.executions.push_back(make_agent_run("r9", "alice", "helper", execution_status::completed));
    w.executions.push_back(make_agent_run("r9", "alice", "helper", execution_status::running));
    commit_ok(*db, w);
    CHECK(get(db->agent_runs("alice", "helper"))
          == run_list{{"r1", "r1"}, {"r2", "root0"}, {"r9", "r9"}});
  }
  SECTION("deleted_executions removes the index entry") {
    write_batch w;
    w.deleted_executions.push_back("r1");
    w.deleted_executions.push_back("r4");
    w.deleted_executions.push_back("r7");
    commit_ok(*db, w);
    CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r2", "root0"}});
    CHECK(get(db->agent_runs("bob", "helper")).empty());
    CHECK(get(db->agent_runs("alice", "other")) == run_list{{"r3", "r3"}});
  }
  SECTION("the index survives reopening the store") {
    db.reset();
    db = open_store(dir.path);
    CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r1", "r1"}, {"r2", "root0"}});
  }
}

TEST_CASE("agent and history records decode or are corrupt_record",
          "[persistence][store]") {
  auto a = make_agent("alice", "helper", busy_policy::reject);
  auto back = agent_from_json(json::parse(encode_json(a)));
  REQUIRE(back);
  CHECK(back->name == "helper");
  CHECK(back->on_busy == busy_policy::reject);
  CHECK(back->graph.files == a.graph.files);
  auto h = make_entry("alice", "helper", "agent", json{{"answer", 42}}, "r1");
  h.seq = 7;
  auto hb = history_from_json(json::parse(encode_json(h)));
  REQUIRE(hb);
  CHECK(hb->seq == 7);
  CHECK(hb->content == json{{"answer", 42}});
  CHECK(hb->execution_id == "r1");
  CHECK(hb->time == h.time);
  // Invalid UTF-8 never throws while encoding, and still decodes.
  h.content = std::string{"bad \xff byte"};
  h.role = std::string{"r\xfe"};
  auto text = encode_json(h);
  CHECK(history_from_json(json::parse(text)));
  a.name = std::string{"n\xc3"};
  CHECK(agent_from_json(json::parse(encode_json(a))));

  auto good = json::parse(encode_json(make_agent("alice", "helper")));
  for (auto mutate : std::vector<std::function<void(json&)>>{
         [](json& j) { j.erase("name"); }, [](json& j) { j["name"] = 7; },
         [](json& j) { j.erase("graph"); }, [](json& j) { j["graph"] = "g"; },
         [](json& j) { j["on_busy"] = "sometimes"; }, [](json& j) { j.erase("on_busy"); },
         [](json& j) { j["created"] = "yesterday"; }, [](json& j) { j = json::array(); }}) {
    auto j = good;
    mutate(j);
    INFO(j.dump());
    auto bad = agent_from_json(j);
    REQUIRE_FALSE(bad);
    CHECK(is_errc(bad.error(), persistence_errc::corrupt_record));
  }
  auto good_h = json::parse(encode_json(make_entry("o", "a", "user", "m")));
  for (auto mutate : std::vector<std::function<void(json&)>>{
         [](json& j) { j.erase("agent"); }, [](json& j) { j.erase("seq"); },
         [](json& j) { j["seq"] = "one"; }, [](json& j) { j.erase("role"); },
         [](json& j) { j.erase("content"); }, [](json& j) { j.erase("time"); }}) {
    auto j = good_h;
    mutate(j);
    INFO(j.dump());
    auto bad = history_from_json(j);
    REQUIRE_FALSE(bad);
    CHECK(is_errc(bad.error(), persistence_errc::corrupt_record));
  }
  auto discarded = history_from_json(json::parse("{not json", nullptr, false));
  REQUIRE_FALSE(discarded);
  CHECK(is_errc(discarded.error(), persistence_errc::corrupt_record));
}

TEST_CASE("history and agent documents render as SPEC section 9 describes",
          "[persistence][store]") {
  auto h = make_entry("alice", "helper", "agent", json{{"text", "hi"}}, "r1");
  h.seq = 3;
  h.time = 1700000000042;
  auto doc = history_document(h);
  CHECK(doc == json{{"role", "agent"},
                    {"content", {{"text", "hi"}}},
                    {"execution_id", "r1"},
                    {"time", to_rfc3339(1700000000042)}});
  CHECK(doc["time"].get<std::string>().find(".042Z") != std::string::npos);
  auto a = make_agent("alice", "helper", busy_policy::queue);
  auto ad = agent_document(a);
  CHECK(ad == json{{"name", "helper"},
                   {"graph", "chat-helper"},
                   {"on_busy", "queue"},
                   {"node", nullptr},
                   {"created_at", to_rfc3339(a.created_at)},
                   {"updated_at", to_rfc3339(a.updated_at)}});
  a.node = "gpu-1";
  CHECK(agent_document(a)["node"] == "gpu-1");
  a.node.clear();
  // A document without a name (or not even an object) renders a null graph.
  a.graph.document.erase("name");
  CHECK(agent_document(a)["graph"].is_null());
  a.graph.document = json::array();
  CHECK(agent_document(a)["graph"].is_null());
  // Invalid UTF-8 in a name does not throw when the document is dumped.
  a.name = std::string{"bad\xff"};
  CHECK_FALSE(dump_json(agent_document(a)).empty());
}

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
    b.events.push_back(make_event(id, id, "execution.completed", json{{"i", i}}));
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
          make_event("child", "child", "step.output", json{{"i", i}, {"j", j}, {"pad", pad}}));
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
        make_event("parent", "parent", "step.output", json{{"i", i}, {"j", j}, {"pad", pad}}));
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
      b.events.push_back(make_event("grower", "grower", "step.output", json{{"pad", pad}}));
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
  auto listed = db->list({});
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

// -- the writers' lock (SPEC §13 rule 16) ---------------------------------------------

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
  first.events.push_back(make_event("e1", "e1", "execution.queued"));
  commit_ok(*db, first);
  writers_lock_holder holder{dir.path};
  write_batch second;
  second.executions.push_back(make_exec("e2"));
  second.events.push_back(make_event("e2", "e2", "execution.queued"));
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
