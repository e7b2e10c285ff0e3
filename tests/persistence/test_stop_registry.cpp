// The store's stop registry rule (runtime/docs/reference/statuses.md#stop): a request
// is stored once by id, and the store itself answers it in the transaction
// that makes (or finds) its target terminal. Real LMDB in a temp home.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;

namespace {

execution_record make_exec(const std::string& id, execution_status status,
                           const std::string& parent = {}) {
  execution_record r;
  r.id = id;
  r.graph = "g";
  r.root_id = parent.empty() ? id : parent;
  r.parent_id = parent;
  r.status = status;
  r.created_at = 1;
  return r;
}

stop_record make_request(const std::string& id, const std::string& target) {
  stop_record r;
  r.id = id;
  r.target = target;
  r.requested_at = 5;
  r.who = "test";
  return r;
}

std::shared_ptr<store> open_store(const test::temp_dir& home) {
  auto db = store::open({home.path});
  REQUIRE(db);
  return *db;
}

void commit(store& db, write_batch b) {
  REQUIRE(!db.commit(b));
}

/// Commits one execution record.
void commit_exec(store& db, execution_record r) {
  write_batch b;
  b.executions.push_back(std::move(r));
  commit(db, std::move(b));
}

/// Commits one stop request.
void commit_request(store& db, stop_record r) {
  write_batch b;
  b.stops.push_back(std::move(r));
  commit(db, std::move(b));
}

/// The types of the events of tree `root`, in seq order.
std::vector<std::string> types(store& db, const std::string& root) {
  std::vector<std::string> out;
  auto evs = db.tree_events(root);
  REQUIRE(evs);
  for (auto& e : *evs)
    out.push_back(to_string(e.type));
  return out;
}

} // namespace

TEST_CASE("a stop request for a running execution stays pending with its stop.requested event",
          "[persistence][stop]") {
  test::temp_dir home;
  auto db = open_store(home);
  commit_exec(*db, make_exec("x", execution_status::running));
  commit_request(*db, make_request("s1", "x"));
  auto r = db->stop("s1");
  REQUIRE(r);
  CHECK_FALSE(r->handled);
  auto pending = db->pending_stops();
  REQUIRE(pending);
  REQUIRE(pending->size() == 1);
  CHECK(types(*db, "x") == std::vector<std::string>{"stop.requested"});
  auto evs = db->tree_events("x");
  CHECK((*evs)[0].data.value("stop_id", "") == "s1");
  CHECK((*evs)[0].data.value("mode", "") == "graceful");
}

TEST_CASE("the commit that stops an execution answers its pending requests stopped, in the "
          "same transaction",
          "[persistence][stop]") {
  test::temp_dir home;
  auto db = open_store(home);
  write_batch b;
  b.executions.push_back(make_exec("x", execution_status::running));
  b.stops.push_back(make_request("s1", "x"));
  commit(*db, std::move(b));
  write_batch snap;
  auto rec = make_exec("x", execution_status::stopped);
  rec.reason = step_reason::requested;
  snap.executions.push_back(rec);
  commit(*db, std::move(snap));
  auto r = db->stop("s1");
  REQUIRE(r);
  CHECK(r->handled);
  CHECK(r->result == stop_result::stopped);
  CHECK(r->handled_at != 0);
  CHECK(db->pending_stops()->empty());
  CHECK(types(*db, "x") == std::vector<std::string>{"stop.requested", "stop.handled"});
  auto handled = db->tree_events("x")->back();
  CHECK(to_string(handled.status) == std::string{"stopped"});
  CHECK(handled.reason == step_reason::requested);
}

TEST_CASE("a request that races with its execution's completion is answered no_execution",
          "[persistence][stop]") {
  test::temp_dir home;
  auto db = open_store(home);
  SECTION("the request lands after the completed record") {
    write_batch b;
    b.executions.push_back(make_exec("x", execution_status::completed));
    commit(*db, std::move(b));
    write_batch req;
    req.stops.push_back(make_request("s1", "x"));
    commit(*db, std::move(req));
  }
  SECTION("the request and the completed record share a commit") {
    write_batch b;
    b.stops.push_back(make_request("s1", "x"));
    b.executions.push_back(make_exec("x", execution_status::completed));
    commit(*db, std::move(b));
  }
  auto r = db->stop("s1");
  REQUIRE(r);
  CHECK(r->handled);
  CHECK(r->result == stop_result::no_execution);
  CHECK(db->pending_stops()->empty());
  CHECK(types(*db, "x") == std::vector<std::string>{"stop.requested", "stop.handled"});
}

TEST_CASE("a request written twice is stored once, with one stop.requested event",
          "[persistence][stop]") {
  test::temp_dir home;
  auto db = open_store(home);
  write_batch b;
  b.executions.push_back(make_exec("x", execution_status::running));
  b.stops.push_back(make_request("s1", "x"));
  commit(*db, std::move(b));
  commit_request(*db, make_request("s1", "x"));
  CHECK(types(*db, "x") == std::vector<std::string>{"stop.requested"});
  // Written again after it was handled: still handled, nothing new logged.
  commit_exec(*db, make_exec("x", execution_status::stopped));
  commit_request(*db, make_request("s1", "x"));
  CHECK(db->stop("s1")->handled);
  CHECK(types(*db, "x") == std::vector<std::string>{"stop.requested", "stop.handled"});
}

TEST_CASE("a request for a child answered by the root's snapshot carries the child's status",
          "[persistence][stop]") {
  test::temp_dir home;
  auto db = open_store(home);
  write_batch b;
  b.executions.push_back(make_exec("r", execution_status::running));
  b.executions.push_back(make_exec("c", execution_status::running, "r"));
  commit(*db, std::move(b));
  commit_request(*db, make_request("s1", "c"));
  // The snapshot: the root stopping ends the child too, in one commit.
  write_batch snap;
  auto root = make_exec("r", execution_status::stopped);
  root.reason = step_reason::requested;
  auto child = make_exec("c", execution_status::stopped, "r");
  child.reason = step_reason::parent_stopped;
  snap.executions.push_back(root);
  write_batch nested;
  nested.executions.push_back(child);
  snap.append(std::move(nested));
  commit(*db, std::move(snap));
  auto r = db->stop("s1");
  REQUIRE(r);
  CHECK(r->result == stop_result::stopped);
  auto evs = db->tree_events("r");
  REQUIRE(evs);
  REQUIRE(evs->back().type == event_type::stop_handled);
  CHECK(evs->back().execution_id == "c");
  CHECK(evs->back().reason == step_reason::parent_stopped);
}

TEST_CASE("the events the store writes for requests are handed back with the batch in seq order",
          "[persistence][stop]") {
  test::temp_dir home;
  auto db = open_store(home);
  write_batch b;
  b.executions.push_back(make_exec("x", execution_status::completed));
  b.stops.push_back(make_request("s1", "x"));
  event_record own;
  own.type = event_type::execution_completed;
  own.execution_id = own.root_id = "x";
  b.events.push_back(own);
  REQUIRE(!db->commit(b));
  std::vector<event_record> out;
  b.take_events(out);
  REQUIRE(out.size() == 3);
  // The request heads its batch's events; its answer comes last.
  CHECK(out[0].type == event_type::stop_requested);
  CHECK(out[1].type == event_type::execution_completed);
  CHECK(out[2].type == event_type::stop_handled);
  CHECK(out[0].seq < out[1].seq);
  CHECK(out[1].seq < out[2].seq);
}
