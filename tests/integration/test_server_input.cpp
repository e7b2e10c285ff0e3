// Acceptance tests of `canopy serve` (runtime/docs/reference/statuses.md-runtime/docs/reference/events.md): a
// real server subprocess on a temp home, real HTTP on 127.0.0.1. Every wait
// is an event wait with a deadline: the listening line, an SSE event, an
// execution status read back through the API, a process exit. Executions
// are kept alive by steps that wait for a gate file the test creates, or by
// long `fn` sleeps that a stop ends at once.
//
// This file: bad requests and what a posted graph may reach.

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

// -- bad input ---------------------------------------------------------------------------------

namespace {

struct bad_request_case {
  std::string what;
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::string code;                ///< empty: any
  std::optional<std::string> json_path;
  httplib::Headers headers = {};
  std::string content_type = "application/json";
};

std::string graph_text(const json& steps, const json& extra = json::object()) {
  json g = {{"name", "x"}, {"steps", steps}};
  g.update(extra);
  return g.dump();
}

} // namespace

TEST_CASE("bad requests answer 4xx with the error body and leave no state behind",
          "[integration][server]") {
  server_process::options o;
  o.config = {{"allow_inline_commands", false}, {"max_request_bytes", 32768}};
  server_process srv{o};
  auto c = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  register_graph(c, {{"name", "ok"},
                     {"inputs", {"topic"}},
                     {"steps", {{"a", {{"fn", "echo"}, {"with", {{"t", "${inputs.topic}"}}}}}}}});
  register_graph(c, sleeper_graph("hold", 600000));
  auto run_id = start(c, "hold")["id"].get<std::string>();
  REQUIRE(wait_status(c, run_id, "running")["status"] == "running");

  auto before_alice = listed_ids(c);
  auto before_bob = listed_ids(bob);
  auto ls_before = run_canopy(srv.home(), {"ls", "--json", "--all"});
  REQUIRE(ls_before.exit_code == 0);

  const std::string noop = R"({"fn": "noop"})";
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  const std::string bad_utf8 = "{\"name\": \"x\xff\xfe\", \"steps\": {\"a\": {\"fn\": \"noop\"}}}";
  const std::string e = "/v1/executions/" + run_id;
  std::vector<bad_request_case> cases = {
    // graphs: JSON
    {"malformed JSON", "POST", "/v1/graphs", R"({"name": "x", "steps": )", 400, "invalid_json", ""},
    {"empty body", "POST", "/v1/graphs", "", 400, "invalid_json", ""},
    {"a graph that is an array", "POST", "/v1/graphs", "[1, 2]", 400, "", ""},
    {"a graph that is a string", "POST", "/v1/graphs", "\"x\"", 400, "", ""},
    {"invalid UTF-8 bytes", "POST", "/v1/graphs", bad_utf8, 400, "invalid_json", ""},
    {"JSON nested 10000 deep", "POST", "/v1/graphs",
     R"({"name": "deep", "steps": {"a": {"fn": "echo", "with": {"v": )" + deep + "}}}}", 400,
     "invalid_json", ""},
    {"a body over max_request_bytes", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "echo"}, {"with", {{"pad", std::string(40000, 'p')}}}}}}), 413,
     "too_large", ""},
    // graphs: the name
    {"a graph without name", "POST", "/v1/graphs", R"({"steps": {"a": {"fn": "noop"}}})", 400,
     "invalid_graph", "/name"},
    {"a numeric name", "POST", "/v1/graphs", R"({"name": 5, "steps": {"a": {"fn": "noop"}}})",
     400, "invalid_graph", "/name"},
    {"a name with a slash", "POST", "/v1/graphs",
     R"({"name": "a/b", "steps": {"a": {"fn": "noop"}}})", 400, "invalid_graph", "/name"},
    {"a name of 129 characters", "POST", "/v1/graphs",
     json{{"name", std::string(129, 'n')}, {"steps", {{"a", {{"fn", "noop"}}}}}}.dump(), 400,
     "invalid_graph", "/name"},
    // graphs: unknown keys at each level
    {"an unknown top-level key", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}}}}, {{"bogus", 1}}), 400, "invalid_graph", "/bogus"},
    {"an unknown limits key", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}}}}, {{"limits", {{"bogus", 1}}}}), 400, "invalid_graph",
     "/limits/bogus"},
    {"an unknown step key", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"bogus", 1}}}}), 400, "invalid_graph", "/steps/a/bogus"},
    {"an unknown grace key", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"grace", {{"bogus", "1s"}}}}}}), 400, "invalid_graph",
     "/steps/a/grace/bogus"},
    // graphs: structure
    {"an unknown step kind", "POST", "/v1/graphs", graph_text({{"a", {{"fnn", "noop"}}}}), 400,
     "invalid_graph", "/steps/a/fnn"},
    {"a step with two kinds", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"tool", "t"}}}}), 400, "invalid_graph", "/steps/a"},
    {"no steps", "POST", "/v1/graphs", graph_text(json::object()), 400, "invalid_graph",
     "/steps"},
    {"steps as an array", "POST", "/v1/graphs", graph_text(json::array()), 400, "invalid_graph",
     "/steps"},
    {"a dependency cycle", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"needs", {"b"}}}}, {"b", {{"fn", "noop"}, {"needs", {"a"}}}}}),
     400, "invalid_graph", "/steps/a/needs"},
    {"needs naming an unknown step", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"needs", {"zz"}}}}}), 400, "invalid_graph",
     "/steps/a/needs/0"},
    {"needs that is not an array", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"needs", "zz"}}}}), 400, "invalid_graph",
     "/steps/a/needs"},
    {"a bad timeout duration", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"timeout", "5 parsecs"}}}}), 400, "invalid_graph",
     "/steps/a/timeout"},
    {"a bad grace duration", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"grace", {{"interrupt", "-1s"}}}}}}), 400,
     "invalid_graph", "/steps/a/grace/interrupt"},
    {"a bad deadline", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}}}}, {{"limits", {{"deadline", "soon"}}}}), 400,
     "invalid_graph", "/limits/deadline"},
    {"negative retries", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}, {"retries", -1}}}}), 400, "invalid_graph",
     "/steps/a/retries"},
    {"a reference to an unknown input", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "echo"}, {"with", {{"m", "${inputs.q}"}}}}}}), 400,
     "invalid_graph", "/steps/a/with/m"},
    {"a reference to a step that is not upstream", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "echo"}, {"with", {{"m", "${steps.b.x}"}}}}}, {"b", {{"fn", "noop"}}}}),
     400, "invalid_graph", "/steps/a/with/m"},
    {"an output naming an unknown step", "POST", "/v1/graphs",
     graph_text({{"a", {{"fn", "noop"}}}}, {{"outputs", {{"o", "${steps.zz.x}"}}}}), 400,
     "invalid_graph", "/outputs/o"},
    {"an unknown fn", "POST", "/v1/graphs", graph_text({{"a", {{"fn", "nosuchfn"}}}}), 400,
     "invalid_graph", "/steps/a/fn"},
    {"an unknown tool", "POST", "/v1/graphs", graph_text({{"a", {{"tool", "nosuchtool"}}}}), 400,
     "invalid_graph", "/steps/a/tool"},
    {"a run step while inline commands are disabled", "POST", "/v1/graphs",
     graph_text({{"a", {{"run", {"true"}}}}}), 400, "inline_commands_disabled", "/steps/a/run"},
    // starting
    {"start: malformed JSON", "POST", "/v1/graphs/ok/executions", "{\"inputs\": {", 400,
     "invalid_json", ""},
    {"start: a body that is an array", "POST", "/v1/graphs/ok/executions", "[]", 400, "", ""},
    {"start: an unknown key", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": {"topic": "t"}, "bogus": 1})", 400, "", "/bogus"},
    {"start: inputs that are not an object", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": ["t"]})", 400, "", "/inputs"},
    {"start: a missing input", "POST", "/v1/graphs/ok/executions", R"({"inputs": {}})", 400,
     "invalid_input", "/inputs/topic"},
    {"start: no inputs at all", "POST", "/v1/graphs/ok/executions", "{}", 400, "invalid_input",
     "/inputs/topic"},
    {"start: an undeclared input", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": {"topic": "t", "extra": 1}})", 400, "invalid_input", "/inputs/extra"},
    {"start: version 0", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": {"topic": "t"}, "version": 0})", 400, "", "/version"},
    {"start: a version that is a string", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": {"topic": "t"}, "version": "1"})", 400, "", "/version"},
    {"start: a version that does not exist", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": {"topic": "t"}, "version": 99})", 404, "not_found", ""},
    {"start: an unknown graph", "POST", "/v1/graphs/nosuch/executions",
     R"({"inputs": {"topic": "t"}})", 404, "not_found", ""},
    {"start: inputs nested 10000 deep", "POST", "/v1/graphs/ok/executions",
     R"({"inputs": {"topic": )" + deep + "}}", 400, "invalid_json", ""},
    {"start: invalid UTF-8 bytes", "POST", "/v1/graphs/ok/executions",
     "{\"inputs\": {\"topic\": \"\xc3\x28\"}}", 400, "invalid_json", ""},
    // stopping and resuming
    {"stop: an unknown mode", "POST", e + "/stop", R"({"mode": "gentle"})", 400, "", "/mode"},
    {"stop: a numeric mode", "POST", e + "/stop", R"({"mode": 1})", 400, "", "/mode"},
    {"stop: a negative wait", "POST", e + "/stop", R"({"wait": -1})", 400, "", "/wait"},
    {"stop: a wait over 3600", "POST", e + "/stop", R"({"wait": 3601})", 400, "", "/wait"},
    {"stop: a wait that is a string", "POST", e + "/stop", R"({"wait": "5"})", 400, "", "/wait"},
    {"stop: an unknown key", "POST", e + "/stop", R"({"mode": "force", "now": true})", 400, "",
     "/now"},
    {"stop: malformed JSON", "POST", e + "/stop", R"({"mode": )", 400, "invalid_json", ""},
    {"stop: an unknown execution", "POST", "/v1/executions/0000000000000000000000000z/stop",
     R"({"mode": "force"})", 404, "not_found", ""},
    {"resume: a running execution", "POST", e + "/resume", "", 409, "wrong_state", ""},
    {"resume: a negative budget", "POST", e + "/resume", R"({"budget": -1})", 400, "",
     "/budget"},
    {"resume: a budget that is a string", "POST", e + "/resume", R"({"budget": "lots"})", 400,
     "", "/budget"},
    {"resume: an unknown key", "POST", e + "/resume", R"({"budgets": 1})", 400, "", "/budgets"},
    {"graph stop: an unknown mode", "POST", "/v1/graphs/hold/stop", R"({"mode": "now"})", 400,
     "", "/mode"},
    {"graph stop: an unknown graph", "POST", "/v1/graphs/nosuch/stop", "{}", 404, "not_found", ""},
    // query parameters and headers
    {"list: an unknown status", "GET", "/v1/executions?status=sleeping", "", 400, "", ""},
    {"list: limit 0", "GET", "/v1/executions?limit=0", "", 400, "", ""},
    {"list: limit over 1000", "GET", "/v1/executions?limit=1001", "", 400, "", ""},
    {"list: a limit that is not a number", "GET", "/v1/executions?limit=ten", "", 400, "", ""},
    {"list: a bad cursor", "GET", "/v1/executions?cursor=..%2F..", "", 400, "", ""},
    {"events: a negative after", "GET", e + "/events?after=-1", "", 400, "", ""},
    {"events: after that is not a number", "GET", e + "/events?after=x", "", 400, "", ""},
    {"events: limit 0", "GET", e + "/events?limit=0", "", 400, "", ""},
    {"events: limit over 1000", "GET", e + "/events?limit=1001", "", 400, "", ""},
    {"events: a cursor that is not a seq", "GET", e + "/events?cursor=..%2F..", "", 400, "", ""},
    {"events: a bad Last-Event-ID", "GET", e + "/events", "", 400, "", "",
     {{"Accept", "text/event-stream"}, {"Last-Event-ID", "abc"}}},
    {"graph: version 0", "GET", "/v1/graphs/ok?version=0", "", 400, "", ""},
    // routes and methods
    {"an unknown route", "GET", "/v1/nope", "", 404, "not_found", ""},
    {"an unknown dashboard file", "GET", "/ui/nope.js", "", 404, "not_found", ""},
    {"a dashboard path with a folder", "GET", "/ui/a/b.js", "", 404, "not_found", ""},
    {"an unknown sub-resource", "GET", e + "/bogus", "", 404, "not_found", ""},
    {"an unknown execution", "GET", "/v1/executions/0000000000000000000000000z", "", 404,
     "not_found", ""},
    {"an execution id with capitals", "GET", "/v1/executions/ABC", "", 404, "not_found", ""},
    {"an unknown graph", "GET", "/v1/graphs/nosuch", "", 404, "not_found", ""},
    {"DELETE a live execution", "DELETE", e, "", 409, "wrong_state", ""},
    {"DELETE an execution's events", "DELETE", e + "/events", "", 405, "", ""},
    {"PUT a graph", "PUT", "/v1/graphs", "{}", 405, "", ""},
    {"DELETE the graph collection", "DELETE", "/v1/graphs", "", 405, "", ""},
    {"GET the graph collection with a bad limit", "GET", "/v1/graphs?limit=x", "", 400, "", ""},
    {"POST /healthz", "POST", "/healthz", "", 405, "", ""},
    {"GET a stop", "GET", e + "/stop", "", 405, "", ""},
    {"PATCH an execution", "PATCH", e, "{}", 405, "", ""},
  };
  REQUIRE(cases.size() >= 30);
  for (auto& k : cases) {
    INFO(k.what << ": " << k.method << " " << k.path);
    auto a = request(c, k.method, k.path, k.body, k.content_type, k.headers);
    check_error(a, k.status, k.code, k.json_path);
  }

  // The server still answers, and nothing new is in the store.
  auto health = get_json(c, "/healthz");
  CHECK(health.status == 200);
  CHECK(srv.running());
  CHECK(listed_ids(c) == before_alice);
  CHECK(listed_ids(bob) == before_bob);
  auto ls_after = run_canopy(srv.home(), {"ls", "--json", "--all"});
  REQUIRE(ls_after.exit_code == 0);
  CHECK(ls_after.out_json().size() == ls_before.out_json().size());
  CHECK(ls_after.out_json().size() == 1);
  for (auto& name : {"x", "deep", "nosuch", "a/b"})
    CHECK(get_json(c, std::string{"/v1/graphs/"} + name).status == 404);
  CHECK(get_json(c, "/v1/graphs/ok").body["version"] == 1);
  auto held = get_json(c, e);
  CHECK(held.body["status"] == "running");
  CHECK(held.body["steps"]["nap"]["attempt"] == 1);
  auto stop = post_json(c, e + "/stop", {{"mode", "force"}, {"wait", 20}});
  CHECK(stop.status == 200);
  CHECK(stop.body["stop"]["result"] == "stopped");
}

TEST_CASE("a graph body over 8 KiB is read whole up to max_request_bytes as JSON or text, and "
          "a form-encoded one gets a 413 that says what to send",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  // A valid graph of about 12 KiB.
  json doc = {{"name", "padded"},
              {"steps", {{"a", {{"fn", "echo"}, {"with", {{"pad", std::string(12000, 'p')}}}}}}}};
  for (auto& type : {"application/json", "text/plain"}) {
    INFO("Content-Type: " << type);
    auto a = request(c, "POST", "/v1/graphs", doc.dump(), type);
    INFO(a.text);
    CHECK(a.status == 201);
  }
  // cpp-httplib caps form-encoded bodies at 8 KiB before any handler runs.
  auto form = request(c, "POST", "/v1/graphs", doc.dump(), "application/x-www-form-urlencoded");
  INFO(form.text);
  check_error(form, 413, "too_large", "");
  CHECK(form.body["error"]["message"].get<std::string>().find("application/json")
        != std::string::npos);
}

TEST_CASE("a graph posted over HTTP cannot read files from the server's filesystem",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  // A valid graph file, and a JSON file with a secret, both on the server's
  // disk but never posted.
  auto inner = srv.dir() + "/inner.json";
  std::ofstream{inner} << R"({"steps": {"z": {"fn": "echo", "with": {"v": "from-disk"}}},
                              "outputs": {"v": "${steps.z.v}"}})";
  auto secret = srv.dir() + "/secret.json";
  std::ofstream{secret} << R"({"secret_key_4711": "hunter2"})";
  for (auto& path : {inner, std::string{"../server.json"}, secret}) {
    INFO("graph step path " << path);
    auto a = post_json(c, "/v1/graphs",
                       {{"name", "include"},
                        {"steps", {{"c", {{"graph", path}}}}},
                        {"outputs", {{"v", "${steps.c.v}"}}}});
    check_error(a, 400, "", "/steps/c/graph");
    CHECK(a.text.find("secret_key_4711") == std::string::npos);
    CHECK(a.text.find("hunter2") == std::string::npos);
    CHECK(a.text.find("users") == std::string::npos);
  }
  CHECK(get_json(c, "/v1/graphs/include").status == 404);
}

TEST_CASE("a graph step naming a registered graph runs the owner's graph as a child",
          "[integration][server]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  register_graph(alice, {{"name", "inner"},
                         {"inputs", {"x"}},
                         {"steps", {{"s", {{"fn", "echo"}, {"with", {{"v", "alice ${inputs.x}"}}}}}}},
                         {"outputs", {{"v", "${steps.s.v}"}}}});
  json outer = {{"name", "outer"},
                {"steps", {{"c", {{"graph", "inner"}, {"with", {{"x", "one"}}}}}}},
                {"outputs", {{"v", "${steps.c.v}"}}}};
  register_graph(alice, outer);
  auto id = start(alice, "outer")["id"].get<std::string>();
  auto done = wait_until(alice, id, [](const json& d) {
    return d["status"] == "completed" || d["status"] == "failed";
  });
  INFO(done.dump());
  CHECK(done["status"] == "completed");
  CHECK(done["outputs"] == json{{"v", "alice one"}});

  // Bob's graph of the same shape cannot reach Alice's "inner".
  register_graph(bob, outer);
  auto b = start(bob, "outer")["id"].get<std::string>();
  auto bdone = wait_until(bob, b, [](const json& d) {
    return d["status"] == "completed" || d["status"] == "failed";
  });
  CHECK(bdone["status"] == "failed");
  CHECK(bdone["outputs"].is_null());
}
