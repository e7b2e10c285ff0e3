// Steps placed across a cluster: a real `canopy serve --cluster` supervisor and real `canopy
// worker --join` processes on loopback run `tool` steps; a stop crosses to
// the workers; a SIGKILLed worker's step returns to `pending`/`node_lost`
// and runs on the other worker; a SIGKILLed supervisor's worker kills its
// steps, and the supervisor restarted with `--resume-interrupted` completes
// the execution. The membership tests are in test_cluster.cpp.
//
// Every wait is an event wait with a deadline (an output line, a file, an
// HTTP document polled until it shows the change), never a fixed sleep. The
// supervisors run with heartbeat 500ms and timeout 2s; the workers use their
// defaults (heartbeat 1s, timeout 5s).

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

const std::string cluster_secret = "placement-secret";

/// The supervisors' cluster timeout.
constexpr auto cluster_timeout = 2s;

/// A worker's timeout (its default).
constexpr auto worker_timeout = 5s;

/// Slack over a timeout for a loaded test machine.
constexpr auto slack = 3s;

/// A supervisor with no tools of its own (every `tool` step must go to a
/// worker), the cluster secret, heartbeat 500ms and timeout 2s, on
/// `cluster` and `home` (a fresh one when empty), with extra `args`.
server_process::options supervisor_options(const std::string& home = {},
                                           const std::string& cluster = "127.0.0.1:0",
                                           std::vector<std::string> args = {}) {
  server_process::options o;
  o.config = {{"cluster", {{"secret", cluster_secret}, {"heartbeat", "500ms"}, {"timeout", "2s"}}}};
  o.args = {"--cluster", cluster};
  o.args.insert(o.args.end(), args.begin(), args.end());
  o.home = home;
  return o;
}

std::string join_arg(int port) {
  return "127.0.0.1:" + std::to_string(port);
}

/// `GET /v1/nodes`; the items (an empty array when the answer is not a
/// listing).
json nodes_of(const server_process& s) {
  auto c = s.client(alice_token);
  auto a = get_json(c, "/v1/nodes");
  if (a.status != 200 || !a.body.is_object() || !a.body.contains("items"))
    return json::array();
  return a.body["items"];
}

/// True when no member of `s` has a step running (every slot went back).
bool slots_free(const server_process& s) {
  for (auto& n : nodes_of(s))
    if (n.value("running", -1) != 0)
      return false;
  return true;
}

/// True when the listing of `s` names every node of `names`.
bool lists_all(const server_process& s, const std::vector<std::string>& names) {
  auto items = nodes_of(s);
  for (auto& name : names)
    if (std::none_of(items.begin(), items.end(),
                     [&](const json& n) { return n.value("name", "") == name; }))
      return false;
  return true;
}

/// The complete lines of the file `path` (none when it does not exist).
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  auto text = read_file(path);
  std::string line;
  for (char c : text) {
    if (c == '\n') {
      out.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  return out;
}

/// Waits until the file `path` has at least `n` complete lines (30 s at
/// most). @returns its lines.
std::vector<std::string> wait_lines(const std::string& path, size_t n,
                                    std::chrono::milliseconds timeout = 30s) {
  std::vector<std::string> lines;
  eventually([&] { return (lines = lines_of(path)).size() >= n; }, timeout);
  return lines;
}

/// The pid written (as the first word of a line) to `pid_file`, once it is
/// there; 0 when it did not come within 30 s.
long pid_in(const std::string& pid_file) {
  auto lines = wait_lines(pid_file, 1);
  return lines.empty() ? 0 : std::atol(lines[0].c_str());
}

/// True when the step process `pid` and its whole group are gone.
bool step_dead(long pid) {
  return process_gone(pid) && !group_alive(pid);
}

/// Kills what is left of the process group `pgid` (test cleanup).
void kill_group(long pgid) {
  if (pgid > 1)
    ::kill(static_cast<pid_t>(-pgid), SIGKILL);
}

/// Writes a worker's tools file `file` in `dir` with `tools` and the
/// cluster secret. @returns its path.
std::string tools_file(const temp_dir& dir, const std::string& file, const json& tools) {
  return dir.write(file, json{{"tools", tools}, {"cluster", {{"secret", cluster_secret}}}}.dump(2));
}

/// A tool running `script` with `sh -c` (and the given extra argv items as
/// `$1`, ...).
json sh_tool(const std::string& script, const std::vector<std::string>& args = {}) {
  json argv = {"sh", "-c", script, "tool"};
  for (auto& a : args)
    argv.push_back(a);
  return {{"argv", argv}};
}

/// A worker named `name` joined to `port` with the tools file `tools`; its
/// environment has NODE_TAG=NAME, which only its steps see.
std::unique_ptr<worker_process> start_worker(int port, const std::string& name,
                                             const std::string& tools) {
  return std::make_unique<worker_process>(
    std::vector<std::string>{"--join", join_arg(port), "--name", name, "--slots", "4",
                             "--tools", tools},
    std::map<std::string, std::string>{{"NODE_TAG", name}});
}

/// Registers `graph` on `sup` as alice and starts it without inputs (or
/// with `inputs`). @returns the execution id.
std::string start_graph(const server_process& sup, const json& graph,
                        const json& inputs = json::object()) {
  auto c = sup.client(alice_token);
  auto g = post_json(c, "/v1/graphs", graph);
  INFO("POST /v1/graphs: " << g.status << " " << g.text);
  REQUIRE(g.status == 201);
  auto e = post_json(c, "/v1/graphs/" + graph["name"].get<std::string>() + "/executions",
                     {{"inputs", inputs}});
  INFO("POST executions: " << e.status << " " << e.text);
  REQUIRE(e.status == 201);
  auto id = e.body.value("id", "");
  REQUIRE(!id.empty());
  return id;
}

/// `GET /v1/executions/{id}` (null when it could not be read).
json execution_of(const server_process& sup, const std::string& id) {
  auto c = sup.client(alice_token);
  auto a = get_json(c, "/v1/executions/" + id);
  return a.status == 200 ? a.body : json(nullptr);
}

/// The event log of execution `id` (`GET /v1/executions/{id}/events`).
json events_of(const server_process& sup, const std::string& id) {
  auto c = sup.client(alice_token);
  auto a = get_json(c, "/v1/executions/" + id + "/events");
  if (a.status != 200 || !a.body.is_object() || !a.body.contains("items"))
    return json::array();
  return a.body["items"];
}

/// The events of `type` for step `step` (with `reason`, when given).
std::vector<json> events_named(const json& events, const std::string& type,
                               const std::string& step, const std::string& reason = {}) {
  std::vector<json> out;
  for (auto& e : events)
    if (e.value("type", "") == type && e.value("step", "") == step
        && (reason.empty() || (e.contains("reason") && e["reason"] == reason)))
      out.push_back(e);
  return out;
}

/// A step's `node` in `doc` ("" when absent).
std::string node_of(const json& doc, const std::string& step) {
  if (!doc.is_object() || !doc.contains("steps") || !doc["steps"].contains(step))
    return {};
  auto& s = doc["steps"][step];
  return s.contains("node") && s["node"].is_string() ? s["node"].get<std::string>() : "";
}

} // namespace

TEST_CASE("an execution whose tools exist only on two workers completes with each step on the "
          "worker that holds its tool",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  temp_dir dir;
  // `shout` exists on w1 only, `measure` on w2 only. Each prints the
  // NODE_TAG of the worker whose environment it ran in and the argument its
  // argv template took from `${with.text}`.
  auto w1 = start_worker(port, "w1",
                         tools_file(dir, "w1.json",
                                    {{"shout", sh_tool("printf '{\"node\":\"%s\",\"text\":\"%s\"}' "
                                                       "\"$NODE_TAG\" \"$(printf %s \"$1\" | tr a-z A-Z)\"",
                                                       {"${with.text}"})}}));
  auto w2 = start_worker(port, "w2",
                         tools_file(dir, "w2.json",
                                    {{"measure", sh_tool("printf '{\"node\":\"%s\",\"seen\":\"%s\",\"len\":%s}' "
                                                         "\"$NODE_TAG\" \"$1\" \"$(printf %s \"$1\" | wc -c | tr -d ' ')\"",
                                                         {"${with.text}"})}}));
  INFO("w1 stderr: " << w1->err() << "\nw2 stderr: " << w2->err());
  REQUIRE(w1->wait_joined(port, "w1"));
  REQUIRE(w2->wait_joined(port, "w2"));
  REQUIRE(eventually([&] { return lists_all(sup, {"supervisor", "w1", "w2"}); }, 10s));
  // The supervisor itself has no tools.
  auto nodes = nodes_of(sup);
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[0]["name"] == "supervisor");
  CHECK(nodes[0]["tools"] == json::array());

  // The tools only the workers announce validate on the supervisor.
  auto id = start_graph(
    sup,
    {{"name", "spread"},
     {"inputs", {"word"}},
     {"steps",
      {{"a", {{"tool", "shout"}, {"with", {{"text", "${inputs.word}"}}}}},
       {"b", {{"tool", "measure"}, {"with", {{"text", "${steps.a.json.text}"}}}, {"needs", {"a"}}}}}},
     {"outputs", {{"upper", "${steps.a.json.text}"}, {"len", "${steps.b.json.len}"}}}},
    {{"word", "hello"}});
  auto c = sup.client(alice_token);
  auto doc = wait_status(c, id, "completed", 60s);
  INFO("execution: " << doc.dump(2));
  REQUIRE(doc["status"] == "completed");
  CHECK(doc["outputs"] == json{{"upper", "HELLO"}, {"len", 5}});
  auto& a = doc["steps"]["a"];
  auto& b = doc["steps"]["b"];
  CHECK(a["status"] == "completed");
  CHECK(b["status"] == "completed");
  // The record names the node, and the step really ran in that worker's
  // process (its environment).
  CHECK(a["node"] == "w1");
  CHECK(b["node"] == "w2");
  CHECK(a["result"]["json"] == json{{"node", "w1"}, {"text", "HELLO"}});
  CHECK(b["result"]["json"] == json{{"node", "w2"}, {"seen", "HELLO"}, {"len", 5}});
  CHECK(a["attempt"] == 1);
  CHECK(b["attempt"] == 1);
  // A pid on another host is never recorded.
  CHECK(!a.contains("pid"));
  CHECK(!b.contains("pid"));
  // Every slot went back.
  CHECK(eventually([&] { return slots_free(sup); }, 10s));
}

TEST_CASE("a stop on the root ends the subprocesses on both workers through the signal "
          "escalation before it answers with the snapshot",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  temp_dir dir;
  const auto& d = dir.path;
  // w1: `mark` finishes at once; `hold` writes its pid and sleeps (SIGINT
  // ends it). w2: `stubborn` logs and survives SIGINT and SIGTERM (its
  // `sleep` children die of them), so only the SIGKILL after its short
  // grace periods ends it.
  auto w1 = start_worker(port, "w1",
                         tools_file(dir, "w1.json",
                                    {{"mark", sh_tool("echo marked; echo x >> " + d + "/mark.log")},
                                     {"hold", sh_tool("echo $$ > " + d + "/\"$1\".pid; exec sleep 120",
                                                      {"${with.tag}"})}}));
  json stubborn = sh_tool("trap 'echo INT >> " + d + "/sig.log' INT; trap 'echo TERM >> " + d
                          + "/sig.log' TERM; echo $$ > " + d
                          + "/\"$1\".pid; while :; do sleep 0.05; done",
                          {"${with.tag}"});
  // The terminate grace leaves a loaded machine time to run the TERM trap.
  stubborn["grace"] = {{"interrupt", "500ms"},
                       {"terminate", std::to_string(1500 * slow_build) + "ms"}};
  auto w2 = start_worker(port, "w2", tools_file(dir, "w2.json", {{"stubborn", stubborn}}));
  INFO("w1 stderr: " << w1->err() << "\nw2 stderr: " << w2->err());
  REQUIRE(w1->wait_joined(port, "w1"));
  REQUIRE(w2->wait_joined(port, "w2"));
  REQUIRE(eventually([&] { return lists_all(sup, {"supervisor", "w1", "w2"}); }, 10s));

  auto id = start_graph(
    sup, {{"name", "halt"},
          {"steps",
           {{"first", {{"tool", "mark"}}},
            {"a1", {{"tool", "hold"}, {"with", {{"tag", "a1"}}}, {"needs", {"first"}}}},
            {"a2", {{"tool", "hold"}, {"with", {{"tag", "a2"}}}, {"needs", {"first"}}}},
            {"b", {{"tool", "stubborn"}, {"with", {{"tag", "b"}}}, {"needs", {"first"}}}}}}});
  std::map<std::string, long> pids;
  for (auto tag : {"a1", "a2", "b"}) {
    pids[tag] = pid_in(d + "/" + tag + ".pid");
    INFO("step " << tag);
    REQUIRE(pids[tag] > 0);
    // Each step runs in a process group of its own.
    CHECK(pgid_of(pids[tag]) == pids[tag]);
  }
  auto c = sup.client(alice_token);
  // All three are recorded running before the stop.
  auto before = wait_until(c, id, [](const json& doc) {
    for (auto s : {"a1", "a2", "b"})
      if (doc["steps"][s]["status"] != "running")
        return false;
    return true;
  });
  INFO("before the stop: " << before.dump(2));
  REQUIRE(before["status"] == "running");

  auto asked = std::chrono::steady_clock::now();
  auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"mode", "graceful"}, {"wait", 60}});
  auto took = std::chrono::steady_clock::now() - asked;
  // Every subprocess on both workers is dead when the answer arrives: the
  // snapshot waited for the remote downs.
  std::map<std::string, bool> dead;
  for (auto& kv : pids)
    dead[kv.first] = step_dead(kv.second);
  for (auto& kv : pids)
    kill_group(kv.second); // cleanup, should a check below fail
  INFO("stop: " << stop.status << " " << stop.text);
  REQUIRE(stop.status == 200);
  for (auto& kv : dead) {
    INFO("step " << kv.first << " (pid " << pids[kv.first] << ")");
    CHECK(kv.second);
  }
  // The stubborn step saw SIGINT, then SIGTERM, then died of SIGKILL.
  INFO("the stop took "
       << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  CHECK(read_file(d + "/sig.log") == "INT\nTERM\n");
  CHECK(took >= 2s); // both grace periods passed
  CHECK(stop.body["stop"]["result"] == "stopped");

  auto& answered = stop.body;
  auto doc = execution_of(sup, id);
  INFO("answered: " << answered.dump(2) << "\nstored: " << doc.dump(2));
  for (auto* snap : {&answered, &doc}) {
    auto& s = *snap;
    CHECK(s["status"] == "stopped");
    CHECK(s["reason"] == "requested");
    CHECK(s["outputs"].is_null());
    // The completed step is untouched.
    CHECK(s["steps"]["first"]["status"] == "completed");
    CHECK(s["steps"]["first"]["node"] == "w1");
    CHECK(s["steps"]["first"]["attempt"] == 1);
    CHECK(s["steps"]["first"]["result"]["stdout"] == "marked\n");
    CHECK(s["steps"]["first"]["reason"].is_null());
    // The running ones are back to pending, naming the node they ran on.
    for (auto step : {"a1", "a2", "b"}) {
      INFO("step " << step);
      CHECK(s["steps"][step]["status"] == "pending");
      CHECK(s["steps"][step]["reason"] == "requested");
      CHECK(s["steps"][step]["node"] == (std::string{step} == "b" ? "w2" : "w1"));
    }
  }
  CHECK(lines_of(d + "/mark.log").size() == 1);
  // The stop request was handled, and the slots went back.
  auto events = events_of(sup, id);
  CHECK(std::any_of(events.begin(), events.end(),
                    [](const json& e) { return e.value("type", "") == "stop.handled"; }));
  // The runners on the workers reported each signal as they sent it.
  auto signals = [&](const std::string& step) {
    std::vector<std::string> out;
    for (auto& e : events)
      if (e.value("type", "") == "step.signalled" && e.value("step", "") == step)
        out.push_back(e["data"]["signal"].get<std::string>() + ">"
                      + (e["data"]["next"].is_null() ? "-" : e["data"]["next"].get<std::string>())
                      + "@" + e["data"]["next_in_ms"].dump());
    return out;
  };
  CHECK(signals("b")
        == std::vector<std::string>{"SIGINT>SIGTERM@500",
                                    "SIGTERM>SIGKILL@" + std::to_string(1500 * slow_build),
                                    "SIGKILL>-@null"});
  CHECK(signals("a1") == std::vector<std::string>{"SIGINT>SIGTERM@10000"});
  CHECK(eventually([&] { return slots_free(sup); }, 10s));
  // The workers stay members.
  CHECK(w1->running());
  CHECK(w2->running());
}

TEST_CASE("a step of a SIGKILLed worker returns to pending with node_lost within the timeout, "
          "runs on the other worker, and no completed step runs twice",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  temp_dir dir;
  const auto& d = dir.path;
  // Both workers have both tools. `once` appends one line to a side-effect
  // log; `gate` appends "NODE PID" and waits for the gate file.
  json tools = {{"once", sh_tool("echo \"$NODE_TAG\" >> " + d + "/once.log")},
                {"gate", sh_tool("echo \"$$ $NODE_TAG\" >> " + d + "/gate.pids; while [ ! -f " + d
                                 + "/gate ]; do sleep 0.02; done; echo passed")}};
  auto tools_path = tools_file(dir, "tools.json", tools);
  std::map<std::string, std::unique_ptr<worker_process>> workers;
  workers["w1"] = start_worker(port, "w1", tools_path);
  workers["w2"] = start_worker(port, "w2", tools_path);
  INFO("w1 stderr: " << workers["w1"]->err() << "\nw2 stderr: " << workers["w2"]->err());
  REQUIRE(workers["w1"]->wait_joined(port, "w1"));
  REQUIRE(workers["w2"]->wait_joined(port, "w2"));
  REQUIRE(eventually([&] { return lists_all(sup, {"supervisor", "w1", "w2"}); }, 10s));

  auto id = start_graph(sup, {{"name", "failover"},
                              {"steps",
                               {{"once", {{"tool", "once"}}},
                                {"held", {{"tool", "gate"}, {"needs", {"once"}}}}}},
                              {"outputs", {{"said", "${steps.held.stdout}"}}}});
  auto first = wait_lines(d + "/gate.pids", 1);
  REQUIRE(first.size() == 1);
  long pid1 = std::atol(first[0].c_str());
  auto victim = first[0].substr(first[0].find(' ') + 1);
  REQUIRE((victim == "w1" || victim == "w2"));
  auto other = victim == "w1" ? "w2" : "w1";
  auto c = sup.client(alice_token);
  auto running = wait_until(c, id, [](const json& doc) {
    return doc["steps"]["held"]["status"] == "running";
  });
  REQUIRE(node_of(running, "held") == victim);
  CHECK(running["steps"]["once"]["status"] == "completed");
  // The step's process group is its own, not the worker's.
  long worker_pid = workers[victim]->pid();
  CHECK(pgid_of(pid1) == pid1);
  CHECK(pgid_of(pid1) != pgid_of(worker_pid));

  // SIGKILL the worker's whole process group (the worker alone).
  auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(workers[victim]->kill_group());
  json lost_events;
  bool lost = eventually(
    [&] {
      return !(lost_events = events_named(events_of(sup, id), "step.pending", "held", "node_lost"))
                .empty();
    },
    cluster_timeout + slack);
  auto took = std::chrono::steady_clock::now() - killed_at;
  INFO("events: " << events_of(sup, id).dump(2));
  REQUIRE(lost);
  CHECK(took <= cluster_timeout + slack);
  CHECK(lost_events[0]["status"] == "pending");

  // The step runs again, on the other worker.
  auto again = wait_lines(d + "/gate.pids", 2);
  REQUIRE(again.size() == 2);
  long pid2 = std::atol(again[1].c_str());
  CHECK(again[1].substr(again[1].find(' ') + 1) == other);
  CHECK(wait_until(c, id, [&](const json& doc) {
          return doc["steps"]["held"]["status"] == "running" && node_of(doc, "held") == other;
        })["steps"]["held"]["node"]
        == other);

  // No orphan on the SIGKILLed worker's host: its guardian killed the step's
  // group when the worker died (long before the gate opens).
  bool orphan_gone = eventually([&] { return step_dead(pid1); }, 5s);
  kill_group(pid1); // cleanup, should the check fail
  CHECK(orphan_gone);

  dir.write("gate", "");
  auto doc = wait_status(c, id, "completed", 60s);
  INFO("execution: " << doc.dump(2));
  REQUIRE(doc["status"] == "completed");
  CHECK(doc["outputs"] == json{{"said", "passed\n"}});
  CHECK(doc["steps"]["held"]["node"] == other);
  CHECK(doc["steps"]["held"]["attempt"].get<int>() >= 2);
  CHECK(doc["steps"]["once"]["attempt"] == 1);
  // The step that completed before the kill ran once.
  CHECK(lines_of(d + "/once.log").size() == 1);
  CHECK(lines_of(d + "/gate.pids").size() == 2);
  CHECK(eventually([&] { return step_dead(pid2); }, 5s));
  // The supervisor dropped the lost worker.
  CHECK(eventually([&] {
    auto items = nodes_of(sup);
    return std::none_of(items.begin(), items.end(),
                        [&](const json& n) { return n.value("name", "") == victim; });
  }, cluster_timeout + slack));
}

TEST_CASE("a worker kills its step when the supervisor is SIGKILLed, and the supervisor "
          "restarted with --resume-interrupted takes it back and completes the execution",
          "[integration][cluster]") {
  temp_dir dir;
  const auto& d = dir.path;
  // The home is the test's own: it outlives the first supervisor's object.
  auto home = d + "/home";
  auto first_sup = std::make_unique<server_process>(supervisor_options(home));
  int port = first_sup->cluster_port();
  INFO("first supervisor stdout: " << first_sup->out() << "\nlog: " << first_sup->log());
  REQUIRE(port > 0);
  json tools = {{"once", sh_tool("echo \"$NODE_TAG\" >> " + d + "/once.log")},
                {"gate", sh_tool("echo \"$$ $NODE_TAG\" >> " + d + "/gate.pids; while [ ! -f " + d
                                 + "/gate ]; do sleep 0.02; done; echo passed")}};
  auto w1 = start_worker(port, "w1", tools_file(dir, "tools.json", tools));
  INFO("w1 stdout: " << w1->out() << "\nw1 stderr: " << w1->err());
  REQUIRE(w1->wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return lists_all(*first_sup, {"supervisor", "w1"}); }, 10s));

  auto id = start_graph(*first_sup, {{"name", "survivor"},
                                     {"steps",
                                      {{"once", {{"tool", "once"}}},
                                       {"held", {{"tool", "gate"}, {"needs", {"once"}}}}}},
                                     {"outputs", {{"said", "${steps.held.stdout}"}}}});
  auto first = wait_lines(d + "/gate.pids", 1);
  REQUIRE(first.size() == 1);
  long pid1 = std::atol(first[0].c_str());
  CHECK(first[0].substr(first[0].find(' ') + 1) == "w1");
  {
    auto c = first_sup->client(alice_token);
    auto running = wait_until(c, id, [](const json& doc) {
      return doc["steps"]["held"]["status"] == "running";
    });
    REQUIRE(node_of(running, "held") == "w1");
  }

  // SIGKILL the supervisor: the worker kills the step within its timeout.
  auto killed_at = std::chrono::steady_clock::now();
  first_sup->kill();
  bool dead = eventually([&] { return step_dead(pid1); }, worker_timeout + slack);
  auto took = std::chrono::steady_clock::now() - killed_at;
  kill_group(pid1); // cleanup, should the check fail
  REQUIRE(dead);
  CHECK(took <= worker_timeout + slack);
  CHECK(w1->wait_for([](const std::string&, const std::string& err) {
    return err.find("event=lost") != std::string::npos;
  }, 5s));
  REQUIRE(w1->running());
  CHECK(lines_of(d + "/gate.pids").size() == 1);

  // The same home and cluster port, with --resume-interrupted: the worker
  // joins again and the interrupted step runs again there.
  first_sup.reset(); // the dead process's object (its config folder goes too)
  server_process second{supervisor_options(home, join_arg(port), {"--resume-interrupted"})};
  INFO("second supervisor stdout: " << second.out() << "\nlog: " << second.log());
  REQUIRE(second.cluster_port() == port);
  REQUIRE(w1->wait_joined(port, "w1", 2, 30s));
  auto again = wait_lines(d + "/gate.pids", 2);
  INFO("gate.pids: " << read_file(d + "/gate.pids"));
  INFO("then: second supervisor log: " << second.log() << "\nw1 stdout: " << w1->out()
                                       << "\nw1 stderr: " << w1->err() << "\nexecution: "
                                       << [&] {
                                            auto c = second.client(alice_token);
                                            auto a = get_json(c, "/v1/executions/" + id);
                                            return std::to_string(a.status) + " " + a.text;
                                          }()
                                       << "\nevents: "
                                       << events_of(second, id).dump(2));
  REQUIRE(again.size() == 2);
  long pid2 = std::atol(again[1].c_str());
  CHECK(again[1].substr(again[1].find(' ') + 1) == "w1");

  dir.write("gate", "");
  auto c = second.client(alice_token);
  auto doc = wait_status(c, id, "completed", 60s);
  INFO("execution: " << doc.dump(2) << "\nevents: " << events_of(second, id).dump(2));
  REQUIRE(doc["status"] == "completed");
  CHECK(doc["outputs"] == json{{"said", "passed\n"}});
  CHECK(doc["steps"]["held"]["node"] == "w1");
  CHECK(doc["steps"]["held"]["attempt"].get<int>() >= 2);
  CHECK(doc["steps"]["once"]["attempt"] == 1);
  CHECK(doc["steps"]["once"]["status"] == "completed");
  // The completed step did not run again; the interrupted one did, once.
  CHECK(lines_of(d + "/once.log").size() == 1);
  CHECK(lines_of(d + "/gate.pids").size() == 2);
  CHECK(eventually([&] { return step_dead(pid2); }, 5s));
  auto events = events_of(second, id);
  CHECK(std::any_of(events.begin(), events.end(), [](const json& e) {
    return e.value("type", "") == "execution.resumed";
  }));
}

TEST_CASE("an agent step on the supervisor messages an agent that lives on a worker, and "
          "stopping the sender stops the agent's run there",
          "[integration][cluster][agents]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  temp_dir dir;
  const auto& d = dir.path;
  // Both workers have the agent's tool, the supervisor has none: without
  // the agent's node, the step would go to w-a (equal load, first by name).
  json research = sh_tool("if [ \"$1\" = slow ]; then echo $$ > " + d
                            + "/slow.pid; exec sleep 120; fi; printf '%s from %s' \"$1\" "
                              "\"$NODE_TAG\"",
                          {"${with.q}"});
  auto wa = start_worker(port, "w-a", tools_file(dir, "wa.json", {{"research", research}}));
  auto wb = start_worker(port, "w-b", tools_file(dir, "wb.json", {{"research", research}}));
  INFO("w-a stderr: " << wa->err() << "\nw-b stderr: " << wb->err());
  REQUIRE(wa->wait_joined(port, "w-a"));
  REQUIRE(wb->wait_joined(port, "w-b"));
  REQUIRE(eventually([&] { return lists_all(sup, {"supervisor", "w-a", "w-b"}); }, 10s));

  auto c = sup.client(alice_token);
  json agent_graph = {{"name", "near-data"},
                      {"inputs", {"message", "history"}},
                      {"steps", {{"work", {{"tool", "research"}, {"with", {{"q", "${inputs.message}"}}}}}}},
                      {"outputs", {{"reply", "${steps.work.stdout}"}}}};
  auto made = post_json(c, "/v1/agents", {{"name", "near"}, {"graph", agent_graph}, {"node", "w-b"}});
  INFO("POST /v1/agents: " << made.status << " " << made.text);
  REQUIRE(made.status == 201);
  CHECK(made.body["node"] == "w-b");
  json sender = {{"name", "sender"},
                 {"inputs", {"q"}},
                 {"steps", {{"ask", {{"agent", "near"}, {"message", "${inputs.q}"}}}}},
                 {"outputs", {{"reply", "${steps.ask.reply}"}}}};

  // A message that completes: the agent's run ran its step on w-b.
  auto id = start_graph(sup, sender, {{"q", "hello"}});
  auto doc = wait_status(c, id, "completed", 60s);
  INFO("sender: " << doc.dump(2));
  REQUIRE(doc["status"] == "completed");
  CHECK(doc["outputs"]["reply"] == "hello from w-b");
  CHECK(node_of(doc, "ask") == "supervisor"); // the sender's step is on the supervisor
  auto run_id = doc["steps"]["ask"].value("child_id", "");
  REQUIRE(!run_id.empty());
  auto run = execution_of(sup, run_id);
  INFO("agent run: " << run.dump(2));
  CHECK(run["agent"] == "near");
  CHECK(run["node"] == "w-b");
  CHECK(run["parent_id"] == id);
  CHECK(node_of(run, "work") == "w-b");

  // A message whose run blocks on w-b; stopping the sender stops it there.
  auto id2 = start_graph(sup, sender, {{"q", "slow"}});
  long pid = pid_in(d + "/slow.pid");
  REQUIRE(pid > 0);
  auto running = wait_until(c, id2, [](const json& doc) {
    return doc["steps"]["ask"]["status"] == "running" && doc["steps"]["ask"].contains("child_id");
  });
  auto run2_id = running["steps"]["ask"].value("child_id", "");
  REQUIRE(!run2_id.empty());
  // The pid file can come before the supervisor has committed the step's start.
  auto run2_running = wait_until(c, run2_id, [](const json& doc) {
    return doc["steps"]["work"]["status"] == "running";
  });
  CHECK(node_of(run2_running, "work") == "w-b");
  auto stop = post_json(c, "/v1/executions/" + id2 + "/stop", {{"mode", "graceful"}, {"wait", 60}});
  bool dead = step_dead(pid);
  kill_group(pid); // cleanup, should the check fail
  INFO("stop: " << stop.status << " " << stop.text);
  REQUIRE(stop.status == 200);
  CHECK(stop.body["stop"]["result"] == "stopped");
  CHECK(dead); // the answer came after the remote down
  auto sender_doc = execution_of(sup, id2);
  CHECK(sender_doc["status"] == "stopped");
  CHECK(sender_doc["steps"]["ask"]["status"] == "pending");
  auto run2 = execution_of(sup, run2_id);
  INFO("stopped agent run: " << run2.dump(2));
  CHECK(run2["status"] == "stopped");
  CHECK(run2["reason"] == "parent_stopped");
  CHECK(run2["steps"]["work"]["status"] == "pending");
  CHECK(run2["steps"]["work"]["attempt"] == 1);
  // Both slots went back.
  CHECK(eventually([&] { return slots_free(sup); }, 10s));
}

TEST_CASE("a step its worker cannot start fails with the worker's reason instead of hanging",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  temp_dir dir;
  // The worker's template needs `with.x`, which the step does not give: only
  // the worker can tell (the supervisor does not know its templates).
  auto w1 = start_worker(port, "w1",
                         tools_file(dir, "w1.json", {{"needs_x", sh_tool("echo \"$1\"", {"${with.x}"})}}));
  INFO("w1 stderr: " << w1->err());
  REQUIRE(w1->wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return lists_all(sup, {"supervisor", "w1"}); }, 10s));
  auto id = start_graph(sup, {{"name", "unstartable"},
                              {"steps", {{"bad", {{"tool", "needs_x"}, {"with", {{"y", 1}}}}}}}});
  auto c = sup.client(alice_token);
  auto doc = wait_status(c, id, "failed", 30s);
  INFO("execution: " << doc.dump(2));
  REQUIRE(doc["status"] == "failed");
  auto& bad = doc["steps"]["bad"];
  CHECK(bad["status"] == "failed");
  CHECK(bad["attempt"] == 1);
  REQUIRE(bad["error"].is_string());
  CHECK(bad["error"].get<std::string>().find("needs_x") != std::string::npos);
  // The slot went back.
  CHECK(eventually([&] { return slots_free(sup); }, 10s));
}
