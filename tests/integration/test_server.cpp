// Acceptance tests of `canopy serve` (runtime/docs/reference/statuses.md-runtime/docs/reference/events.md): a
// real server subprocess on a temp home, real HTTP on 127.0.0.1. Every wait
// is an event wait with a deadline: the listening line, an SSE event, an
// execution status read back through the API, a process exit. Executions
// are kept alive by steps that wait for a gate file the test creates, or by
// long `fn` sleeps that a stop ends at once.
//
// This file: the lifecycle of an execution, authentication and ownership,
// and SSE. (Bad input, restarts, stops and metrics, listings: the other
// test_server_*.cpp files.)

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

// -- lifecycle ---------------------------------------------------------------------------

TEST_CASE("an execution registered, started, followed, stopped, resumed and completed "
          "over HTTP keeps its finished steps and ends with its outputs",
          "[integration][server]") {
  server_process srv{inline_server()};
  auto c = srv.client(alice_token);
  auto gate = srv.dir() + "/gate";
  auto doc = gated_graph("life", gate);

  // Registering the same name again makes the next version (rule 17).
  auto first = doc;
  first["steps"]["hello"]["with"]["greeting"] = "version one ${inputs.who}";
  CHECK(register_graph(c, first) == 1);
  CHECK(register_graph(c, doc) == 2);
  auto g = get_json(c, "/v1/graphs/life");
  REQUIRE(g.status == 200);
  CHECK(g.body["id"] == "life");
  CHECK(g.body["version"] == 2);
  CHECK(g.body["graph"] == doc);
  auto g1 = get_json(c, "/v1/graphs/life?version=1");
  REQUIRE(g1.status == 200);
  CHECK(g1.body["version"] == 1);
  CHECK(g1.body["graph"] == first);

  auto started = start(c, "life", {{"who", "bob"}});
  auto id = started["id"].get<std::string>();
  CHECK(started["graph"] == "life");
  CHECK(started["graph_version"] == 2);
  CHECK((started["status"] == "queued" || started["status"] == "running"));
  CHECK(started["parent_id"].is_null());
  CHECK(started["root_id"] == id);
  CHECK(started["depth"] == 0);
  CHECK(started["inputs"] == json{{"who", "bob"}});
  CHECK(started["outputs"].is_null());
  CHECK_NOTHROW(ms_of(started["created_at"]));
  REQUIRE(started["steps"].is_object());
  CHECK(started["steps"].size() == 3);

  // Follow the run live until the gate step runs, then stop it and wait.
  sse_follower live{srv.port(), alice_token, "/v1/executions/" + id + "/events"};
  REQUIRE(live.wait_for_event("step.started", "gate"));
  auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"mode", "graceful"}, {"wait", 20}});
  INFO("stop: " << stop.text);
  REQUIRE(stop.status == 200);
  // The answer is the execution document with the stop's outcome inside.
  CHECK(stop.body["stop"]["result"] == "stopped");
  CHECK(stop.body["stop"]["mode"] == "graceful");
  CHECK(stop.body["stop"]["id"].is_string());
  CHECK(ms_of(stop.body["stop"]["handled_at"]) >= ms_of(stop.body["stop"]["requested_at"]));
  auto& stopped = stop.body;
  CHECK(stopped["id"] == id);
  CHECK(stopped["status"] == "stopped");
  CHECK(stopped["reason"] == "requested");
  CHECK_NOTHROW(ms_of(stopped["ended_at"]));
  CHECK(step_is(stopped, "hello", "completed"));
  CHECK(step_is(stopped, "gate", "pending"));
  CHECK(stopped["steps"]["gate"]["reason"] == "requested");
  CHECK(step_is(stopped, "tail", "pending"));
  CHECK(stopped["outputs"].is_null());

  // The stream ends once the execution is no longer running.
  auto first_stream = live.finish(10s);
  CHECK(first_stream.status == 200);
  CHECK(first_stream.content_type.find("text/event-stream") != std::string::npos);
  CHECK(first_stream.ended);
  auto seqs1 = check_stream(first_stream);
  REQUIRE(!first_stream.events.empty());
  CHECK(first_stream.events.front().event == "execution.queued");
  CHECK(has_event(first_stream, "execution.stopped"));
  // Only the stop's own bookkeeping may follow the terminal event.
  for (auto i = std::find_if(first_stream.events.begin(), first_stream.events.end(),
                             [](auto& ev) { return ev.event == "execution.stopped"; });
       i != first_stream.events.end(); ++i)
    CHECK((i->event == "execution.stopped" || i->event.rfind("stop.", 0) == 0));
  // Everything logged up to the end of the stream was in it.
  CHECK(seqs1 == event_log_seqs(c, id));
  // It asks for a reconnection delay once and closes with an `end` event.
  CHECK(first_stream.retry_ms == 3000);
  REQUIRE(first_stream.end);
  CHECK((*first_stream.end)["execution_id"] == id);
  CHECK((*first_stream.end)["status"] == "stopped");
  CHECK((*first_stream.end)["last_seq"] == seqs1.back());
  CHECK(has_event(first_stream, "execution.started"));
  CHECK(has_event(first_stream, "step.completed", "hello"));
  CHECK(has_event(first_stream, "stop.requested"));
  CHECK(has_event(first_stream, "stop.handled"));
  CHECK(has_event(first_stream, "step.pending", "gate"));

  // GET answers the same state, without children (rule 18); /tree has them.
  auto got = get_json(c, "/v1/executions/" + id);
  REQUIRE(got.status == 200);
  CHECK(got.body["status"] == "stopped");
  CHECK(!got.body.contains("children"));
  auto tree = get_json(c, "/v1/executions/" + id + "/tree");
  REQUIRE(tree.status == 200);
  CHECK(tree.body["id"] == id);
  CHECK(tree.body["children"] == json::array());

  // Resume with the gate open: only the pending steps run.
  touch(gate);
  auto resumed = post_json(c, "/v1/executions/" + id + "/resume");
  INFO("resume: " << resumed.text);
  REQUIRE(resumed.status == 200);
  CHECK(resumed.body["id"] == id);
  CHECK((resumed.body["status"] == "running" || resumed.body["status"] == "completed"));
  auto done = wait_status(c, id, "completed");
  REQUIRE(done["status"] == "completed");
  CHECK(done["outputs"] == json{{"greeting", "hi bob"}, {"passed", true}});
  CHECK(done["reason"].is_null());
  CHECK(done["steps"]["hello"]["attempt"] == 1);
  CHECK(done["steps"]["gate"]["attempt"] == 2);
  CHECK(done["steps"]["tail"]["attempt"] == 1);

  // Reconnecting with the last id seen replays exactly what came after.
  auto second_stream = read_sse(c, "/v1/executions/" + id + "/events", seqs1.back());
  CHECK(second_stream.ended);
  auto seqs2 = check_stream(second_stream);
  REQUIRE(!seqs2.empty());
  CHECK(seqs2.front() > seqs1.back());
  CHECK(has_event(second_stream, "execution.resumed"));
  CHECK(second_stream.events.back().event == "execution.completed");
  REQUIRE(second_stream.end);
  CHECK((*second_stream.end)["status"] == "completed");
  auto all = seqs1;
  all.insert(all.end(), seqs2.begin(), seqs2.end());
  CHECK(all == event_log_seqs(c, id));
  // At the end of a settled tree's log, EventSource is told to stop: 204.
  auto past = read_sse(c, "/v1/executions/" + id + "/events", seqs2.back());
  INFO("past: " << past.error << " " << past.text);
  CHECK(past.status == 204);
  CHECK(past.events.empty());
  CHECK(!past.end);
  CHECK(read_sse(c, "/v1/executions/" + id + "/events", seqs2.back() + 100).status == 204);

  // A terminal execution: resume answers its document, stop answers
  // no_execution and changes nothing.
  auto again = post_json(c, "/v1/executions/" + id + "/resume");
  CHECK(again.status == 200);
  CHECK(again.body["status"] == "completed");
  auto nothing = post_json(c, "/v1/executions/" + id + "/stop", {{"wait", 1}});
  CHECK(nothing.status == 200);
  CHECK(nothing.body["stop"]["result"] == "no_execution");
  CHECK(nothing.body["stop"]["id"].is_null());
  CHECK(nothing.body["id"] == id);
  CHECK(nothing.body["status"] == "completed");
  CHECK(nothing.body["outputs"] == done["outputs"]);
}

// -- authentication and ownership --------------------------------------------------------------

TEST_CASE("requests without a valid token answer 401 and another user's resources answer "
          "404 on every route without touching them",
          "[integration][server]") {
  server_process srv{inline_server()};
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  auto anon = srv.client();
  auto gate = srv.dir() + "/gate";
  register_graph(alice, gated_graph("private", gate));
  auto id = start(alice, "private", {{"who", "alice"}})["id"].get<std::string>();
  REQUIRE(step_is(wait_until(alice, id, [](const json& d) { return step_is(d, "gate", "running"); }),
                  "gate", "running"));

  // 401: no token, a wrong one, a malformed header.
  for (auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
         {"GET", "/v1/executions"},
         {"GET", "/v1/executions/" + id},
         {"GET", "/v1/executions/" + id + "/events"},
         {"POST", "/v1/executions/" + id + "/stop"},
         {"POST", "/v1/graphs"},
         {"GET", "/v1/graphs/private"}}) {
    INFO(method << " " << path);
    check_error(request(anon, method, path, "{}"), 401, "unauthorized", "");
    for (auto& auth : {"Bearer tx", "Bearer ", "Bearer t", "Bearer taa", "Bearer TA",
                       "Basic dGE6", "ta", "bearer TA", "Bearerta"}) {
      INFO("Authorization: " << auth);
      check_error(request(anon, method, path, "{}", "application/json",
                          {{"Authorization", auth}}),
                  401, "unauthorized", "");
    }
  }
  // Liveness and metrics need no token (rule 17).
  CHECK(get_json(anon, "/healthz").status == 200);
  CHECK(request(anon, "GET", "/metrics").status == 200);

  // Bob sees none of Alice's things.
  auto e = "/v1/executions/" + id;
  check_error(get_json(bob, e), 404, "not_found", "");
  check_error(get_json(bob, e + "/tree"), 404, "not_found", "");
  check_error(get_json(bob, e + "/events"), 404, "not_found", "");
  auto sse = read_sse(bob, e + "/events");
  CHECK(sse.status == 404);
  CHECK(sse.events.empty());
  check_error(post_json(bob, e + "/stop", {{"mode", "force"}, {"wait", 0}}), 404, "not_found", "");
  check_error(post_json(bob, e + "/stop"), 404, "not_found", "");
  check_error(post_json(bob, e + "/resume"), 404, "not_found", "");
  check_error(get_json(bob, "/v1/graphs/private"), 404, "not_found", "");
  check_error(post_json(bob, "/v1/graphs/private/executions", {{"inputs", {{"who", "bob"}}}}),
              404, "not_found", "");
  check_error(post_json(bob, "/v1/graphs/private/stop", {{"mode", "force"}}), 404, "not_found",
              "");
  CHECK(listed_ids(bob).empty());
  auto filtered = get_json(bob, "/v1/executions?graph=private");
  REQUIRE(filtered.status == 200);
  CHECK(filtered.body["items"] == json::array());

  // Graph ids are per owner: Bob's "private" is his own version 1.
  CHECK(register_graph(bob, sleeper_graph("private", 1)) == 1);
  auto mine = get_json(alice, "/v1/graphs/private");
  REQUIRE(mine.status == 200);
  CHECK(mine.body["version"] == 1);
  CHECK(mine.body["graph"] == gated_graph("private", gate));
  // Bob's graph stop on his own "private" does not reach Alice's execution.
  auto bob_stop = post_json(bob, "/v1/graphs/private/stop", {{"wait", 1}});
  CHECK(bob_stop.status == 200);
  CHECK(bob_stop.body["stopped"] == json::array());

  // Alice's execution is untouched: still running, no stop requested.
  auto now = get_json(alice, e);
  REQUIRE(now.status == 200);
  CHECK(now.body["status"] == "running");
  CHECK(step_is(now.body, "gate", "running"));
  auto log = get_json(alice, e + "/events");
  REQUIRE(log.status == 200);
  for (auto& ev : log.body["items"])
    CHECK(ev["type"].get<std::string>().rfind("stop.", 0) != 0);
  CHECK(listed_ids(alice) == std::set<std::string>{id});
  touch(gate);
  auto done = wait_status(alice, id, "completed");
  CHECK(done["status"] == "completed");
  CHECK(done["steps"]["gate"]["attempt"] == 1);
}

TEST_CASE("the bearer scheme is matched in any case and the token exactly",
          "[integration][server]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto anon = srv.client();
  register_graph(alice, sleeper_graph("mine", 1));
  // RFC 9110 §11.1: the scheme is case-insensitive.
  for (auto scheme : {"Bearer", "bearer", "BEARER", "bEaReR"}) {
    INFO("Authorization: " << scheme << " " << alice_token);
    auto a = get_json(anon, "/v1/graphs/mine",
                      {{"Authorization", std::string{scheme} + " " + alice_token}});
    CHECK(a.status == 200);
    CHECK(a.body["id"] == "mine");
    check_error(get_json(anon, "/v1/graphs/mine",
                         {{"Authorization", std::string{scheme} + " " + bob_token}}),
                404, "not_found", "");
  }
  for (auto& auth : {"bearer TA", "BEARER tx", "bearerta", "bearer"}) {
    INFO("Authorization: " << auth);
    auto a = get_json(anon, "/v1/graphs/mine", {{"Authorization", auth}});
    check_error(a, 401, "unauthorized", "");
    CHECK(a.www_authenticate == "Bearer realm=\"canopy\"");
  }
}

// -- SSE --------------------------------------------------------------------------------------

TEST_CASE("an SSE reader that reconnects with Last-Event-ID misses no event and sees no "
          "event twice",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  json steps = json::object();
  const int n = 20;
  for (int i = 0; i < n; ++i) {
    json s = {{"fn", "sleep"}, {"with", {{"ms", 40}}}};
    if (i > 0)
      s["needs"] = {"s" + std::to_string(i - 1)};
    steps["s" + std::to_string(i)] = s;
  }
  register_graph(c, {{"name", "chain"}, {"steps", steps}});
  auto id = start(c, "chain")["id"].get<std::string>();
  auto path = "/v1/executions/" + id + "/events";

  // Cut the first connection after a few live events.
  auto first = read_sse(c, path, std::nullopt,
                        [](const sse_event& e) { return !(e.event == "step.started"
                                                          && e.json_data()["step"] == "s3"); });
  CHECK(first.status == 200);
  CHECK(first.stopped);
  CHECK(!first.ended);
  auto seqs1 = check_stream(first);
  REQUIRE(!seqs1.empty());
  CHECK(first.events.front().event == "execution.queued");
  auto mid = get_json(c, "/v1/executions/" + id);
  INFO("status at the cut: " << mid.body["status"]);

  auto second = read_sse(c, path, seqs1.back());
  CHECK(second.status == 200);
  CHECK(second.ended);
  auto seqs2 = check_stream(second);
  REQUIRE(!seqs2.empty());
  CHECK(seqs2.front() > seqs1.back());
  CHECK(second.events.back().event == "execution.completed");
  CHECK(get_json(c, "/v1/executions/" + id).body["status"] == "completed");

  auto all = seqs1;
  all.insert(all.end(), seqs2.begin(), seqs2.end());
  std::set<uint64_t> unique(all.begin(), all.end());
  CHECK(unique.size() == all.size());
  auto log = event_log_seqs(c, id);
  CHECK(all == log);
  CHECK(std::count_if(first.events.begin(), first.events.end(),
                      [](auto& e) { return e.event == "step.completed"; })
          + std::count_if(second.events.begin(), second.events.end(),
                          [](auto& e) { return e.event == "step.completed"; })
        == n);

  // A first connection after the end replays the whole log and ends; so does
  // ?after=SEQ from its point; the JSON log honours after= too.
  auto replay = read_sse(c, path);
  CHECK(replay.ended);
  CHECK(check_stream(replay) == log);
  auto from = read_sse(c, path + "?after=" + std::to_string(seqs1.back()));
  CHECK(from.ended);
  CHECK(check_stream(from) == seqs2);
  auto tail = get_json(c, path + "?after=" + std::to_string(seqs1.back()));
  REQUIRE(tail.status == 200);
  std::vector<uint64_t> tail_seqs;
  for (auto& ev : tail.body["items"])
    tail_seqs.push_back(ev["seq"].get<uint64_t>());
  CHECK(tail_seqs == seqs2);
}
