// Acceptance tests of `canopy serve` (runtime/docs/reference/statuses.md-runtime/docs/reference/events.md): a
// real server subprocess on a temp home, real HTTP on 127.0.0.1. Every wait
// is an event wait with a deadline: the listening line, an SSE event, an
// execution status read back through the API, a process exit. Executions
// are kept alive by steps that wait for a gate file the test creates, or by
// long `fn` sleeps that a stop ends at once.
//
// This file: SIGTERM, SIGKILL and restarts, and readers beside a live server.

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
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core::test;
using namespace canopy::core::test::server_test;
using namespace std::chrono_literals;

// -- signals ---------------------------------------------------------------------------------

TEST_CASE("SIGTERM stops live executions with reason shutdown and exits 0, and a restarted "
          "server resumes them through the API",
          "[integration][server]") {
  temp_dir home;
  auto gate = home.path + "/gate";
  std::string id;
  {
    server_process srv{inline_server(home.path + "/store")};
    CHECK(srv.out() == "listening on 127.0.0.1:" + std::to_string(srv.port()) + "\n");
    auto c = srv.client(alice_token);
    register_graph(c, gated_graph("term", gate));
    id = start(c, "term", {{"who", "t"}})["id"].get<std::string>();
    REQUIRE(step_is(wait_until(c, id, [](const json& d) { return step_is(d, "gate", "running"); }),
                    "gate", "running"));
    // A client following the events does not hold the shutdown up.
    sse_follower live{srv.port(), alice_token, "/v1/executions/" + id + "/events"};
    REQUIRE(live.wait_for_event("step.started", "gate"));
    auto t0 = std::chrono::steady_clock::now();
    CHECK(srv.terminate(60s) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 30s);
    auto stream = live.finish(5s);
    CHECK(stream.status == 200);
    CHECK(srv.out() == "listening on 127.0.0.1:" + std::to_string(srv.port()) + "\n");
  }
  auto doc = show(home.path + "/store", id);
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "shutdown");
  CHECK(step_is(doc, "hello", "completed"));
  CHECK(step_is(doc, "gate", "pending"));
  CHECK(step_is(doc, "tail", "pending"));

  server_process again{inline_server(home.path + "/store")};
  auto c = again.client(alice_token);
  auto got = get_json(c, "/v1/executions/" + id);
  REQUIRE(got.status == 200);
  CHECK(got.body["status"] == "stopped");
  CHECK(got.body["reason"] == "shutdown");
  CHECK(get_json(c, "/v1/graphs/term").status == 200);
  touch(gate);
  auto resumed = post_json(c, "/v1/executions/" + id + "/resume");
  REQUIRE(resumed.status == 200);
  auto done = wait_status(c, id, "completed");
  CHECK(done["status"] == "completed");
  CHECK(done["outputs"] == json{{"greeting", "hi t"}, {"passed", true}});
  CHECK(done["steps"]["hello"]["attempt"] == 1);
  CHECK(again.terminate(30s) == 0);
}

namespace {

/// one → two (waits for `D/gate`) → three; each `run` step appends a line to
/// `D/STEP.count` when it starts, so the files count the runs of each step.
json counted_graph(const std::string& d) {
  return {
    {"name", "crash"},
    {"steps",
     {{"one", {{"run", {"sh", "-c", "echo x >> \"$D/one.count\""}}, {"env", {{"D", d}}}}},
      {"two",
       {{"run", {"sh", "-c",
                 "echo x >> \"$D/two.count\"; i=0; while [ ! -e \"$D/gate\" ]; do "
                 "i=$((i+1)); [ $i -gt 3000 ] && exit 9; sleep 0.02; done"}},
        {"env", {{"D", d}}},
        {"needs", {"one"}}}},
      {"three",
       {{"run", {"sh", "-c", "echo x >> \"$D/three.count\""}},
        {"env", {{"D", d}}},
        {"needs", {"two"}}}}}}};
}

/// Starts `crash` on a server over `store`, waits until step two runs,
/// and SIGKILLs the server. @returns the execution id.
std::string crash_mid_run(const std::string& store, const std::string& d) {
  server_process srv{inline_server(store)};
  auto c = srv.client(alice_token);
  register_graph(c, counted_graph(d));
  auto id = start(c, "crash")["id"].get<std::string>();
  auto running = wait_until(c, id, [&](const json& x) {
    return step_is(x, "two", "running") && line_count(d + "/two.count") == 1;
  });
  REQUIRE(step_is(running, "two", "running"));
  REQUIRE(line_count(d + "/two.count") == 1);
  CHECK(srv.kill() == 128 + SIGKILL);
  return id;
}

server_process::options resuming_server(const std::string& store) {
  auto o = inline_server(store);
  o.args = {"--resume-interrupted"};
  return o;
}

/// Checks that `id` completed with each step run once, except two (running
/// at the crash: at-least-once).
void check_completed_once(httplib::Client& c, const std::string& id, const std::string& d) {
  auto done = wait_status(c, id, "completed", 10s);
  CHECK(done["status"] == "completed");
  CHECK(done["steps"]["one"]["attempt"] == 1);
  CHECK(done["steps"]["two"]["attempt"] == 2);
  CHECK(done["steps"]["three"]["attempt"] == 1);
  CHECK(line_count(d + "/one.count") == 1);
  CHECK(line_count(d + "/two.count") == 2);
  CHECK(line_count(d + "/three.count") == 1);
}

/// A home whose server was SIGKILLed in the middle of a run (`crash_mid_run`).
struct crashed_home {
  temp_dir home;
  std::string store = home.path + "/store";
  std::string id = crash_mid_run(store, home.path);
};

} // namespace

TEST_CASE("after SIGKILL a server restarted with --resume-interrupted completes the "
          "execution without re-running its completed steps",
          "[integration][server]") {
  crashed_home h;
  touch(h.home.path + "/gate"); // also ends the step the crash orphaned
  server_process srv{resuming_server(h.store)};
  auto c = srv.client(alice_token);
  check_completed_once(c, h.id, h.home.path);
  auto events = get_json(c, "/v1/executions/" + h.id + "/events");
  REQUIRE(events.status == 200);
  size_t resumed = 0;
  for (auto& e : events.body["items"])
    resumed += e["type"] == "execution.resumed" ? 1 : 0;
  CHECK(resumed == 1);
  CHECK(srv.terminate(30s) == 0);
}

TEST_CASE("a server restarted with --resume-interrupted finds an interrupted execution "
          "behind more than a page of newer stopped ones",
          "[integration][server]") {
  crashed_home h;
  {
    // 1,500 roots stopped on request after it: the restart reads the
    // stopped roots a page at a time, newest first.
    auto db = canopy::core::store_test::open_store(h.store);
    canopy::core::write_batch b;
    for (int i = 0; i < 1500; ++i) {
      auto r = canopy::core::store_test::make_exec(canopy::core::make_execution_id(), "other",
                                                   canopy::core::execution_status::stopped);
      r.reason = canopy::core::step_reason::requested;
      b.executions.push_back(std::move(r));
    }
    REQUIRE_FALSE(db->commit(b));
  }
  touch(h.home.path + "/gate");
  server_process srv{resuming_server(h.store)};
  auto c = srv.client(alice_token);
  check_completed_once(c, h.id, h.home.path);
  CHECK(srv.terminate(30s) == 0);
}

TEST_CASE("after SIGKILL a restarted server marks the execution stopped/interrupted, and a "
          "later restart with --resume-interrupted still completes it",
          "[integration][server]") {
  crashed_home h;
  {
    // Without --resume-interrupted it stays stopped.
    server_process srv{inline_server(h.store)};
    auto c = srv.client(alice_token);
    auto got = get_json(c, "/v1/executions/" + h.id);
    REQUIRE(got.status == 200);
    CHECK(got.body["status"] == "stopped");
    CHECK(got.body["reason"] == "interrupted");
    CHECK(step_is(got.body, "one", "completed"));
    CHECK(step_is(got.body, "two", "pending"));
    CHECK(step_is(got.body, "three", "pending"));
    CHECK(srv.terminate(30s) == 0);
  }
  // The shutdown did not touch it.
  auto still = show(h.store, h.id);
  CHECK(still["status"] == "stopped");
  CHECK(still["reason"] == "interrupted");
  CHECK(line_count(h.home.path + "/two.count") == 1);

  touch(h.home.path + "/gate");
  server_process srv{resuming_server(h.store)};
  auto c = srv.client(alice_token);
  check_completed_once(c, h.id, h.home.path);
}

TEST_CASE("read commands from another process on the server's home leave its live "
          "executions running",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  register_graph(c, sleeper_graph("hold", 600000));
  auto id = start(c, "hold")["id"].get<std::string>();
  REQUIRE(wait_status(c, id, "running")["status"] == "running");
  // Rule 12 turns only executions of a dead owner into interrupted ones; the
  // server is alive.
  auto ls = run_canopy(srv.home(), {"ls", "--json", "--all"});
  CHECK(ls.exit_code == 0);
  auto listed = ls.out_json();
  REQUIRE(listed.is_array());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["status"] == "running");
  auto shown = show(srv.home(), id);
  CHECK(shown["status"] == "running");
  auto now = get_json(c, "/v1/executions/" + id).body;
  CHECK(now["status"] == "running");
  CHECK(now["reason"].is_null());
  CHECK(now["steps"]["nap"]["attempt"] == 1);
  check_error(post_json(c, "/v1/executions/" + id + "/resume"), 409, "wrong_state", "");
  auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"wait", 20}});
  CHECK(stop.status == 200);
  CHECK(stop.body["reason"] == "requested");
}
