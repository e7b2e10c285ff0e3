// The store's leases and fencing: a write claims its tree's epoch, a stale
// writer's batch is skipped (and only it), taking a tree over is a
// compare-and-set, and the stop request heads the events it causes.

#include "tests/persistence/store_test_helpers.hpp"

#include <filesystem>

using namespace canopy::core;
using namespace canopy::core::store_test;

namespace {

std::string temp_home() {
  char tmpl[] = "/tmp/canopy-lease-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

struct home_guard {
  std::string path;
  ~home_guard() { std::filesystem::remove_all(path); }
};

/// A batch that claims tree `root` with `epoch` (acquiring when `acquire`).
write_batch claiming(const std::string& root, uint64_t epoch, bool acquire,
                     int64_t pid = 4242, uint64_t start = 7) {
  write_batch b;
  b.lease.root = root;
  b.lease.epoch = epoch;
  b.lease.acquire = acquire;
  b.lease.owner.pid = pid;
  b.lease.owner.start = start;
  return b;
}

/// Starts tree `id` as its owner would: its queued record, acquiring.
uint64_t start_tree(store& db, const std::string& id, int64_t pid = 4242) {
  auto b = claiming(id, 0, true, pid);
  b.executions.push_back(make_exec(id));
  commit_ok(db, b);
  REQUIRE(b.lease.outcome == lease_outcome::acquired);
  return b.lease.epoch;
}

} // namespace

TEST_CASE("a start takes its tree's lease with a new epoch and its owner",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  CHECK(get(db->lease("r1")).epoch == 0);
  auto e1 = start_tree(*db, "r1", 11);
  auto e2 = start_tree(*db, "r2", 12);
  CHECK(e1 > 0);
  CHECK(e2 > e1); // one counter per home
  auto l = get(db->lease("r1"));
  CHECK(l.epoch == e1);
  CHECK(l.pid == 11);
  CHECK(l.start == 7);
}

TEST_CASE("a write that claims the stored epoch is applied",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  auto e = start_tree(*db, "r1");
  auto b = claiming("r1", e, false);
  auto rec = make_exec("r1", "g", execution_status::running);
  b.executions.push_back(rec);
  b.events.push_back(make_event("r1", "r1", event_type::execution_started));
  commit_ok(*db, b);
  CHECK(b.lease.outcome == lease_outcome::held);
  CHECK(get(db->execution("r1")).status == execution_status::running);
  CHECK(b.events.front().seq > 0);
}

TEST_CASE("a stale writer's batch is skipped whole while the rest of its commit is applied",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  auto old_epoch = start_tree(*db, "r1", 100);
  start_tree(*db, "r2", 100);
  // Another process takes r1 over (compare-and-set on the epoch it read).
  auto takeover = claiming("r1", old_epoch, true, 200);
  auto stopped = make_exec("r1", "g", execution_status::stopped);
  stopped.reason = step_reason::interrupted;
  takeover.executions.push_back(stopped);
  commit_ok(*db, takeover);
  REQUIRE(takeover.lease.outcome == lease_outcome::acquired);
  CHECK(takeover.lease.epoch > old_epoch);
  // The first owner writes on with its old epoch, in one group with a
  // write of its other tree.
  auto stale = claiming("r1", old_epoch, false);
  stale.executions.push_back(make_exec("r1", "g", execution_status::failed));
  stale.steps.push_back(make_step("r1", "s1", step_status::failed));
  stale.events.push_back(make_event("r1", "r1", event_type::execution_failed));
  write_batch nested_child;
  nested_child.events.push_back(make_event("c1", "r1", event_type::step_started));
  stale.nested.push_back(std::move(nested_child));
  auto fine = claiming("r2", get(db->lease("r2")).epoch, false);
  fine.executions.push_back(make_exec("r2", "g", execution_status::running));
  fine.events.push_back(make_event("r2", "r2", event_type::execution_started));
  write_batch group;
  group.nested.push_back(std::move(stale));
  group.nested.push_back(std::move(fine));
  commit_ok(*db, group);
  CHECK(group.nested[0].lease.outcome == lease_outcome::fenced);
  CHECK(group.nested[1].lease.outcome == lease_outcome::held);
  // Nothing of the stale batch (nor its nested one) is stored.
  auto r1 = get(db->execution("r1"));
  CHECK(r1.status == execution_status::stopped);
  CHECK(r1.reason == step_reason::interrupted);
  CHECK(get(db->steps("r1")).empty());
  for (auto& e : get(db->tree_events("r1")))
    CHECK(e.type != event_type::execution_failed);
  CHECK(get(db->tree_events("r1")).empty());
  CHECK(get(db->execution("r2")).status == execution_status::running);
  // Its events are not handed to subscribers either.
  std::vector<event_record> out;
  group.take_events(out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].execution_id == "r2");
}

TEST_CASE("taking a tree over fails when its epoch changed since it was read",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  auto read = start_tree(*db, "r1", 100);
  // Two processes read the same epoch; the first to commit wins.
  auto first = claiming("r1", read, true, 200);
  first.executions.push_back(make_exec("r1", "g", execution_status::running));
  commit_ok(*db, first);
  CHECK(first.lease.outcome == lease_outcome::acquired);
  auto second = claiming("r1", read, true, 300);
  auto rec = make_exec("r1", "g", execution_status::stopped);
  rec.reason = step_reason::interrupted;
  second.executions.push_back(rec);
  commit_ok(*db, second);
  CHECK(second.lease.outcome == lease_outcome::fenced);
  CHECK(get(db->execution("r1")).status == execution_status::running);
  CHECK(get(db->lease("r1")).pid == 200);
}

TEST_CASE("taking a tree over with the end of its log fails when its owner wrote to it since, "
          "though its epoch did not change",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  auto e = start_tree(*db, "r1");
  {
    auto b = claiming("r1", e, false);
    b.events.push_back(make_event("r1", "r1", event_type::execution_queued));
    commit_ok(*db, b);
  }
  // What a recovery reads, in order: the lease, then where the log ends.
  auto end = get(db->tree_last_seq("r1"));
  REQUIRE(end > 0);
  CHECK(get(db->tree_last_seq("r1x")) == 0); // an id that extends it has no log
  // Meanwhile its owner writes as ever, holding the same epoch.
  {
    auto b = claiming("r1", e, false);
    b.executions.push_back(make_exec("r1", "g", execution_status::running));
    b.events.push_back(make_event("r1", "r1", event_type::execution_started));
    commit_ok(*db, b);
    REQUIRE(b.lease.outcome == lease_outcome::held);
  }
  auto late = claiming("r1", e, true, 99);
  late.lease.log_end = end;
  late.executions.push_back(make_exec("r1", "g", execution_status::stopped));
  commit_ok(*db, late);
  CHECK(late.lease.outcome == lease_outcome::fenced);
  CHECK(get(db->execution("r1")).status == execution_status::running);
  CHECK(get(db->lease("r1")).epoch == e);
  // Read again, the takeover goes through.
  auto again = claiming("r1", e, true, 99);
  again.lease.log_end = get(db->tree_last_seq("r1"));
  again.executions.push_back(make_exec("r1", "g", execution_status::stopped));
  commit_ok(*db, again);
  CHECK(again.lease.outcome == lease_outcome::acquired);
  CHECK(get(db->execution("r1")).status == execution_status::stopped);
}

TEST_CASE("a held claim of epoch 0 stands for an acquire earlier in the same commit",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  write_batch group;
  auto acquire = claiming("r1", 0, true);
  acquire.executions.push_back(make_exec("r1"));
  auto next = claiming("r1", 0, false);
  next.executions.push_back(make_exec("r1", "g", execution_status::running));
  group.nested.push_back(std::move(acquire));
  group.nested.push_back(std::move(next));
  commit_ok(*db, group);
  CHECK(group.nested[1].lease.outcome == lease_outcome::held);
  CHECK(group.nested[1].lease.epoch == group.nested[0].lease.epoch);
  CHECK(get(db->execution("r1")).status == execution_status::running);
  // Without that acquire, epoch 0 is no claim on a leased tree.
  auto orphan = claiming("r1", 0, false);
  orphan.executions.push_back(make_exec("r1", "g", execution_status::failed));
  commit_ok(*db, orphan);
  CHECK(orphan.lease.outcome == lease_outcome::fenced);
  CHECK(get(db->execution("r1")).status == execution_status::running);
}

TEST_CASE("deleting a tree deletes its lease", "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  auto e = start_tree(*db, "r1");
  auto done = claiming("r1", e, false);
  done.executions.push_back(make_exec("r1", "g", execution_status::completed));
  commit_ok(*db, done);
  write_batch del;
  del.deleted_trees.push_back("r1");
  commit_ok(*db, del);
  CHECK(get(db->lease("r1")).epoch == 0);
}

TEST_CASE("a stop request's event comes before the events of the halt in its batch",
          "[persistence][store][stop]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path);
  start_tree(*db, "r1");
  write_batch running;
  running.executions.push_back(make_exec("r1", "g", execution_status::running));
  commit_ok(*db, running);
  stop_record req;
  req.id = "stop1";
  req.target = "r1";
  req.requested_at = now_ms();
  req.who = "test";
  write_batch b;
  b.stops.push_back(req);
  auto stopped = make_exec("r1", "g", execution_status::stopped);
  stopped.reason = step_reason::requested;
  b.executions.push_back(stopped);
  b.events.push_back(make_event("r1", "r1", event_type::execution_stopping));
  b.events.push_back(make_event("r1", "r1", event_type::execution_stopped));
  commit_ok(*db, b);
  std::vector<std::string> types;
  for (auto& e : get(db->tree_events("r1")))
    types.push_back(to_string(e.type));
  CHECK(types == std::vector<std::string>{"stop.requested", "execution.stopping",
                                          "execution.stopped", "stop.handled"});
  std::vector<event_record> handed;
  b.take_events(handed);
  REQUIRE(handed.size() == 4);
  CHECK(handed.front().type == event_type::stop_requested);
  for (size_t i = 1; i < handed.size(); ++i)
    CHECK(handed[i].seq > handed[i - 1].seq);
}

TEST_CASE("a commit that outgrows the map takes every tree it acquires, as recovery does",
          "[persistence][store][lease]") {
  home_guard home{temp_home()};
  auto db = open_store(home.path, 1u << 20);
  auto map_before = db->map_size();
  // One nested batch per tree, each taking its tree over, more than the
  // map holds: the attempt that fills it runs again from the claims given.
  write_batch all;
  std::vector<std::string> roots;
  for (int i = 0; i < 2000; ++i) {
    roots.push_back(make_execution_id());
    auto b = claiming(roots.back(), 0, true);
    auto x = make_exec(roots.back(), "g", execution_status::stopped);
    x.inputs = {{"text", std::string(1024, 'x')}};
    b.executions.push_back(x);
    all.nested.push_back(std::move(b));
  }
  commit_ok(*db, all);
  CHECK(db->map_size() > map_before);
  for (size_t i = 0; i < roots.size(); ++i) {
    INFO(i);
    CHECK(all.nested[i].lease.outcome == lease_outcome::acquired);
    CHECK(get(db->lease(roots[i])).epoch == all.nested[i].lease.epoch);
    CHECK(get(db->execution(roots[i])).status == execution_status::stopped);
  }
}
