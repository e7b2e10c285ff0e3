// Acceptance tests of `canopy serve` (runtime/docs/reference/statuses.md-runtime/docs/reference/events.md): a
// real server subprocess on a temp home, real HTTP on 127.0.0.1. Every wait
// is an event wait with a deadline: the listening line, an SSE event, an
// execution status read back through the API, a process exit. Executions
// are kept alive by steps that wait for a gate file the test creates, or by
// long `fn` sleeps that a stop ends at once.
//
// This file: stopping a graph, listings, deletion and the paged event log.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/server_test_helpers.hpp"

using namespace canopy::core::test;
using namespace canopy::core::test::server_test;
using namespace std::chrono_literals;

// -- graph stop and listings ------------------------------------------------------------------------

TEST_CASE("stopping a graph stops every unfinished execution of it and answers their ids "
          "while another graph's execution keeps running",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  register_graph(c, sleeper_graph("g-a", 600000));
  register_graph(c, sleeper_graph("g-b", 600000));
  auto a1 = start(c, "g-a")["id"].get<std::string>();
  auto a2 = start(c, "g-a")["id"].get<std::string>();
  auto b1 = start(c, "g-b")["id"].get<std::string>();
  // Version 2 of g-a finishes at once: a finished execution is not stopped.
  CHECK(register_graph(c, {{"name", "g-a"}, {"steps", {{"a", {{"fn", "noop"}}}}}}) == 2);
  auto a3 = start(c, "g-a");
  CHECK(a3["graph_version"] == 2);
  auto a3_id = a3["id"].get<std::string>();
  CHECK(wait_status(c, a3_id, "completed")["status"] == "completed");
  for (auto& id : {a1, a2, b1})
    REQUIRE(wait_status(c, id, "running")["status"] == "running");

  auto answer = post_json(c, "/v1/graphs/g-a/stop", {{"wait", 20}});
  INFO(answer.text);
  REQUIRE(answer.status == 200);
  REQUIRE(answer.body["stopped"].is_array());
  std::set<std::string> ids;
  for (auto& x : answer.body["stopped"])
    ids.insert(x.get<std::string>());
  CHECK(ids == std::set<std::string>{a1, a2});
  CHECK(answer.body["pending"] == json::array());
  for (auto& id : {a1, a2}) {
    auto doc = get_json(c, "/v1/executions/" + id).body;
    CHECK(doc["status"] == "stopped");
    CHECK(doc["reason"] == "requested");
    CHECK(step_is(doc, "nap", "pending"));
  }
  CHECK(get_json(c, "/v1/executions/" + a3_id).body["status"] == "completed");
  auto b = get_json(c, "/v1/executions/" + b1).body;
  CHECK(b["status"] == "running");
  CHECK(step_is(b, "nap", "running"));
  auto b_events = get_json(c, "/v1/executions/" + b1 + "/events").body;
  for (auto& ev : b_events["items"])
    CHECK(ev["type"].get<std::string>().rfind("stop.", 0) != 0);

  // Nothing left to stop.
  auto again = post_json(c, "/v1/graphs/g-a/stop", {{"wait", 1}});
  CHECK(again.status == 200);
  CHECK(again.body["stopped"] == json::array());

  // A graph's stop with wait 0: 202, every execution it reached pending.
  auto b2 = start(c, "g-b")["id"].get<std::string>();
  REQUIRE(wait_status(c, b2, "running")["status"] == "running");
  auto graph_quick = post_json(c, "/v1/graphs/g-b/stop", {{"wait", 0}, {"mode", "force"}});
  INFO(graph_quick.text);
  CHECK(graph_quick.status == 202);
  CHECK(graph_quick.body["pending"] == graph_quick.body["stopped"]);
  CHECK(graph_quick.body["stopped"].size() == 2);
  CHECK(wait_status(c, b2, "stopped")["status"] == "stopped");
  CHECK(wait_status(c, b1, "stopped")["status"] == "stopped");
  b1 = start(c, "g-b")["id"].get<std::string>();
  REQUIRE(wait_status(c, b1, "running")["status"] == "running");

  // wait 0: 202 stopping, then stopped; a second stop answers no_execution.
  auto quick = post_json(c, "/v1/executions/" + b1 + "/stop", {{"wait", 0}});
  CHECK(quick.status == 202);
  CHECK(quick.body["stop"]["result"] == "stopping");
  CHECK(quick.body["id"] == b1);
  CHECK(wait_status(c, b1, "stopped")["status"] == "stopped");
  auto twice = post_json(c, "/v1/executions/" + b1 + "/stop", {{"wait", 1}});
  CHECK(twice.status == 200);
  CHECK(twice.body["stop"]["result"] == "no_execution");
}

TEST_CASE("listings filter by status and graph and page with a cursor", "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  register_graph(c, {{"name", "quick"}, {"steps", {{"a", {{"fn", "noop"}}}}}});
  register_graph(c, sleeper_graph("slow", 600000));
  std::set<std::string> quick;
  for (int i = 0; i < 3; ++i)
    quick.insert(start(c, "quick")["id"].get<std::string>());
  for (auto& id : quick)
    REQUIRE(wait_status(c, id, "completed")["status"] == "completed");
  auto slow = start(c, "slow")["id"].get<std::string>();
  REQUIRE(wait_status(c, slow, "running")["status"] == "running");

  auto page1 = get_json(c, "/v1/executions?graph=quick&limit=2");
  REQUIRE(page1.status == 200);
  REQUIRE(page1.body["items"].size() == 2);
  REQUIRE(page1.body["next"].is_string());
  auto page2 = get_json(c, "/v1/executions?graph=quick&limit=2&cursor="
                             + page1.body["next"].get<std::string>());
  REQUIRE(page2.status == 200);
  REQUIRE(page2.body["items"].size() == 1);
  CHECK(page2.body["next"].is_null());
  std::vector<std::string> order;
  for (auto* p : {&page1, &page2})
    for (auto& item : p->body["items"]) {
      CHECK(item["graph"] == "quick");
      CHECK(!item.contains("children"));
      order.push_back(item["id"].get<std::string>());
    }
  CHECK(std::set<std::string>(order.begin(), order.end()) == quick);
  // Newest first.
  for (size_t i = 1; i < order.size(); ++i) {
    auto prev = get_json(c, "/v1/executions/" + order[i - 1]).body;
    auto cur = get_json(c, "/v1/executions/" + order[i]).body;
    CHECK(ms_of(prev["created_at"]) >= ms_of(cur["created_at"]));
  }

  auto running = get_json(c, "/v1/executions?status=running");
  REQUIRE(running.status == 200);
  REQUIRE(running.body["items"].size() == 1);
  CHECK(running.body["items"][0]["id"] == slow);
  CHECK(running.body["next"].is_null());
  auto completed = get_json(c, "/v1/executions?status=completed&graph=quick");
  REQUIRE(completed.status == 200);
  CHECK(completed.body["items"].size() == 3);
  auto none = get_json(c, "/v1/executions?graph=slow&status=completed");
  REQUIRE(none.status == 200);
  CHECK(none.body["items"] == json::array());
  auto bob = srv.client(bob_token);
  CHECK(listed_ids(bob).empty());
}

TEST_CASE("GET /v1/graphs lists the caller's graphs by id, newest version each, page by page",
          "[integration][server]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  auto noop = [](const std::string& name, int n) {
    return json{{"name", name}, {"steps", {{"s" + std::to_string(n), {{"fn", "noop"}}}}}};
  };
  CHECK(get_json(alice, "/v1/graphs").body == json{{"items", json::array()}, {"next", nullptr}});
  register_graph(alice, noop("beta", 1));
  CHECK(register_graph(alice, noop("beta", 2)) == 2);
  register_graph(alice, noop("alpha", 1));
  register_graph(alice, noop("gamma", 1));
  register_graph(bob, noop("bobs", 1));

  auto all = get_json(alice, "/v1/graphs");
  INFO(all.text);
  REQUIRE(all.status == 200);
  std::vector<std::string> seen;
  for (auto& g : all.body["items"]) {
    seen.push_back(g["id"].get<std::string>() + "@" + std::to_string(g["version"].get<int>()));
    CHECK_NOTHROW(ms_of(g["created_at"]));
  }
  CHECK(seen == std::vector<std::string>{"alpha@1", "beta@2", "gamma@1"});
  CHECK(all.body["next"].is_null());

  auto page1 = get_json(alice, "/v1/graphs?limit=2");
  REQUIRE(page1.body["items"].size() == 2);
  REQUIRE(page1.body["next"] == "beta");
  auto page2 = get_json(alice, "/v1/graphs?limit=2&cursor=beta");
  REQUIRE(page2.body["items"].size() == 1);
  CHECK(page2.body["items"][0]["id"] == "gamma");
  CHECK(page2.body["next"].is_null());

  auto theirs = get_json(bob, "/v1/graphs");
  REQUIRE(theirs.body["items"].size() == 1);
  CHECK(theirs.body["items"][0]["id"] == "bobs");

  CHECK(get_json(alice, "/v1/graphs?limit=0").status == 400);
  CHECK(get_json(alice, "/v1/graphs?limit=1001").status == 400);
  CHECK(get_json(alice, "/v1/graphs?cursor=a%2Fb").status == 400);
  auto anon = srv.client();
  CHECK(get_json(anon, "/v1/graphs").status == 401);
}

TEST_CASE("DELETE on a settled root removes its whole tree and events while a live tree and "
          "a child and another user's execution are refused",
          "[integration][server]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  register_graph(alice, {{"name", "inner"}, {"steps", {{"x", {{"fn", "noop"}}}}}});
  register_graph(alice, {{"name", "outer"}, {"steps", {{"sub", {{"graph", "inner"}}}}}});
  register_graph(alice, sleeper_graph("slow", 600000));
  auto root = start(alice, "outer")["id"].get<std::string>();
  auto done = wait_status(alice, root, "completed");
  REQUIRE(done["status"] == "completed");
  auto child = done["steps"]["sub"].value("child_id", "");
  REQUIRE(!child.empty());
  auto live = start(alice, "slow")["id"].get<std::string>();
  REQUIRE(wait_status(alice, live, "running")["status"] == "running");

  check_error(request(bob, "DELETE", "/v1/executions/" + root), 404, "not_found", "");
  check_error(request(alice, "DELETE", "/v1/executions/" + child), 409, "wrong_state", "");
  check_error(request(alice, "DELETE", "/v1/executions/" + live), 409, "wrong_state", "");
  check_error(request(alice, "DELETE", "/v1/executions/01nosuchexecution000000000"), 404,
              "not_found", "");
  CHECK(get_json(alice, "/v1/executions/" + root).status == 200);
  CHECK(get_json(alice, "/v1/executions/" + live).body["status"] == "running");

  auto deleted = request(alice, "DELETE", "/v1/executions/" + root);
  INFO(deleted.text);
  CHECK(deleted.status == 204);
  for (auto& id : {root, child}) {
    CHECK(get_json(alice, "/v1/executions/" + id).status == 404);
    CHECK(get_json(alice, "/v1/executions/" + id + "/events").status == 404);
  }
  auto listed = listed_ids(alice);
  CHECK(listed.count(root) == 0);
  CHECK(listed.count(live) == 1);
  CHECK(request(alice, "DELETE", "/v1/executions/" + root).status == 404);
}

TEST_CASE("the JSON event log comes in pages: each event once and in order, for a root and for "
          "a child's subtree, and the CLI reads every page",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  json inner = {{"name", "inner"},
                {"steps", {{"a", {{"fn", "noop"}}}, {"b", {{"fn", "noop"}, {"needs", {"a"}}}}}}};
  json steps = json::object();
  for (int i = 0; i < 600; ++i) // more than one default page of events
    steps["n" + std::to_string(i)] = {{"fn", "noop"}};
  // After every noop: its events follow more than a page of its tree's.
  json all_noops = json::array();
  for (int i = 0; i < 600; ++i)
    all_noops.push_back("n" + std::to_string(i));
  steps["child"] = {{"graph", inner}, {"needs", all_noops}};
  register_graph(c, {{"name", "paged"}, {"steps", steps}});
  auto id = start(c, "paged")["id"].get<std::string>();
  REQUIRE(wait_status(c, id, "completed")["status"] == "completed");
  auto path = "/v1/executions/" + id + "/events";

  // A page holds at most 1,000 events by default, and says where to go on.
  auto first = get_json(c, path);
  REQUIRE(first.status == 200);
  CHECK(first.body["items"].size() == 1000);
  REQUIRE(first.body["next"].is_string());
  auto all = event_log_seqs(c, id); // follows `next`
  REQUIRE(all.size() > 1200);
  CHECK(std::is_sorted(all.begin(), all.end()));
  CHECK(std::set<uint64_t>(all.begin(), all.end()).size() == all.size());

  // Pages of 97, followed by `next`: the same events, each once, in order.
  auto pages_of = [&](const std::string& base, std::vector<json>& items) {
    std::string cursor;
    int pages = 0;
    for (;;) {
      auto p = get_json(c, base + "?limit=97" + (cursor.empty() ? "" : "&cursor=" + cursor));
      REQUIRE(p.status == 200);
      ++pages;
      CHECK(p.body["items"].size() <= 97);
      for (auto& e : p.body["items"])
        items.push_back(e);
      if (p.body["next"].is_null())
        return pages;
      REQUIRE(p.body["next"].is_string());
      REQUIRE(p.body["next"].get<std::string>() != cursor);
      cursor = p.body["next"].get<std::string>();
      REQUIRE(pages < 1000);
    }
  };
  std::vector<json> paged;
  CHECK(pages_of(path, paged) >= 13);
  std::vector<uint64_t> seqs;
  for (auto& e : paged)
    seqs.push_back(e["seq"].get<uint64_t>());
  CHECK(seqs == all);

  // A child's pages hold only its subtree's events (most pages none).
  auto doc = get_json(c, "/v1/executions/" + id).body;
  auto child_id = doc["steps"]["child"]["child_id"].get<std::string>();
  std::vector<json> child_events;
  pages_of("/v1/executions/" + child_id + "/events", child_events);
  CHECK(child_events.size() >= 5); // queued, started, a and b, completed
  for (auto& e : child_events)
    CHECK(e["execution_id"] == child_id);
  CHECK(event_log_seqs(c, child_id).size() == child_events.size());

  // The child's SSE stream, settled, replays its events (which come after
  // more than a page of its tree's) and ends.
  auto stream = read_sse(c, "/v1/executions/" + child_id + "/events");
  CHECK(stream.status == 200);
  CHECK(stream.ended);
  std::vector<uint64_t> streamed;
  for (auto& e : stream.events)
    if (e.id)
      streamed.push_back(*e.id);
  CHECK(streamed == event_log_seqs(c, child_id));

  // The CLI's client follows the pages too.
  temp_dir home;
  auto shown = run_canopy(home.path, {"events", id, "--server", srv.url(), "--token",
                                      alice_token, "--json"});
  INFO("events: " << shown.err);
  CHECK(shown.exit_code == 0);
  size_t printed = 0;
  for (auto pos = shown.out.find("\"seq\""); pos != std::string::npos;
       pos = shown.out.find("\"seq\"", pos + 1))
    ++printed;
  CHECK(printed == all.size());
}
