// Acceptance tests of `canopy serve` (runtime/docs/reference/statuses.md-runtime/docs/reference/events.md): a
// real server subprocess on a temp home, real HTTP on 127.0.0.1. Every wait
// is an event wait with a deadline: the listening line, an SSE event, an
// execution status read back through the API, a process exit. Executions
// are kept alive by steps that wait for a gate file the test creates, or by
// long `fn` sleeps that a stop ends at once.
//
// This file: metrics, and stopping executions and their children.

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

// -- metrics ------------------------------------------------------------------------------------

TEST_CASE("/metrics exposes every metric family and its values move after a run and a stop",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  auto anon = srv.client();
  auto before = request(anon, "GET", "/metrics");
  REQUIRE(before.status == 200);
  CHECK(before.content_type.find("text/plain") == 0);
  for (auto& family : {"canopy_executions", "canopy_steps_started_total",
                       "canopy_steps_finished_total", "canopy_live_actors",
                       "canopy_stop_latency_seconds", "canopy_store_commit_seconds",
                       "canopy_http_requests_total"}) {
    INFO(family);
    CHECK(before.text.find(std::string{"# TYPE "} + family + " ") != std::string::npos);
  }
  auto m0 = samples(before.text);

  register_graph(c, {{"name", "quick"}, {"steps", {{"a", {{"fn", "noop"}}}, {"b", {{"fn", "noop"}, {"needs", {"a"}}}}}}});
  register_graph(c, sleeper_graph("slow", 600000));
  auto quick = start(c, "quick")["id"].get<std::string>();
  CHECK(wait_status(c, quick, "completed")["status"] == "completed");
  auto slow = start(c, "slow")["id"].get<std::string>();
  REQUIRE(wait_status(c, slow, "running")["status"] == "running");
  auto live = samples(request(anon, "GET", "/metrics").text);
  CHECK(sample(live, "canopy_live_actors") >= 1);
  CHECK(sample(live, "canopy_executions{status=\"running\"}")
        == sample(m0, "canopy_executions{status=\"running\"}") + 1);
  auto stop = post_json(c, "/v1/executions/" + slow + "/stop", {{"wait", 20}});
  REQUIRE(stop.status == 200);
  REQUIRE(stop.body["stop"]["result"] == "stopped");

  // The counters follow the event stream, which may deliver the stop's
  // events just after its answer: read until the stop is counted.
  decltype(samples(std::string{})) m1;
  REQUIRE(eventually([&] {
    auto after = request(anon, "GET", "/metrics");
    REQUIRE(after.status == 200);
    m1 = samples(after.text);
    return sample(m1, "canopy_stop_latency_seconds_count")
           == sample(m0, "canopy_stop_latency_seconds_count") + 1;
  }));
  CHECK(sample(m1, "canopy_executions{status=\"completed\"}")
        == sample(m0, "canopy_executions{status=\"completed\"}") + 1);
  CHECK(sample(m1, "canopy_executions{status=\"stopped\"}")
        == sample(m0, "canopy_executions{status=\"stopped\"}") + 1);
  CHECK(sample(m1, "canopy_executions{status=\"running\"}")
        == sample(m0, "canopy_executions{status=\"running\"}"));
  CHECK(sample(m1, "canopy_steps_started_total") == sample(m0, "canopy_steps_started_total") + 3);
  CHECK(sample(m1, "canopy_steps_finished_total{result=\"completed\"}")
        == sample(m0, "canopy_steps_finished_total{result=\"completed\"}") + 2);
  CHECK(sample(m1, "canopy_stop_latency_seconds_count")
        == sample(m0, "canopy_stop_latency_seconds_count") + 1);
  // Request and snapshot may share one commit: the latency (in whole ms,
  // as the registry records times) can be 0, never negative.
  CHECK(sample(m1, "canopy_stop_latency_seconds_sum")
        >= sample(m0, "canopy_stop_latency_seconds_sum"));
  CHECK(sample(m1, "canopy_stop_latency_seconds_bucket{le=\"+Inf\"}")
        == sample(m1, "canopy_stop_latency_seconds_count"));
  CHECK(sample(m1, "canopy_store_commit_seconds_count")
        > sample(m0, "canopy_store_commit_seconds_count"));
  CHECK(sample(m1,
               "canopy_http_requests_total{method=\"POST\",route=\"/v1/executions/{id}/stop\","
               "code=\"200\"}")
        == 1);
  CHECK(sample(m1,
               "canopy_http_requests_total{method=\"POST\",route=\"/v1/graphs/{id}/executions\","
               "code=\"201\"}")
        == 2);
  CHECK(sample(m1, "canopy_http_requests_total{method=\"GET\",route=\"/metrics\",code=\"200\"}")
        >= 2);
}

TEST_CASE("every stop with wait of a running execution answers stopped",
          "[integration][server]") {
  // Subprocess steps: their halt takes a few milliseconds, as in real use.
  server_process srv{inline_server()};
  auto c0 = srv.client(alice_token);
  register_graph(c0, {{"name", "nap"}, {"steps", {{"nap", {{"run", {"sleep", "60"}}}}}}});
  constexpr int threads = 4;
  constexpr int per_thread = 25;
  std::mutex mtx;
  std::map<std::string, int> answers; // "HTTP result status" -> count
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      auto c = srv.client(alice_token);
      for (int i = 0; i < per_thread; ++i) {
        auto started = post_json(c, "/v1/graphs/nap/executions");
        if (started.status != 201) {
          std::lock_guard<std::mutex> guard{mtx};
          ++answers["start " + std::to_string(started.status)];
          continue;
        }
        auto id = started.body["id"].get<std::string>();
        auto doc = wait_until(c, id, [](const json& d) { return step_is(d, "nap", "running"); });
        auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"wait", 20}});
        std::lock_guard<std::mutex> guard{mtx};
        ++answers[std::to_string(stop.status) + " " + stop_result_of(stop.body) + " "
                  + stop.body.value("status", "?")];
      }
    });
  for (auto& t : pool)
    t.join();
  std::ostringstream seen;
  for (auto& [k, n] : answers)
    seen << n << " x " << k << "\n";
  INFO("answers:\n" << seen.str());
  CHECK(answers.size() == 1);
  CHECK(answers["200 stopped stopped"] == threads * per_thread);
}

TEST_CASE("a graceful stop whose wait runs out answers 202 stopping, and a force stop skips the "
          "grace periods",
          "[integration][server]") {
  server_process srv{inline_server()};
  auto c = srv.client(alice_token);
  // A step that ignores SIGINT and SIGTERM: only the escalation to SIGKILL
  // ends it.
  // It writes NAME.ready once the traps are set: a stop sent before that
  // would end it at once.
  auto stubborn = [&](const std::string& name, const std::string& grace) {
    return json{{"name", name},
                {"steps",
                 {{"hold",
                   {{"run", {"sh", "-c",
                            "trap '' INT TERM; touch " + srv.dir() + "/" + name
                              + ".ready; i=0; while [ $i -lt 1200 ]; do i=$((i+1)); "
                                "sleep 0.05; done"}},
                    {"grace", {{"interrupt", grace}, {"terminate", grace}}}}}}}};
  };
  register_graph(c, stubborn("slow-grace", "1s"));
  register_graph(c, stubborn("long-grace", "60s"));
  auto a = start(c, "slow-grace")["id"].get<std::string>();
  auto b = start(c, "long-grace")["id"].get<std::string>();
  for (auto& name : {"slow-grace", "long-grace"}) {
    auto ready = srv.dir() + "/" + name + ".ready";
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (::access(ready.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    REQUIRE(::access(ready.c_str(), F_OK) == 0);
  }

  auto pending = post_json(c, "/v1/executions/" + a + "/stop", {{"wait", 0.2}});
  INFO(pending.text);
  CHECK(pending.status == 202);
  CHECK(pending.body["stop"]["result"] == "stopping");
  CHECK(pending.body["id"] == a);
  CHECK(pending.body["status"] == "stopping");
  auto later = wait_status(c, a, "stopped", 20s);
  CHECK(later["status"] == "stopped");
  CHECK(later["reason"] == "requested");
  CHECK(step_is(later, "hold", "pending"));

  auto t0 = std::chrono::steady_clock::now();
  auto forced = post_json(c, "/v1/executions/" + b + "/stop", {{"mode", "force"}, {"wait", 30}});
  auto took = std::chrono::steady_clock::now() - t0;
  INFO(forced.text);
  CHECK(forced.status == 200);
  CHECK(forced.body["status"] == "stopped");
  CHECK(took < 30s); // its grace periods alone are 120 s
}

TEST_CASE("a child execution appears in /tree, follows its parent's stop, and belongs to "
          "its parent's owner",
          "[integration][server]") {
  server_process srv{inline_server()};
  auto c = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  auto gate = srv.dir() + "/gate";
  register_graph(c, {{"name", "parent"},
                     {"steps",
                      {{"first", {{"fn", "noop"}}},
                       {"sub",
                        {{"graph", {{"steps", {{"wait", gate_step(gate)}}}}},
                         {"needs", {"first"}}}}}}});
  auto id = start(c, "parent")["id"].get<std::string>();
  auto tree = get_json(c, "/v1/executions/" + id + "/tree");
  auto has_running_child = [](const json& t) {
    return t.is_object() && t["children"].is_array() && t["children"].size() == 1
           && step_is(t["children"][0], "wait", "running");
  };
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!has_running_child(tree.body) && std::chrono::steady_clock::now() < deadline)
    tree = get_json(c, "/v1/executions/" + id + "/tree");
  INFO(tree.text);
  REQUIRE(has_running_child(tree.body));
  auto& child = tree.body["children"][0];
  auto child_id = child["id"].get<std::string>();
  CHECK(child["parent_id"] == id);
  CHECK(child["root_id"] == id);
  CHECK(child["depth"] == 1);
  CHECK(child["parent_step"] == "sub");
  CHECK(!get_json(c, "/v1/executions/" + id).body.contains("children"));
  check_error(get_json(bob, "/v1/executions/" + child_id), 404, "not_found", "");
  check_error(post_json(bob, "/v1/executions/" + child_id + "/stop"), 404, "not_found", "");

  auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"wait", 20}});
  REQUIRE(stop.status == 200);
  CHECK(stop.body["status"] == "stopped");
  CHECK(step_is(stop.body, "first", "completed"));
  CHECK(step_is(stop.body, "sub", "pending"));
  auto c_doc = get_json(c, "/v1/executions/" + child_id).body;
  CHECK(c_doc["status"] == "stopped");
  CHECK(c_doc["reason"] == "parent_stopped");
  CHECK(step_is(c_doc, "wait", "pending"));
  // The child's event log is its subtree only. (The answer is a named
  // object: a range-for over a member of a temporary reads freed memory.)
  auto child_events = get_json(c, "/v1/executions/" + child_id + "/events").body;
  for (auto& e : child_events["items"])
    CHECK(e["execution_id"] == child_id);

  // Resuming the root resumes the child under its existing id.
  touch(gate);
  REQUIRE(post_json(c, "/v1/executions/" + id + "/resume").status == 200);
  auto done = wait_status(c, id, "completed");
  CHECK(done["status"] == "completed");
  auto final_tree = get_json(c, "/v1/executions/" + id + "/tree").body;
  REQUIRE(final_tree["children"].size() == 1);
  CHECK(final_tree["children"][0]["id"] == child_id);
  CHECK(final_tree["children"][0]["status"] == "completed");
  CHECK(done["steps"]["first"]["attempt"] == 1);
}
