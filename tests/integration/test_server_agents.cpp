// Acceptance tests of the agent routes of `canopy serve` (runtime/docs/reference/http.md
// rule 21): a real server subprocess on a temp home, real HTTP on 127.0.0.1.
// Agent graphs are inline in the request bodies. Runs are kept alive by
// `run` steps that wait for a gate file the test creates; every wait is a
// poll of a status, a file or a process with a deadline, never a fixed sleep.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
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

namespace {

/// An agent graph of one `fn echo` step: the reply is
/// `{"text": PREFIX + message, "history": the history it was given}`.
json echo_agent_graph(const std::string& prefix) {
  return {{"name", "echoer"},
          {"inputs", {"message", "history"}},
          {"steps",
           {{"say",
             {{"fn", "echo"},
              {"with", {{"text", prefix + "${inputs.message}"}, {"history", "${inputs.history}"}}}}}}},
          {"outputs", {{"reply", "${steps.say}"}}}};
}

/// An agent graph of one `run` step that writes its pid to `pid_file`, then
/// waits (bounded, about a minute) for the file `gate` and replies
/// `{"got": message}`. With `ignore_int` the step ignores SIGINT, so a
/// graceful stop leaves the run `stopping` until the gate opens.
json gated_agent_graph(const std::string& pid_file, const std::string& gate,
                       bool ignore_int = false) {
  std::string script = std::string{ignore_int ? "trap '' INT; " : ""}
                       + "echo $$ > \"$PID_FILE.tmp\" && mv \"$PID_FILE.tmp\" \"$PID_FILE\"; "
                         "i=0; while [ ! -e \"$GATE\" ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; "
                         "sleep 0.02; done; printf '{\"got\": %s}' \"$MSG\"";
  return {{"inputs", {"message"}},
          {"steps",
           {{"wait",
             {{"run", {"sh", "-c", script}},
              {"env", {{"PID_FILE", pid_file}, {"GATE", gate}, {"MSG", "${inputs.message}"}}},
              {"grace", {{"interrupt", ignore_int ? "60s" : "2s"}, {"terminate", "1s"}}}}}}},
          {"outputs", {{"reply", "${steps.wait.json}"}}}};
}

/// Creates (or replaces) an agent; @returns the answer after checking its
/// status.
json create_agent(httplib::Client& c, const json& body, int status = 201) {
  auto a = post_json(c, "/v1/agents", body);
  INFO("POST /v1/agents " << body.value("name", "") << ": " << a.status << " " << a.text);
  REQUIRE(a.status == status);
  REQUIRE(a.body.is_object());
  return a.body;
}

/// Posts a message on a thread of its own (the call blocks until the run
/// ends).
std::future<http_answer> message_async(const server_process& srv, const std::string& token,
                                       const std::string& agent, json message) {
  return std::async(std::launch::async, [&srv, token, agent, message] {
    auto c = srv.client(token);
    return post_json(c, "/v1/agents/" + agent + "/messages", {{"message", message}});
  });
}

/// Polls `GET /v1/agents/{name}` until `pred(doc)` holds or 30 s pass.
/// @returns the last document read.
json wait_agent(httplib::Client& c, const std::string& name,
                const std::function<bool(const json&)>& pred) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  json last;
  for (;;) {
    auto a = get_json(c, "/v1/agents/" + name);
    if (a.status == 200) {
      last = a.body;
      if (pred(last))
        return last;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return last;
    std::this_thread::sleep_for(10ms);
  }
}

/// Waits for the run step to write its pid file; @returns the pid.
long wait_pid(const std::string& pid_file) {
  REQUIRE(eventually([&] { return !read_file(pid_file).empty(); }));
  return std::stol(read_file(pid_file));
}

/// The one live run of agent `name` (waits for it).
std::string live_run(httplib::Client& c, const std::string& name) {
  auto doc = wait_agent(c, name, [](const json& d) { return d["runs"].size() == 1; });
  INFO("agent: " << doc.dump());
  REQUIRE(doc["runs"].size() == 1);
  return doc["runs"][0].get<std::string>();
}

/// Event types of `GET /v1/executions/{id}/events`.
std::vector<std::string> event_types(httplib::Client& c, const std::string& id) {
  auto a = get_json(c, "/v1/executions/" + id + "/events");
  REQUIRE(a.status == 200);
  std::vector<std::string> out;
  for (auto& e : a.body["items"])
    out.push_back(e["type"].get<std::string>());
  return out;
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

/// Names of `GET /v1/agents`.
std::vector<std::string> agent_names(httplib::Client& c) {
  auto a = get_json(c, "/v1/agents");
  REQUIRE(a.status == 200);
  REQUIRE(a.body["next"].is_null());
  std::vector<std::string> out;
  for (auto& item : a.body["items"])
    out.push_back(item["name"].get<std::string>());
  return out;
}

} // namespace

// -- lifecycle ----------------------------------------------------------------------------

TEST_CASE("an agent created, replaced and messaged over HTTP replies, keeps its history "
          "across a restart, and its runs are ordinary executions",
          "[integration][server][agents]") {
  std::optional<server_process> srv{std::in_place};
  auto home = srv->home();
  auto c = srv->client(alice_token);

  CHECK(agent_names(c).empty());
  auto created = create_agent(c, {{"name", "helper"}, {"graph", echo_agent_graph("v1: ")}});
  CHECK(created["name"] == "helper");
  CHECK(created["graph"] == "echoer");
  CHECK(created["on_busy"] == "cancel_previous");
  CHECK_NOTHROW(ms_of(created["created_at"]));

  // The same name again replaces the graph and the policy: 200.
  auto replaced = create_agent(
    c, {{"name", "helper"}, {"graph", echo_agent_graph("v2: ")}, {"on_busy", "queue"}}, 200);
  CHECK(replaced["name"] == "helper");
  CHECK(replaced["on_busy"] == "queue");
  CHECK(replaced["created_at"] == created["created_at"]);
  CHECK(ms_of(replaced["updated_at"]) >= ms_of(created["updated_at"]));
  CHECK(agent_names(c) == std::vector<std::string>{"helper"});

  auto first = post_json(c, "/v1/agents/helper/messages", {{"message", "hello"}});
  INFO("message: " << first.text);
  REQUIRE(first.status == 200);
  CHECK(first.body["status"] == "completed");
  CHECK(first.body["reply"] == json{{"text", "v2: hello"}, {"history", json::array()}});
  REQUIRE(first.body["execution_id"].is_string());
  auto run1 = first.body["execution_id"].get<std::string>();

  auto got = get_json(c, "/v1/agents/helper");
  REQUIRE(got.status == 200);
  CHECK(got.body["name"] == "helper");
  CHECK(got.body["on_busy"] == "queue");
  CHECK(got.body["runs"] == json::array());
  auto& history = got.body["history"];
  REQUIRE(history.size() == 2);
  CHECK(history[0]["role"] == "user");
  CHECK(history[0]["content"] == "hello");
  CHECK(history[0]["execution_id"] == run1);
  CHECK_NOTHROW(ms_of(history[0]["time"]));
  CHECK(history[1]["role"] == "agent");
  CHECK(history[1]["content"] == first.body["reply"]);
  CHECK(history[1]["execution_id"] == run1);
  CHECK_NOTHROW(ms_of(history[1]["time"]));

  // The run is an ordinary root execution of the agent's graph.
  auto run = get_json(c, "/v1/executions/" + run1);
  REQUIRE(run.status == 200);
  CHECK(run.body["graph"] == "echoer");
  CHECK(run.body["agent"] == "helper");
  CHECK(run.body["status"] == "completed");
  CHECK(run.body["root_id"] == run1);
  CHECK(run.body["outputs"]["reply"] == first.body["reply"]);
  auto listed = get_json(c, "/v1/executions");
  REQUIRE(listed.status == 200);
  CHECK(std::any_of(listed.body["items"].begin(), listed.body["items"].end(),
                    [&](const json& e) { return e["id"] == run1; }));
  auto types = event_types(c, run1);
  CHECK(contains(types, "agent.message"));
  CHECK(contains(types, "agent.reply"));

  // The second run is given the history so far.
  auto second = post_json(c, "/v1/agents/helper/messages", {{"message", {{"n", 2}}}});
  REQUIRE(second.status == 200);
  CHECK(second.body["reply"]["text"] == "v2: {\"n\":2}");
  CHECK(second.body["reply"]["history"] == history);
  CHECK(second.body["execution_id"] != run1);

  // The metrics count committed events through the server's subscription,
  // which may run a moment after the reply was answered.
  std::string metrics_text;
  CHECK(eventually([&] {
    metrics_text = request(c, "GET", "/metrics").text;
    return metrics_text.find("canopy_agent_events_total{type=\"agent.reply\"} 2")
           != std::string::npos;
  }));
  CHECK(metrics_text.find("canopy_agent_events_total{type=\"agent.message\"} 2")
        != std::string::npos);

  // Restart on the same home: the agent and its history are still there.
  CHECK(srv->terminate() == 0);
  server_process again{[&] {
    server_process::options o;
    o.home = home;
    return o;
  }()};
  auto c2 = again.client(alice_token);
  auto after = get_json(c2, "/v1/agents/helper");
  REQUIRE(after.status == 200);
  CHECK(after.body["on_busy"] == "queue");
  REQUIRE(after.body["history"].size() == 4);
  CHECK(json::array({after.body["history"][0], after.body["history"][1]}) == history);
  CHECK(after.body["history"][2]["content"] == json{{"n", 2}});
  CHECK(after.body["history"][3]["role"] == "agent");
  auto third = post_json(c2, "/v1/agents/helper/messages", {{"message", "back"}});
  REQUIRE(third.status == 200);
  CHECK(third.body["reply"]["text"] == "v2: back");
  CHECK(third.body["reply"]["history"].size() == 4);
  CHECK(get_json(c2, "/v1/agents/helper").body["history"].size() == 6);
}

TEST_CASE("an agent can run a registered graph of its owner, named by id",
          "[integration][server][agents]") {
  server_process srv;
  auto c = srv.client(alice_token);
  auto g = echo_agent_graph("reg: ");
  g["name"] = "talker";
  auto reg = post_json(c, "/v1/graphs", g);
  REQUIRE(reg.status == 201);
  auto created = create_agent(c, {{"name", "byid"}, {"graph", "talker"}, {"on_busy", "reject"}});
  CHECK(created["graph"] == "talker");
  CHECK(created["on_busy"] == "reject");
  auto a = post_json(c, "/v1/agents/byid/messages", {{"message", "x"}});
  REQUIRE(a.status == 200);
  CHECK(a.body["reply"]["text"] == "reg: x");
  // Bob has no graph "talker".
  auto bob = srv.client(bob_token);
  check_error(post_json(bob, "/v1/agents", {{"name", "byid"}, {"graph", "talker"}}), 400,
              "invalid_graph", "/graph");
  CHECK(agent_names(bob).empty());
}

// -- bad input ----------------------------------------------------------------------------

TEST_CASE("bad agent bodies answer 4xx with a code and a JSON path and store nothing",
          "[integration][server][agents]") {
  // Inline commands are off on this server.
  server_process srv;
  auto c = srv.client(alice_token);
  auto good = echo_agent_graph("ok: ");
  auto keeper = create_agent(c, {{"name", "keeper"}, {"graph", good}, {"on_busy", "reject"}});
  auto plain = json{{"name", "plain"}, {"steps", {{"a", {{"fn", "noop"}}}}}};
  REQUIRE(post_json(c, "/v1/graphs", plain).status == 201);

  auto with_step = [&](json step) {
    auto g = good;
    g["steps"]["say"] = std::move(step);
    return g;
  };
  auto no_reply = good;
  no_reply["outputs"] = {{"answer", "${steps.say.text}"}};
  auto extra_input = good;
  extra_input["inputs"] = {"message", "history", "topic"};
  auto no_message = good;
  no_message["inputs"] = {"history"};
  no_message["steps"]["say"]["with"]["text"] = "fixed";

  struct bad_case {
    std::string what;
    std::string body;
    int status;
    std::string code;
    std::string path;
  };
  auto body = [](const json& j) { return j.dump(); };
  std::vector<bad_case> cases = {
    {"malformed JSON", "{\"name\": ", 400, "invalid_json", ""},
    {"not an object", "[1, 2]", 400, "bad_request", ""},
    {"unknown key", body({{"name", "keeper"}, {"graph", good}, {"colour", "red"}}), 400,
     "unknown_key", "/colour"},
    {"no name", body({{"graph", good}}), 400, "bad_request", "/name"},
    {"name not a string", body({{"name", 7}, {"graph", good}}), 400, "bad_request", "/name"},
    {"bad name", body({{"name", "no spaces"}, {"graph", good}}), 400, "bad_request", "/name"},
    {"empty name", body({{"name", ""}, {"graph", good}}), 400, "bad_request", "/name"},
    {"no graph", body({{"name", "keeper"}}), 400, "bad_request", "/graph"},
    {"graph not a document", body({{"name", "keeper"}, {"graph", 42}}), 400, "bad_request",
     "/graph"},
    {"unknown registered graph", body({{"name", "keeper"}, {"graph", "nope"}}), 400,
     "invalid_graph", "/graph"},
    {"registered graph that is no agent graph", body({{"name", "keeper"}, {"graph", "plain"}}),
     400, "invalid_graph", "/graph"},
    {"bad on_busy", body({{"name", "keeper"}, {"graph", good}, {"on_busy", "sometimes"}}), 400,
     "bad_request", "/on_busy"},
    {"on_busy not a string", body({{"name", "keeper"}, {"graph", good}, {"on_busy", 1}}), 400,
     "bad_request", "/on_busy"},
    {"node not a string", body({{"name", "keeper"}, {"graph", good}, {"node", 3}}), 400,
     "bad_request", "/node"},
    {"bad node name", body({{"name", "keeper"}, {"graph", good}, {"node", "gpu 1"}}), 400,
     "bad_request", "/node"},
    {"unknown step key",
     body({{"name", "keeper"}, {"graph", with_step({{"fn", "echo"}, {"colour", 1}})}}), 400,
     "invalid_graph", "/graph/steps/say/colour"},
    {"unknown function", body({{"name", "keeper"}, {"graph", with_step({{"fn", "nothing"}})}}),
     400, "invalid_graph", "/graph/steps/say/fn"},
    {"inline command refused",
     body({{"name", "keeper"}, {"graph", with_step({{"run", {"echo", "hi"}}})}}), 400,
     "inline_commands_disabled", "/graph/steps/say/run"},
    {"no reply output", body({{"name", "keeper"}, {"graph", no_reply}}), 400, "invalid_graph",
     "/graph/outputs/reply"},
    {"undeclared input", body({{"name", "keeper"}, {"graph", extra_input}}), 400,
     "invalid_graph", "/graph/inputs/2"},
    {"no message input", body({{"name", "keeper"}, {"graph", no_message}}), 400,
     "invalid_graph", "/graph/inputs"},
    {"new agent with a bad graph", body({{"name", "fresh"}, {"graph", no_reply}}), 400,
     "invalid_graph", "/graph/outputs/reply"},
  };
  for (auto& k : cases) {
    INFO("case: " << k.what);
    check_error(request(c, "POST", "/v1/agents", k.body), k.status, k.code, k.path);
  }

  // Messages and cancels.
  check_error(request(c, "POST", "/v1/agents/keeper/messages", "{\"message\": "), 400,
              "invalid_json", "");
  check_error(post_json(c, "/v1/agents/keeper/messages", json::object()), 400, "bad_request",
              "/message");
  check_error(post_json(c, "/v1/agents/keeper/messages", {{"message", "hi"}, {"to", "x"}}), 400,
              "unknown_key", "/to");
  check_error(post_json(c, "/v1/agents/keeper/messages", json::array()), 400, "bad_request", "");
  check_error(post_json(c, "/v1/agents/keeper/cancel", {{"mode", "force"}}), 400, "unknown_key",
              "/mode");
  check_error(post_json(c, "/v1/agents/nobody/messages", {{"message", "hi"}}), 404, "not_found",
              "");
  check_error(post_json(c, "/v1/agents/nobody/cancel"), 404, "not_found", "");
  check_error(get_json(c, "/v1/agents/nobody"), 404, "not_found", "");
  check_error(get_json(c, "/v1/agents/bad%20name"), 404, "not_found", "");
  // Wrong methods on known routes.
  check_error(request(c, "DELETE", "/v1/agents/keeper"), 405, "method_not_allowed", "");
  check_error(request(c, "GET", "/v1/agents/keeper/messages"), 405, "method_not_allowed", "");
  check_error(request(c, "PUT", "/v1/agents"), 405, "method_not_allowed", "");

  // Nothing was stored: the listing and the agent are unchanged, and no run
  // started.
  auto list = get_json(c, "/v1/agents");
  REQUIRE(list.status == 200);
  CHECK(list.body["items"] == json::array({keeper}));
  auto now = get_json(c, "/v1/agents/keeper");
  REQUIRE(now.status == 200);
  CHECK(now.body["on_busy"] == "reject");
  CHECK(now.body["updated_at"] == keeper["updated_at"]);
  CHECK(now.body["history"] == json::array());
  auto runs = get_json(c, "/v1/executions?all=true");
  REQUIRE(runs.status == 200);
  CHECK(runs.body["items"] == json::array());
  // The agent still works with the graph it had.
  auto a = post_json(c, "/v1/agents/keeper/messages", {{"message", "still"}});
  REQUIRE(a.status == 200);
  CHECK(a.body["reply"]["text"] == "ok: still");
}

// -- authentication and ownership ------------------------------------------------------------

TEST_CASE("another user's agent answers 404 on every agent route, exactly like a missing one",
          "[integration][server][agents]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  auto anon = srv.client();
  create_agent(alice, {{"name", "secret"}, {"graph", echo_agent_graph("a: ")}});
  auto hello = post_json(alice, "/v1/agents/secret/messages", {{"message", "hi"}});
  REQUIRE(hello.status == 200);

  for (auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
         {"GET", "/v1/agents"},
         {"POST", "/v1/agents"},
         {"GET", "/v1/agents/secret"},
         {"POST", "/v1/agents/secret/messages"},
         {"POST", "/v1/agents/secret/cancel"}}) {
    INFO(method << " " << path);
    check_error(request(anon, method, path, "{}"), 401, "unauthorized", "");
  }

  auto missing = get_json(bob, "/v1/agents/missing");
  auto secret = get_json(bob, "/v1/agents/secret");
  check_error(secret, 404, "not_found", "");
  // Same answer as for an agent that does not exist, but for the name.
  CHECK(secret.body["error"]["message"].get<std::string>().find("secret") != std::string::npos);
  CHECK(missing.status == 404);
  CHECK(missing.body["error"]["code"] == secret.body["error"]["code"]);
  check_error(post_json(bob, "/v1/agents/secret/messages", {{"message", "steal"}}), 404,
              "not_found", "");
  // Ownership is checked before the body: a bad body answers 404 too.
  check_error(post_json(bob, "/v1/agents/secret/messages", {{"bogus", 1}}), 404, "not_found", "");
  check_error(post_json(bob, "/v1/agents/secret/cancel"), 404, "not_found", "");
  CHECK(agent_names(bob).empty());
  // The run is not Bob's either.
  check_error(get_json(bob, "/v1/executions/" + hello.body["execution_id"].get<std::string>()),
              404, "not_found", "");

  // Names are per owner: Bob's "secret" is a new agent of his own.
  create_agent(bob, {{"name", "secret"}, {"graph", echo_agent_graph("b: ")}}, 201);
  auto bobs = post_json(bob, "/v1/agents/secret/messages", {{"message", "mine"}});
  REQUIRE(bobs.status == 200);
  CHECK(bobs.body["reply"]["text"] == "b: mine");
  CHECK(bobs.body["reply"]["history"] == json::array());

  // Alice's agent is untouched.
  auto mine = get_json(alice, "/v1/agents/secret");
  REQUIRE(mine.status == 200);
  REQUIRE(mine.body["history"].size() == 2);
  CHECK(mine.body["history"][0]["content"] == "hi");
  CHECK(agent_names(alice) == std::vector<std::string>{"secret"});
}

// -- busy policies and cancel -------------------------------------------------------------------

TEST_CASE("an agent with the reject policy answers 409 busy while a run is live and "
          "nothing of the refused message is stored",
          "[integration][server][agents]") {
  server_process srv{inline_server()};
  auto c = srv.client(alice_token);
  auto pid_file = srv.dir() + "/pid";
  auto gate = srv.dir() + "/gate";
  create_agent(c, {{"name", "strict"},
                   {"graph", gated_agent_graph(pid_file, gate)},
                   {"on_busy", "reject"}});

  auto first = message_async(srv, alice_token, "strict", "\"one\"");
  auto run = live_run(c, "strict");
  wait_pid(pid_file);

  auto refused = post_json(c, "/v1/agents/strict/messages", {{"message", "\"two\""}});
  check_error(refused, 409, "busy", "");
  CHECK(get_json(c, "/v1/agents/strict").body["runs"] == json::array({run}));

  touch(gate);
  auto answer = first.get();
  INFO("first: " << answer.text);
  REQUIRE(answer.status == 200);
  CHECK(answer.body["status"] == "completed");
  CHECK(answer.body["execution_id"] == run);
  CHECK(answer.body["reply"] == json{{"got", "one"}});
  auto doc = wait_agent(c, "strict", [](const json& d) { return d["runs"].empty(); });
  CHECK(doc["runs"] == json::array());
  REQUIRE(doc["history"].size() == 2);
  CHECK(doc["history"][0]["content"] == "\"one\"");
  // Only the one run exists.
  auto all = get_json(c, "/v1/executions?all=true");
  REQUIRE(all.status == 200);
  REQUIRE(all.body["items"].size() == 1);
  CHECK(all.body["items"][0]["id"] == run);
  // Free again: the next message runs.
  auto next = post_json(c, "/v1/agents/strict/messages", {{"message", "\"three\""}});
  REQUIRE(next.status == 200);
  CHECK(next.body["reply"] == json{{"got", "three"}});
}

TEST_CASE("cancelling an agent during a long run stops it and kills its process, and cancelling "
          "an idle agent answers no_execution",
          "[integration][server][agents]") {
  server_process srv{inline_server()};
  auto c = srv.client(alice_token);
  auto pid_file = srv.dir() + "/pid";
  auto gate = srv.dir() + "/gate";
  create_agent(c, {{"name", "worker"}, {"graph", gated_agent_graph(pid_file, gate)}});

  auto idle = post_json(c, "/v1/agents/worker/cancel");
  REQUIRE(idle.status == 200);
  CHECK(idle.body == json{{"result", "no_execution"}});

  auto pending = message_async(srv, alice_token, "worker", "\"long\"");
  auto run = live_run(c, "worker");
  auto pid = wait_pid(pid_file);
  REQUIRE(!process_gone(pid));

  auto cancel = request(c, "POST", "/v1/agents/worker/cancel", "{}");
  INFO("cancel: " << cancel.text);
  REQUIRE(cancel.status == 200);
  CHECK(cancel.body == json{{"result", "cancelled"}});
  // cancel waits for the run to settle: its process is gone.
  CHECK(eventually([&] { return process_gone(pid); }, 5s));
  CHECK(::kill(static_cast<pid_t>(pid), 0) != 0);

  auto answer = pending.get();
  INFO("message: " << answer.text);
  REQUIRE(answer.status == 200);
  CHECK(answer.body["status"] == "stopped");
  CHECK(answer.body["reason"] == "requested");
  CHECK(answer.body["execution_id"] == run);
  CHECK(answer.body["reply"].is_null());

  auto doc = get_json(c, "/v1/executions/" + run);
  REQUIRE(doc.status == 200);
  CHECK(doc.body["status"] == "stopped");
  CHECK(doc.body["steps"]["wait"]["status"] == "pending");
  CHECK(contains(event_types(c, run), "agent.cancelled"));
  auto ag = get_json(c, "/v1/agents/worker");
  CHECK(ag.body["runs"] == json::array());
  CHECK(ag.body["history"] == json::array());

  auto again = post_json(c, "/v1/agents/worker/cancel", json::object());
  REQUIRE(again.status == 200);
  CHECK(again.body == json{{"result", "no_execution"}});
}

TEST_CASE("under cancel_previous a newer message stops the live run, and a message "
          "superseded before its run started answers 409 cancelled",
          "[integration][server][agents]") {
  server_process srv{inline_server()};
  auto c = srv.client(alice_token);
  auto pid_file = srv.dir() + "/pid";
  auto gate = srv.dir() + "/gate";
  // The step ignores SIGINT: a cancelled run stays `stopping` until the gate
  // opens, so later messages wait behind it.
  create_agent(c, {{"name", "latest"}, {"graph", gated_agent_graph(pid_file, gate, true)}});

  auto m1 = message_async(srv, alice_token, "latest", "1");
  auto run1 = live_run(c, "latest");
  wait_pid(pid_file);

  // m2 cancels run 1 (which keeps stopping) and waits for its turn.
  auto m2 = message_async(srv, alice_token, "latest", "2");
  auto stopping = wait_status(c, run1, "stopping");
  REQUIRE(stopping["status"] == "stopping");

  // m3 supersedes m2 before its run started.
  auto m3 = message_async(srv, alice_token, "latest", "3");
  auto a2 = m2.get();
  check_error(a2, 409, "cancelled", "");

  touch(gate);
  auto a1 = m1.get();
  INFO("m1: " << a1.text);
  REQUIRE(a1.status == 200);
  CHECK(a1.body["status"] == "stopped");
  CHECK(a1.body["execution_id"] == run1);
  CHECK(a1.body["reply"].is_null());
  auto a3 = m3.get();
  INFO("m3: " << a3.text);
  REQUIRE(a3.status == 200);
  CHECK(a3.body["status"] == "completed");
  CHECK(a3.body["reply"] == json{{"got", 3}});

  // Two runs: the stopped one and the one that answered; the history holds
  // only the answered message.
  auto all = get_json(c, "/v1/executions?all=true");
  REQUIRE(all.status == 200);
  CHECK(all.body["items"].size() == 2);
  auto doc = wait_agent(c, "latest", [](const json& d) { return d["runs"].empty(); });
  REQUIRE(doc["history"].size() == 2);
  CHECK(doc["history"][0]["content"] == "3");
  CHECK(contains(event_types(c, run1), "agent.cancelled"));
}

// -- shutdown -----------------------------------------------------------------------------------

TEST_CASE("a server shutting down while a message waits for its run answers it at once, "
          "stops the run with reason shutdown and exits cleanly",
          "[integration][server][agents]") {
  std::optional<server_process> srv{std::in_place, inline_server()};
  auto home = srv->home();
  auto c = srv->client(alice_token);
  auto pid_file = srv->dir() + "/pid";
  auto gate = srv->dir() + "/gate";
  create_agent(c, {{"name", "slow"}, {"graph", gated_agent_graph(pid_file, gate)}});
  auto pending = message_async(*srv, alice_token, "slow", "\"wait\"");
  auto run = live_run(c, "slow");
  auto pid = wait_pid(pid_file);

  auto started = std::chrono::steady_clock::now();
  CHECK(srv->terminate(30s) == 0);
  // Before the gate loop's own end (about a minute).
  CHECK(std::chrono::steady_clock::now() - started < 30s);
  auto answer = pending.get();
  INFO("message: " << answer.status << " " << answer.text);
  CHECK(answer.status == 503);
  CHECK(eventually([&] { return process_gone(pid); }, 5s));

  server_process again{inline_server(home)};
  auto c2 = again.client(alice_token);
  auto doc = get_json(c2, "/v1/executions/" + run);
  REQUIRE(doc.status == 200);
  CHECK(doc.body["status"] == "stopped");
  CHECK(doc.body["reason"] == "shutdown");
  auto ag = get_json(c2, "/v1/agents/slow");
  REQUIRE(ag.status == 200);
  CHECK(ag.body["runs"] == json::array());
  // The agent takes messages again after the restart.
  touch(gate);
  auto next = post_json(c2, "/v1/agents/slow/messages", {{"message", "\"go\""}});
  REQUIRE(next.status == 200);
  CHECK(next.body["reply"] == json{{"got", "go"}});
}
