// The cluster's membership (runtime/docs/reference/config.md#cluster): a real `canopy serve
// --cluster 127.0.0.1:0` supervisor and real `canopy worker --join`
// processes on loopback; `GET /v1/nodes` and `canopy ls --nodes`. Every wait
// is an event wait with a deadline (an output line, a process exit, a node
// listing polled until it shows the change), never a fixed sleep.
//
// The supervisors here run with heartbeat 500ms and timeout 2s to keep the
// tests fast.

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

const std::string cluster_secret = "test-cluster-secret";

/// The cluster timeout of the test supervisors.
constexpr auto cluster_timeout = 2s;

/// Slack over the cluster timeout for a loaded test machine.
constexpr auto slack = 3s;

/// The supervisor's config patch: the cluster secret (unless `with_secret`
/// is false), a fast heartbeat and timeout, and one tool of its own.
json supervisor_config(bool with_secret = true) {
  json cluster = {{"heartbeat", "500ms"}, {"timeout", "2s"}};
  if (with_secret)
    cluster["secret"] = cluster_secret;
  return {{"cluster", cluster}, {"tools", {{"sup_tool", {{"argv", {"true"}}}}}}};
}

/// A supervisor on an ephemeral cluster port (and `home`, when given).
server_process::options supervisor_options(const std::string& home = {},
                                           const std::string& cluster = "127.0.0.1:0") {
  server_process::options o;
  o.config = supervisor_config();
  o.args = {"--cluster", cluster};
  o.home = home;
  return o;
}

/// `GET /v1/nodes` as `token`; the items (an empty array when the answer is
/// not a listing).
json nodes_of(const server_process& s, const std::string& token = alice_token) {
  auto c = s.client(token);
  auto a = get_json(c, "/v1/nodes");
  if (a.status != 200 || !a.body.is_object() || !a.body.contains("items"))
    return json::array();
  return a.body["items"];
}

/// The node named `name` in `items`; null when absent.
json node_named(const json& items, const std::string& name) {
  for (auto& n : items)
    if (n.value("name", "") == name)
      return n;
  return nullptr;
}

std::set<std::string> names_of(const json& items) {
  std::set<std::string> out;
  for (auto& n : items)
    out.insert(n.value("name", ""));
  return out;
}

/// A tools file for a worker: `tools` names (each runs `true`) and the
/// cluster secret (none when empty).
std::string tools_file(const temp_dir& dir, const std::string& file,
                       const std::vector<std::string>& tools, const std::string& secret) {
  json doc = {{"tools", json::object()}};
  for (auto& t : tools)
    doc["tools"][t] = {{"argv", {"true"}}};
  if (!secret.empty())
    doc["cluster"] = {{"secret", secret}};
  return dir.write(file, doc.dump(2));
}

std::string join_arg(int port) {
  return "127.0.0.1:" + std::to_string(port);
}

/// A worker's tools file with one tool, `sleeper`, that writes its pid to
/// `pid_file` and sleeps a minute.
std::string sleeper_tools(const temp_dir& dir, const std::string& file,
                          const std::string& pid_file) {
  json doc = {{"tools",
               {{"sleeper", {{"argv", {"sh", "-c", "echo $$ > " + pid_file + "; exec sleep 60"}},
                             {"grace", {{"interrupt", "1s"}, {"terminate", "1s"}}}}}}},
              {"cluster", {{"secret", cluster_secret}}}};
  return dir.write(file, doc.dump(2));
}

/// Registers a graph with one `sleeper` tool step on `sup` and starts it.
/// @returns the execution id (empty on failure, with the answers in the log).
std::string start_sleeper(const server_process& sup) {
  auto c = sup.client(alice_token);
  auto g = post_json(c, "/v1/graphs",
                     {{"name", "sleepy"}, {"steps", {{"s", {{"tool", "sleeper"}}}}}});
  INFO("POST /v1/graphs: " << g.status << " " << g.text);
  REQUIRE(g.status == 201);
  auto e = post_json(c, "/v1/graphs/sleepy/executions", {{"inputs", json::object()}});
  INFO("POST executions: " << e.status << " " << e.text);
  REQUIRE(e.status == 201);
  return e.body.value("id", "");
}
} // namespace

TEST_CASE("a supervisor and two workers join and GET /v1/nodes lists all three with their "
          "slots and tools",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  temp_dir dir;
  // w1 takes the secret from its tools file, w2 from the environment and its
  // slots from --max-parallel (the alias of --slots).
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--slots", "2", "--tools",
                     tools_file(dir, "w1.json", {"alpha"}, cluster_secret)}};
  worker_process w2{{"--join", join_arg(port), "--name", "w2", "--max-parallel", "3",
                     "--tools", tools_file(dir, "w2.json", {"beta", "gamma"}, "")},
                    {{"CANOPY_CLUSTER_SECRET", cluster_secret}}};
  INFO("w1 stderr: " << w1.err() << "\nw2 stderr: " << w2.err());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(w2.wait_joined(port, "w2"));
  // The supervisor may list w1 before w1 has logged that it joined.
  CHECK(eventually([&] {
    return w1.err().find("event=joined supervisor=127.0.0.1:" + std::to_string(port) + " name=w1")
           != std::string::npos;
  }));

  // Any user may read the listing; the supervisor comes first.
  json items;
  REQUIRE(eventually([&] { return (items = nodes_of(sup, bob_token)).size() == 3; }, 10s));
  INFO("nodes: " << items.dump());
  auto& head = items.at(0);
  CHECK(head["name"] == "supervisor");
  CHECK(head["supervisor"] == true);
  CHECK(head["slots"] == 4);
  CHECK(head["tools"] == json::array({"sup_tool"}));
  auto n1 = node_named(items, "w1");
  auto n2 = node_named(items, "w2");
  REQUIRE(n1.is_object());
  REQUIRE(n2.is_object());
  CHECK(n1["slots"] == 2);
  CHECK(n1["tools"] == json::array({"alpha"}));
  CHECK(n1["supervisor"] == false);
  CHECK(n1["running"] == 0);
  CHECK(n2["slots"] == 3);
  auto tools2 = n2["tools"].get<std::vector<std::string>>();
  std::sort(tools2.begin(), tools2.end());
  CHECK(tools2 == std::vector<std::string>{"beta", "gamma"});
  for (auto& n : items) {
    REQUIRE(n.contains("joined_at"));
    REQUIRE(n.contains("last_seen"));
    auto joined = ms_of(n["joined_at"]);
    auto seen = ms_of(n["last_seen"]);
    CHECK(seen >= joined);
  }
  // The supervisor logs the joins.
  CHECK(eventually([&] { return sup.log().find("w2") != std::string::npos; }, 5s));

  // The route needs a token like every other /v1 route.
  {
    auto anonymous = sup.client();
    CHECK(get_json(anonymous, "/v1/nodes").status == 401);
  }

  // `canopy ls --nodes --server URL`: the same members.
  temp_dir home;
  auto listed = run_canopy(home.path, {"ls", "--nodes", "--json", "--server", sup.url(),
                                       "--token", alice_token});
  INFO("ls --nodes --json: " << listed.out << listed.err);
  REQUIRE(listed.exit_code == 0);
  auto docs = listed.out_json();
  REQUIRE(docs.is_array());
  CHECK(names_of(docs) == std::set<std::string>{"supervisor", "w1", "w2"});
  auto table = run_canopy(home.path, {"ls", "--nodes", "--server", sup.url(), "--token",
                                      alice_token});
  INFO("ls --nodes: " << table.out << table.err);
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("NAME") != std::string::npos);
  CHECK(table.out.find("SUPERVISOR") != std::string::npos);
  CHECK(table.out.find("beta,gamma") != std::string::npos);

  // A worker opens no store.
  CHECK(!std::filesystem::exists(w1.cwd() + "/.canopy"));

  // SIGTERM: the worker exits 0 and leaves the listing.
  CHECK(w1.stop(SIGTERM) == 0);
  CHECK(eventually([&] { return !node_named(nodes_of(sup), "w1").is_object(); },
                   cluster_timeout + slack));
  CHECK(node_named(nodes_of(sup), "w2").is_object());
  CHECK(w2.stop(SIGINT) == 0);
}

TEST_CASE("a worker with a wrong secret exits 2, the supervisor logs the refusal and does not "
          "list it",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  temp_dir dir;
  worker_process intruder{{"--join", join_arg(port), "--name", "intruder", "--tools",
                           tools_file(dir, "bad.json", {"alpha"}, "not-the-secret")}};
  REQUIRE(intruder.wait_exit(30s));
  INFO("worker stdout: " << intruder.out() << "\nstderr: " << intruder.err()
                         << "\nsupervisor log: " << sup.log());
  CHECK(intruder.exit_code() == 2);
  CHECK(intruder.err().find("event=refused") != std::string::npos);
  CHECK(intruder.out().find("joined") == std::string::npos);
  // The supervisor's log names the refusal and the node.
  CHECK(eventually(
    [&] {
      auto log = sup.log();
      return log.find("refused") != std::string::npos
             && log.find("intruder") != std::string::npos;
    },
    5s));
  CHECK(names_of(nodes_of(sup)) == std::set<std::string>{"supervisor"});
}

TEST_CASE("a worker killed with SIGKILL leaves GET /v1/nodes within the cluster timeout",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  temp_dir dir;
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--tools",
                     tools_file(dir, "w1.json", {"alpha"}, cluster_secret)}};
  worker_process w2{{"--join", join_arg(port), "--name", "w2", "--tools",
                     tools_file(dir, "w2.json", {"beta"}, cluster_secret)}};
  INFO("w1 stderr: " << w1.err() << "\nsupervisor log: " << sup.log());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(w2.wait_joined(port, "w2"));
  REQUIRE(eventually([&] { return nodes_of(sup).size() == 3; }, 10s));

  auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(w1.stop(SIGKILL) == 128 + SIGKILL);
  REQUIRE(eventually([&] { return !node_named(nodes_of(sup), "w1").is_object(); },
                     cluster_timeout + slack));
  auto took = std::chrono::steady_clock::now() - killed_at;
  CHECK(took <= cluster_timeout + slack);
  // The other worker stays a member, and the loss is logged.
  CHECK(names_of(nodes_of(sup)) == std::set<std::string>{"supervisor", "w2"});
  CHECK(eventually([&] { return sup.log().find("lost") != std::string::npos; }, 5s));
}

TEST_CASE("a worker that loses its supervisor logs it and rejoins a new supervisor on the same "
          "port without restarting",
          "[integration][cluster]") {
  temp_dir dir;
  auto tools = tools_file(dir, "w1.json", {"alpha"}, cluster_secret);
  auto first = std::make_unique<server_process>(supervisor_options());
  int port = first->cluster_port();
  REQUIRE(port > 0);
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--tools", tools}};
  INFO("w1 stdout: " << w1.out() << "\nw1 stderr: " << w1.err());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return node_named(nodes_of(*first), "w1").is_object(); }, 10s));

  // SIGKILL the supervisor: the worker notices and stays up.
  auto home = first->home();
  first->kill();
  REQUIRE(w1.wait_for([](const std::string&, const std::string& err) {
    return err.find("event=lost") != std::string::npos;
  }, cluster_timeout + slack + 5s));
  REQUIRE(w1.running());

  // A new supervisor on the same port and home, this time with the secret
  // from the environment: the same worker process joins it.
  server_process::options o = supervisor_options(home, join_arg(port));
  o.config["cluster"].erase("secret");
  o.env = {{"CANOPY_CLUSTER_SECRET", cluster_secret}};
  server_process second{o};
  INFO("second supervisor log: " << second.log());
  REQUIRE(second.cluster_port() == port);
  REQUIRE(w1.wait_joined(port, "w1", 2, 30s));
  REQUIRE(eventually([&] { return node_named(nodes_of(second), "w1").is_object(); }, 10s));
  CHECK(w1.running());
  CHECK(w1.stop(SIGTERM) == 0);
}

TEST_CASE("a worker started before its supervisor keeps retrying and joins once it is up",
          "[integration][cluster]") {
  temp_dir dir;
  int port = closed_port();
  worker_process w1{{"--join", join_arg(port), "--name", "early", "--tools",
                     tools_file(dir, "w.json", {}, cluster_secret)}};
  // Unreachable is not a reason to give up.
  REQUIRE(w1.running());
  server_process sup{supervisor_options({}, join_arg(port))};
  REQUIRE(sup.cluster_port() == port);
  INFO("worker stderr: " << w1.err());
  REQUIRE(w1.wait_joined(port, "early", 1, 30s));
  REQUIRE(eventually([&] { return node_named(nodes_of(sup), "early").is_object(); }, 10s));
  CHECK(node_named(nodes_of(sup), "early")["tools"] == json::array());
}

TEST_CASE("canopy ls --nodes on a home without a cluster prints the single local node",
          "[integration][cluster]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"--max-parallel", "3", "ls", "--nodes", "--json"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  auto docs = r.out_json();
  REQUIRE(docs.is_array());
  REQUIRE(docs.size() == 1);
  CHECK(docs[0]["name"] == "local");
  CHECK(docs[0]["supervisor"] == true);
  CHECK(docs[0]["slots"] == 3);
  CHECK(docs[0]["running"] == 0);
  CHECK(docs[0]["tools"] == json::array());
  auto table = run_canopy(home.path, {"ls", "--nodes"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("NAME") != std::string::npos);
  CHECK(table.out.find("local") != std::string::npos);
  CHECK(run_canopy(home.path, {"ls", "--nodes", "--all"}).exit_code == 2);
}

TEST_CASE("GET /v1/nodes on a server without a cluster lists the local node",
          "[integration][cluster]") {
  server_process sup;
  auto items = nodes_of(sup);
  INFO("nodes: " << items.dump());
  REQUIRE(items.size() == 1);
  CHECK(items[0]["name"] == "local");
  CHECK(items[0]["supervisor"] == true);
  CHECK(sup.out().find("cluster on") == std::string::npos);
}

TEST_CASE("a cluster without a secret, a worker without one and bad worker arguments are "
          "usage errors",
          "[integration][cluster]") {
  temp_dir dir;
  std::map<std::string, std::string> no_secret{{"CANOPY_CLUSTER_SECRET", ""}};

  // serve: the message names both places a secret can come from.
  auto config = default_server_config();
  config.merge_patch(supervisor_config(false));
  auto config_file = dir.write("server.json", config.dump());
  auto serve = run_canopy_env(dir.path + "/home",
                              {"serve", "--config", config_file, "--cluster", "127.0.0.1:0"},
                              no_secret, 60s);
  INFO("serve stderr: " << serve.err);
  CHECK(serve.exit_code == 2);
  CHECK(serve.err.find("\"secret\"") != std::string::npos);
  CHECK(serve.err.find("$CANOPY_CLUSTER_SECRET") != std::string::npos);

  // worker: no secret in the tools file nor the environment.
  auto plain = tools_file(dir, "plain.json", {"alpha"}, "");
  auto worker = run_canopy_env(dir.path + "/h2", {"worker", "--join", "127.0.0.1:1", "--tools",
                                                  plain},
                               no_secret, 60s);
  INFO("worker stderr: " << worker.err);
  CHECK(worker.exit_code == 2);
  CHECK(worker.err.find("$CANOPY_CLUSTER_SECRET") != std::string::npos);

  // A bad tools file: exit 2 naming the key's path.
  auto bad = dir.write("bad.json",
                       json{{"tools", {{"alpha", {{"argv", {"true"}}, {"bogus", 1}}}}},
                            {"cluster", {{"secret", "x"}}}}
                         .dump());
  auto bad_tools = run_canopy(dir.path + "/h3", {"worker", "--join", "127.0.0.1:1", "--tools",
                                                 bad});
  INFO("bad tools stderr: " << bad_tools.err);
  CHECK(bad_tools.exit_code == 2);
  CHECK(bad_tools.err.find("/tools/alpha/bogus") != std::string::npos);
  auto missing = run_canopy(dir.path + "/h3", {"worker", "--join", "127.0.0.1:1", "--tools",
                                               dir.path + "/nope.json"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("nope.json") != std::string::npos);

  // --join is required and must be HOST:PORT; --slots is at least 1.
  CHECK(run_canopy(dir.path + "/h3", {"worker"}).exit_code == 2);
  CHECK(run_canopy(dir.path + "/h3", {"worker", "--join", "nowhere"}).exit_code == 2);
  CHECK(run_canopy(dir.path + "/h3", {"worker", "--join", "127.0.0.1:1", "--slots", "0"})
          .exit_code
        == 2);
  // Timing flags are durations, the heartbeat shorter than the timeout; a
  // node name is a host-name-like word.
  for (auto args : std::vector<std::vector<std::string>>{
         {"--heartbeat", "soon"}, {"--timeout", "0s"}, {"--heartbeat", "5s", "--timeout", "2s"},
         {"--name", "no spaces"}}) {
    std::vector<std::string> argv{"worker", "--join", "127.0.0.1:1", "--tools",
                                  tools_file(dir, "ok.json", {"alpha"}, "x")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_canopy(dir.path + "/h3", argv);
    INFO("worker " << args[0] << " " << args[1] << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(args.size() == 4 ? std::string{"must be shorter than the timeout"}
                                      : args[0] + " '" + args[1] + "'")
          != std::string::npos);
  }
  // No store was opened anywhere by the workers.
  CHECK(!std::filesystem::exists(dir.path + "/h2"));
  CHECK(!std::filesystem::exists(dir.path + "/h3"));
}

TEST_CASE("a frozen worker leaves GET /v1/nodes within the cluster timeout though its "
          "connection stays open",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  temp_dir dir;
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--tools",
                     tools_file(dir, "w1.json", {"alpha"}, cluster_secret)}};
  INFO("w1 stderr: " << w1.err() << "\nsupervisor log: " << sup.log());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return node_named(nodes_of(sup), "w1").is_object(); }, 10s));

  // SIGSTOP: the socket stays open, only the heartbeats and pings stop.
  auto frozen_at = std::chrono::steady_clock::now();
  REQUIRE(::kill(w1.pid(), SIGSTOP) == 0);
  bool gone = eventually([&] { return !node_named(nodes_of(sup), "w1").is_object(); },
                         cluster_timeout + slack);
  auto took = std::chrono::steady_clock::now() - frozen_at;
  ::kill(w1.pid(), SIGCONT);
  REQUIRE(gone);
  // Heartbeat-driven, not at once: the last heartbeat before the freeze may
  // be one interval (500 ms) old, and one more late on a loaded machine (or
  // several in a TSan build), so at least half the timeout.
  CHECK(took >= cluster_timeout / 2);
  CHECK(eventually([&] { return sup.log().find("lost") != std::string::npos; }, 5s));
  // Thawed, the worker notices it was dropped and joins again.
  CHECK(w1.wait_joined(port, "w1", 2, 30s));
  CHECK(eventually([&] { return node_named(nodes_of(sup), "w1").is_object(); }, 10s));
}

TEST_CASE("a worker whose supervisor is frozen logs that it lost it within its --timeout and "
          "rejoins when it thaws",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  temp_dir dir;
  // The worker's timing from its flags: heartbeat 300ms, timeout 2s.
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--heartbeat", "300ms",
                     "--timeout", "2s", "--tools",
                     tools_file(dir, "w1.json", {"alpha"}, cluster_secret)}};
  INFO("w1 stderr: " << w1.err() << "\nsupervisor log: " << sup.log());
  REQUIRE(w1.wait_joined(port, "w1"));

  auto frozen_at = std::chrono::steady_clock::now();
  REQUIRE(::kill(sup.pid(), SIGSTOP) == 0);
  bool lost = w1.wait_for([](const std::string&, const std::string& err) {
    return err.find("event=lost") != std::string::npos;
  }, 2s + slack);
  auto took = std::chrono::steady_clock::now() - frozen_at;
  ::kill(sup.pid(), SIGCONT);
  REQUIRE(lost);
  CHECK(took >= 1500ms);
  CHECK(w1.running());
  CHECK(w1.wait_joined(port, "w1", 2, 30s));
  CHECK(eventually([&] { return node_named(nodes_of(sup), "w1").is_object(); }, 10s));
}

TEST_CASE("a worker stopped with SIGTERM kills the step it runs and exits 0",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  temp_dir dir;
  auto pid_file = dir.path + "/sleeper.pid";
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--tools",
                     sleeper_tools(dir, "w1.json", pid_file)}};
  INFO("w1 stderr: " << w1.err() << "\nsupervisor log: " << sup.log());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return node_named(nodes_of(sup), "w1").is_object(); }, 10s));
  // The tool exists on w1 only: the step runs there.
  auto id = start_sleeper(sup);
  REQUIRE(!id.empty());
  auto pid = wait_pid_file(pid_file);
  REQUIRE(pid > 0);
  CHECK(node_named(nodes_of(sup), "w1")["running"] == 1);
  CHECK(w1.stop(SIGTERM) == 0);
  CHECK(eventually([&] { return process_gone(pid); }, 2s));
}

TEST_CASE("a worker whose supervisor is killed kills the steps it runs for it",
          "[integration][cluster]") {
  server_process sup{supervisor_options()};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  temp_dir dir;
  auto pid_file = dir.path + "/sleeper.pid";
  worker_process w1{{"--join", join_arg(port), "--name", "w1", "--tools",
                     sleeper_tools(dir, "w1.json", pid_file)}};
  INFO("w1 stderr: " << w1.err() << "\nsupervisor log: " << sup.log());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return node_named(nodes_of(sup), "w1").is_object(); }, 10s));
  REQUIRE(!start_sleeper(sup).empty());
  auto pid = wait_pid_file(pid_file);
  REQUIRE(pid > 0);
  sup.kill();
  // No orphans: the worker kills the step within its timeout (5 s).
  CHECK(eventually([&] { return process_gone(pid); }, 5s + slack));
  CHECK(w1.wait_for([](const std::string&, const std::string& err) {
    return err.find("event=lost") != std::string::npos;
  }, 5s));
  CHECK(w1.running());
}
