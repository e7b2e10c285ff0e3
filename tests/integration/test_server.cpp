// Acceptance tests of `canopy serve` (SPEC §3-§8, §12, §13 rules 17-20): a
// real server subprocess on a temp home, real HTTP on 127.0.0.1. Every wait
// is an event wait with a deadline: the listening line, an SSE event, an
// execution status read back through the API, a process exit. Executions
// are kept alive by steps that wait for a gate file the test creates, or by
// long `fn` sleeps that a stop ends at once.

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

using namespace canopy::test;
using namespace std::chrono_literals;

namespace {

/// A server that accepts inline `run` steps.
server_process::options inline_server(const std::string& home = {}) {
  server_process::options o;
  o.config = {{"allow_inline_commands", true}};
  o.home = home;
  return o;
}

/// A `run` step that waits until the file `gate` exists, then prints
/// `{"passed": true}`. Grace periods are short so a stop never escalates
/// slowly.
json gate_step(const std::string& gate, json needs = json::array()) {
  // Bounded (about a minute) so a failed test never leaves it behind.
  json s = {{"run", {"sh", "-c",
                     "i=0; while [ ! -e \"$GATE\" ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; "
                     "sleep 0.02; done; echo '{\"passed\": true}'"}},
            {"env", {{"GATE", gate}}},
            {"grace", {{"interrupt", "2s"}, {"terminate", "1s"}}}};
  if (!needs.empty())
    s["needs"] = needs;
  return s;
}

/// hello (fn echo) → gate (waits for the file) → tail (fn echo).
json gated_graph(const std::string& name, const std::string& gate) {
  return {{"name", name},
          {"inputs", {"who"}},
          {"steps",
           {{"hello", {{"fn", "echo"}, {"with", {{"greeting", "hi ${inputs.who}"}}}}},
            {"gate", gate_step(gate, {"hello"})},
            {"tail",
             {{"fn", "echo"}, {"with", {{"after", "${steps.gate.json.passed}"}}},
              {"needs", {"gate"}}}}}},
          {"outputs", {{"greeting", "${steps.hello.greeting}"}, {"passed", "${steps.tail.after}"}}}};
}

/// One step that sleeps `ms` (a stop ends it at once).
json sleeper_graph(const std::string& name, int ms) {
  return {{"name", name}, {"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", ms}}}}}}}};
}

/// Registers `doc`; @returns its version.
int register_graph(httplib::Client& c, const json& doc) {
  auto a = post_json(c, "/v1/graphs", doc);
  INFO("POST /v1/graphs: " << a.status << " " << a.text);
  REQUIRE(a.status == 201);
  REQUIRE(a.body["id"] == doc["name"]);
  return a.body["version"].get<int>();
}

/// Starts an execution of graph `name`; @returns its document.
json start(httplib::Client& c, const std::string& name, const json& inputs = json::object()) {
  auto a = post_json(c, "/v1/graphs/" + name + "/executions", {{"inputs", inputs}});
  INFO("start " << name << ": " << a.status << " " << a.text);
  REQUIRE(a.status == 201);
  REQUIRE(a.body["id"].is_string());
  return a.body;
}

bool step_is(const json& doc, const std::string& step, const std::string& status) {
  return doc.is_object() && doc["steps"].is_object() && doc["steps"].contains(step)
         && doc["steps"][step]["status"] == status;
}

/// Checks the SPEC §7 error body of `a`: status, code (when given), a
/// message, and the JSON path (when given).
void check_error(const http_answer& a, int status, const std::string& code = {},
                 std::optional<std::string> path = std::nullopt) {
  INFO("answer: " << a.status << " " << a.text);
  CHECK(a.status == status);
  bool shaped = a.body.is_object() && a.body.contains("error") && a.body["error"].is_object();
  CHECK(shaped);
  if (!shaped)
    return;
  auto& e = a.body["error"];
  CHECK(e["code"].is_string());
  CHECK(!e.value("code", "").empty());
  CHECK(e["message"].is_string());
  CHECK(!e.value("message", "").empty());
  CHECK(e["path"].is_string());
  if (!code.empty())
    CHECK(e.value("code", "") == code);
  if (path)
    CHECK(e.value("path", "?") == *path);
}

/// Checks the SSE framing of `s`: `id:` is the event's seq, `event:` its
/// type, seqs strictly increasing. @returns the seqs.
std::vector<uint64_t> check_stream(const sse_stream& s) {
  std::vector<uint64_t> seqs;
  for (auto& e : s.events) {
    auto d = e.json_data();
    INFO("event " << e.event << " data " << e.data);
    REQUIRE(d.is_object());
    REQUIRE(e.id.has_value());
    CHECK(d["seq"] == *e.id);
    CHECK(d["type"] == e.event);
    if (!seqs.empty())
      CHECK(*e.id > seqs.back());
    seqs.push_back(*e.id);
  }
  return seqs;
}

bool has_event(const sse_stream& s, const std::string& type, const std::string& step = {}) {
  return std::any_of(s.events.begin(), s.events.end(), [&](const sse_event& e) {
    return e.event == type && (step.empty() || e.json_data().value("step", "") == step);
  });
}

/// Ids of the user's executions (`GET /v1/executions`, every page).
std::set<std::string> listed_ids(httplib::Client& c) {
  std::set<std::string> out;
  std::string cursor;
  for (int page = 0; page < 100; ++page) {
    auto a = get_json(c, "/v1/executions?limit=1000" + (cursor.empty() ? "" : "&cursor=" + cursor));
    REQUIRE(a.status == 200);
    for (auto& item : a.body["items"])
      out.insert(item["id"].get<std::string>());
    if (a.body["next"].is_null())
      return out;
    cursor = a.body["next"].get<std::string>();
  }
  FAIL("listing never ended");
  return out;
}

/// `canopy --home HOME show ID --json` from another process.
json show(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  INFO("show stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

/// Prometheus samples: `name{labels}` → value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos)
      continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

double sample(const std::map<std::string, double>& m, const std::string& key) {
  auto i = m.find(key);
  INFO("metric " << key);
  REQUIRE(i != m.end());
  return i->second;
}

} // namespace

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
                       "Basic dGE6", "ta", "bearer ta"}) {
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
    CHECK(srv.terminate(30s) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
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

} // namespace

TEST_CASE("after SIGKILL a server restarted with --resume-interrupted completes the "
          "execution without re-running its completed steps",
          "[integration][server]") {
  temp_dir home;
  auto store = home.path + "/store";
  auto id = crash_mid_run(store, home.path);
  touch(home.path + "/gate"); // also ends the step the crash orphaned
  server_process srv{resuming_server(store)};
  auto c = srv.client(alice_token);
  check_completed_once(c, id, home.path);
  auto events = get_json(c, "/v1/executions/" + id + "/events");
  REQUIRE(events.status == 200);
  size_t resumed = 0;
  for (auto& e : events.body["items"])
    resumed += e["type"] == "execution.resumed" ? 1 : 0;
  CHECK(resumed == 1);
  CHECK(srv.terminate(30s) == 0);
}

TEST_CASE("after SIGKILL a restarted server marks the execution stopped/interrupted, and a "
          "later restart with --resume-interrupted still completes it",
          "[integration][server]") {
  temp_dir home;
  auto store = home.path + "/store";
  auto id = crash_mid_run(store, home.path);
  {
    // Without --resume-interrupted it stays stopped.
    server_process srv{inline_server(store)};
    auto c = srv.client(alice_token);
    auto got = get_json(c, "/v1/executions/" + id);
    REQUIRE(got.status == 200);
    CHECK(got.body["status"] == "stopped");
    CHECK(got.body["reason"] == "interrupted");
    CHECK(step_is(got.body, "one", "completed"));
    CHECK(step_is(got.body, "two", "pending"));
    CHECK(step_is(got.body, "three", "pending"));
    CHECK(srv.terminate(30s) == 0);
  }
  // The shutdown did not touch it.
  auto still = show(store, id);
  CHECK(still["status"] == "stopped");
  CHECK(still["reason"] == "interrupted");
  CHECK(line_count(home.path + "/two.count") == 1);

  touch(home.path + "/gate");
  server_process srv{resuming_server(store)};
  auto c = srv.client(alice_token);
  check_completed_once(c, id, home.path);
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

  auto after = request(anon, "GET", "/metrics");
  REQUIRE(after.status == 200);
  auto m1 = samples(after.text);
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
  CHECK(took < 10s);
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
