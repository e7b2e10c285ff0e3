// Hostile input through the real binary: strict JSON in graph files, config
// files and HTTP bodies, files that are not regular files, graph references
// `validate` resolves as `run` will, and the per-user quotas of a server.

#include <sys/stat.h>

#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// One step that sleeps `ms` (a stop ends it at once).
json sleeper(const std::string& name, int ms = 600000) {
  return {{"name", name}, {"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", ms}}}}}}}};
}

/// Checks a runtime/docs/reference/http.md error answer: status and code.
void check_error(const http_answer& a, int status, const std::string& code) {
  INFO("answer: " << a.status << " " << a.text);
  CHECK(a.status == status);
  REQUIRE(a.body.is_object());
  REQUIRE(a.body.contains("error"));
  CHECK(a.body["error"].value("code", "") == code);
}

} // namespace

// -- files ------------------------------------------------------------------------------

TEST_CASE("validate and run refuse a FIFO as graph file at once", "[integration][cli][strict]") {
  temp_dir home;
  temp_dir files;
  auto fifo = files.path + "/graph.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (auto cmd : {"validate", "run"}) {
    INFO("canopy " << cmd);
    auto t0 = std::chrono::steady_clock::now();
    // Waiting for a writer would hang: the helper fails it after 60 s.
    auto r = run_canopy(home.path, {cmd, fifo}, 60s);
    CHECK(std::chrono::steady_clock::now() - t0 < 30s);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains("not a regular file (a FIFO)"));
  }
  for (auto path : {"/dev/null", "/dev/stdin"}) {
    INFO(path);
    auto dev = run_canopy(home.path, {"validate", path}, 20s);
    CHECK(dev.exit_code != 0);
    CHECK_THAT(dev.err, Catch::Contains("not a regular file"));
  }
}

TEST_CASE("a graph file with a duplicate key or bytes after a NUL fails validate and run",
          "[integration][cli][strict]") {
  temp_dir home;
  temp_dir files;
  auto dup = files.write("dup.json", R"({"steps": {"a": {"fn": "noop", "fn": "fail"}}})");
  std::string good = R"({"steps": {"a": {"fn": "noop"}}})";
  auto nul = files.write("nul.json", good + std::string{"\0garbage", 8});
  for (auto cmd : {"validate", "run"}) {
    INFO("canopy " << cmd);
    auto r = run_canopy(home.path, {cmd, dup});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("/steps/a/fn: duplicate key 'fn'"));
    r = run_canopy(home.path, {cmd, nul});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("byte " + std::to_string(good.size()))
                        && Catch::Contains("NUL"));
  }
  // Nothing stored: no store was even created.
  CHECK(!has_store(home.path));
}

TEST_CASE("a config file with a duplicate key stops serve with exit 2",
          "[integration][cli][strict]") {
  temp_dir home;
  temp_dir files;
  auto cfg = files.write("config.json",
                         R"({"listen": "127.0.0.1:0", "users": {"a": {"token": "x"}},
                             "allow_inline_commands": false, "allow_inline_commands": true})");
  auto r = run_canopy(home.path, {"serve", "--config", cfg}, 30s);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/allow_inline_commands: duplicate key"));
  auto fifo = files.path + "/fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = run_canopy(home.path, {"serve", "--config", fifo}, 20s);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("not a regular file (a FIFO)"));
}

// -- graph references ------------------------------------------------------------------------

TEST_CASE("validate fails a graph step naming a graph that run cannot resolve, at its path",
          "[integration][cli][strict]") {
  temp_dir home;
  temp_dir files;
  auto g = files.write("g.json", R"({"steps": {"child": {"graph": "nosuchname"}}})");
  auto r = run_canopy(home.path, {"validate", g});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/steps/child/graph: ")
                      && Catch::Contains("unknown graph 'nosuchname'"));

  // On a server, the token's user's registered graphs resolve.
  server_process srv;
  auto alice = srv.client(alice_token);
  REQUIRE(post_json(alice, "/v1/graphs", sleeper("known", 10)).status == 201);
  auto ok = files.write("ok.json", R"({"steps": {"child": {"graph": "known"}}})");
  auto remote = [&](const std::string& file, const std::string& token) {
    return run_canopy(home.path, {"validate", file, "--server", srv.url(), "--token", token});
  };
  r = remote(ok, alice_token);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  r = remote(g, alice_token);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/steps/child/graph: ")
                      && Catch::Contains("graph 'nosuchname' does not resolve"));
  // Bob has no graph 'known': his run would not find it either.
  r = remote(ok, bob_token);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/steps/child/graph: "));
}

// -- HTTP bodies ----------------------------------------------------------------------------

TEST_CASE("the API answers 400 to bodies with duplicate keys or bytes after a NUL and stores "
          "nothing",
          "[integration][server][strict]") {
  server_process srv;
  auto c = srv.client(alice_token);
  const std::string dup = R"({"name": "dup", "steps": {"a": {"fn": "noop", "fn": "fail"}}})";
  auto a = request(c, "POST", "/v1/graphs", dup);
  check_error(a, 400, "invalid_json");
  CHECK_THAT(a.body["error"].value("message", ""), Catch::Contains("duplicate key 'fn'"));
  CHECK(get_json(c, "/v1/graphs/dup").status == 404);

  std::string good = R"({"name": "nul", "steps": {"a": {"fn": "noop"}}})";
  a = request(c, "POST", "/v1/graphs", good + std::string{"\0{}", 3});
  check_error(a, 400, "invalid_json");
  CHECK_THAT(a.body["error"].value("message", ""), Catch::Contains("NUL"));
  CHECK(get_json(c, "/v1/graphs/nul").status == 404);

  // A start body with a duplicate key starts nothing.
  REQUIRE(post_json(c, "/v1/graphs", sleeper("s", 10)).status == 201);
  a = request(c, "POST", "/v1/graphs/s/executions", R"({"inputs": {}, "inputs": {}})");
  check_error(a, 400, "invalid_json");
  auto list = get_json(c, "/v1/executions");
  REQUIRE(list.status == 200);
  CHECK(list.body["items"].empty());
}

// -- quotas ---------------------------------------------------------------------------------

TEST_CASE("per-user quotas answer 409 quota_exceeded naming the quota and its limit",
          "[integration][server][strict]") {
  server_process::options o;
  o.config = {{"quotas", {{"live_executions", 2}, {"graphs", 2}}}};
  server_process srv{o};
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);

  // Graphs: two names; a new version of one is no new graph.
  REQUIRE(post_json(alice, "/v1/graphs", sleeper("one")).status == 201);
  REQUIRE(post_json(alice, "/v1/graphs", sleeper("two")).status == 201);
  auto a = post_json(alice, "/v1/graphs", sleeper("three"));
  check_error(a, 409, "quota_exceeded");
  CHECK_THAT(a.body["error"].value("message", ""),
             Catch::Contains("quotas.graphs") && Catch::Contains("(2)"));
  CHECK(get_json(alice, "/v1/graphs/three").status == 404);
  CHECK(post_json(alice, "/v1/graphs", sleeper("two", 5)).status == 201);
  CHECK(post_json(bob, "/v1/graphs", sleeper("three")).status == 201);

  // Live executions: two at once.
  auto first = post_json(alice, "/v1/graphs/one/executions");
  REQUIRE(first.status == 201);
  REQUIRE(post_json(alice, "/v1/graphs/one/executions").status == 201);
  a = post_json(alice, "/v1/graphs/one/executions");
  check_error(a, 409, "quota_exceeded");
  CHECK_THAT(a.body["error"].value("message", ""),
             Catch::Contains("quotas.live_executions") && Catch::Contains("(2)"));
  auto listed = get_json(alice, "/v1/executions");
  REQUIRE(listed.status == 200);
  CHECK(listed.body["items"].size() == 2);
  // Another user is not counted against alice.
  CHECK(post_json(bob, "/v1/graphs/three/executions").status == 201);
  // Once one has stopped, alice may start again.
  auto id = first.body["id"].get<std::string>();
  auto stop = post_json(alice, "/v1/executions/" + id + "/stop", {{"mode", "force"}, {"wait", 20}});
  REQUIRE(stop.status == 200);
  CHECK(post_json(alice, "/v1/graphs/one/executions").status == 201);
  // A resume counts too: alice is at two live again.
  a = post_json(alice, "/v1/executions/" + id + "/resume");
  check_error(a, 409, "quota_exceeded");
}

TEST_CASE("a bad quota in the config stops serve with exit 2 and the key's path",
          "[integration][cli][strict]") {
  temp_dir home;
  temp_dir files;
  auto cfg = files.write("config.json", R"({"users": {"a": {"token": "x"}},
                                            "quotas": {"live_executions": -1, "graph": 3}})");
  auto r = run_canopy(home.path, {"serve", "--config", cfg}, 30s);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/quotas/live_executions: expected an integer >= 0"));
  CHECK_THAT(r.err, Catch::Contains("/quotas/graph: unknown key 'graph'"));
}
