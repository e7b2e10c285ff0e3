// `canopy agent ...` (agents, their turns and histories), driven as
// a user drives it: real `canopy` processes on a real store in a temp home,
// real subprocess steps. Every wait is an event wait (a file, an output, an
// exit) with a generous deadline, never a fixed sleep.

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// An agent graph that answers `got: MESSAGE`.
const char* echo_agent = R"({"name": "echoer", "inputs": ["message", "history"],
  "steps": {"x": {"run": ["sh", "-c", "echo \"got: $M\""], "env": {"M": "${inputs.message}"}}},
  "outputs": {"reply": "${steps.x.stdout}"}})";

/// An agent graph whose step writes its pid to `pid_file` and sleeps for a
/// minute (it answers only when stopped).
std::string slow_agent(const std::string& pid_file) {
  json g = {{"name", "sleeper"},
            {"inputs", {"message"}},
            {"steps",
             {{"x",
               {{"run", {"sh", "-c", "echo $$ > \"$P.tmp\"; mv \"$P.tmp\" \"$P\"; exec sleep 60"}},
                {"env", {{"P", pid_file}, {"M", "${inputs.message}"}}}}}}},
            {"outputs", {{"reply", "${steps.x.stdout}"}}}};
  return g.dump();
}

/// Starts `canopy --home HOME ARGS...` in the background (its own process
/// group; its steps run in groups of their own).
canopy::core::subprocess start_canopy(const std::string& home, const std::vector<std::string>& args) {
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  return std::move(*p);
}

/// Polls until `pred` holds (true) or `timeout` passes (false), draining the
/// output of `p` meanwhile.
bool wait_until(canopy::core::subprocess& p, const std::function<bool()>& pred,
                std::chrono::seconds timeout = 60s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    p.poll();
    if (pred())
      return true;
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
}

/// The pid a step wrote to `path`, or 0 while it is not there.
long pid_in(const std::string& path) {
  auto text = std::filesystem::exists(path) ? read_file(path) : std::string{};
  try {
    return text.empty() ? 0 : std::stol(text);
  } catch (...) {
    return 0;
  }
}

/// The agents of `home`; [] when no store was ever created there.
json agent_ls(const std::string& home) {
  if (!has_store(home))
    return json::array();
  auto r = run_canopy(home, {"agent", "ls", "--json"});
  INFO("agent ls stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

json history(const std::string& home, const std::string& name) {
  auto r = run_canopy(home, {"agent", "history", name, "--json"});
  INFO("agent history stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  REQUIRE(doc.is_array());
  return doc;
}

/// The root executions of `home`, newest first; [] when no store was ever
/// created there.
json roots(const std::string& home) {
  if (!has_store(home))
    return json::array();
  auto r = run_canopy(home, {"ls", "--json"});
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

} // namespace

TEST_CASE("an agent answers messages and its history survives the process",
          "[integration][cli][agents]") {
  temp_dir home;
  temp_dir files;
  auto graph = files.write("echo.json", echo_agent);

  auto r = run_canopy(home.path, {"agent", "create", "echo", "--graph", graph});
  INFO("create stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "created agent echo\n");

  r = run_canopy(home.path, {"agent", "send", "echo", "hello there"});
  INFO("send stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "got: hello there\n");

  r = run_canopy(home.path, {"agent", "send", "echo", "again", "--json"});
  REQUIRE(r.exit_code == 0);
  auto answer = r.out_json();
  REQUIRE(answer.is_object());
  CHECK(answer["status"] == "completed");
  CHECK(answer["reply"] == "got: again\n");
  REQUIRE(answer["execution_id"].is_string());
  auto second = answer["execution_id"].get<std::string>();

  // Each message ran as a root execution of the agent's graph.
  auto list = roots(home.path);
  REQUIRE(list.size() == 2);
  CHECK(list[0]["id"] == second);
  auto first = list[1]["id"].get<std::string>();
  for (auto& e : list) {
    CHECK(e["graph"] == "echoer");
    CHECK(e["agent"] == "echo");
    CHECK(e["status"] == "completed");
  }

  // Read by new processes: the conversation is in the store.
  auto h = history(home.path, "echo");
  REQUIRE(h.size() == 4);
  CHECK(h[0]["role"] == "user");
  CHECK(h[0]["content"] == "hello there");
  CHECK(h[0]["execution_id"] == first);
  CHECK(h[1]["role"] == "agent");
  CHECK(h[1]["content"] == "got: hello there\n");
  CHECK(h[1]["execution_id"] == first);
  CHECK(h[2]["role"] == "user");
  CHECK(h[2]["content"] == "again");
  CHECK(h[2]["execution_id"] == second);
  CHECK(h[3]["role"] == "agent");
  CHECK(h[3]["content"] == "got: again\n");
  CHECK(h[3]["execution_id"] == second);
  for (auto& e : h)
    CHECK(ms_of(e["time"]) > 0);
  for (size_t i = 1; i < h.size(); ++i)
    CHECK(ms_of(h[i]["time"]) >= ms_of(h[i - 1]["time"]));

  // Human history: one line per entry.
  r = run_canopy(home.path, {"agent", "history", "echo"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "user: hello there\nagent: got: hello there\nuser: again\nagent: got: again\n");

  // Creating it again replaces graph and policy and keeps the history.
  r = run_canopy(home.path,
                 {"agent", "create", "echo", "--graph", graph, "--on-busy", "queue", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  CHECK(doc["name"] == "echo");
  CHECK(doc["on_busy"] == "queue");
  CHECK(doc["graph"] == "echoer");
  CHECK(doc["node"].is_null());
  r = run_canopy(home.path, {"agent", "create", "echo", "--graph", graph, "--node", "gpu-1",
                             "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out_json()["node"] == "gpu-1");
  r = run_canopy(home.path, {"agent", "create", "echo", "--graph", graph});
  CHECK(r.out == "updated agent echo\n");
  CHECK(history(home.path, "echo").size() == 4);

  // Listed; global options may follow the command.
  auto ls = run_command({canopy_binary(), "agent", "ls", "--json", "--home", home.path});
  REQUIRE(ls.exit_code == 0);
  auto agents = ls.out_json();
  REQUIRE(agents.size() == 1);
  CHECK(agents[0]["name"] == "echo");
  CHECK(agents[0]["on_busy"] == "cancel_previous"); // replaced: the default
  CHECK(agents[0]["graph"] == "echoer");
  r = run_canopy(home.path, {"agent", "ls"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("echo"));
  CHECK_THAT(r.out, Catch::Contains("cancel_previous"));
}

TEST_CASE("agent create rejects bad names, graphs and policies with exit 2 and stores nothing",
          "[integration][cli][agents]") {
  temp_dir home;
  temp_dir files;
  auto good = files.write("good.json", echo_agent);
  auto no_reply = files.write("no_reply.json", R"({"inputs": ["message"],
    "steps": {"x": {"fn": "echo", "with": {"m": "${inputs.message}"}}},
    "outputs": {"answer": "${steps.x.m}"}})");
  auto other_input = files.write("other_input.json", R"({"inputs": ["message", "topic"],
    "steps": {"x": {"fn": "noop"}}, "outputs": {"reply": "${inputs.topic}"}})");
  auto no_message = files.write("no_message.json", R"({"inputs": [],
    "steps": {"x": {"fn": "noop"}}, "outputs": {"reply": "fixed"}})");
  auto unknown_key = files.write("unknown_key.json", R"({"inputs": ["message"],
    "steps": {"x": {"fn": "noop", "colour": "red"}}, "outputs": {"reply": "fixed"}})");
  auto malformed = files.write("malformed.json", R"({"inputs": ["message"], )");

  struct bad_case {
    std::vector<std::string> args;
    std::vector<std::string> says;
  };
  std::vector<bad_case> cases = {
    {{"agent", "create", "bad name!", "--graph", good}, {"agent name 'bad name!'"}},
    {{"agent", "create", std::string(129, 'a'), "--graph", good}, {"agent name"}},
    {{"agent", "create", "a", "--graph", no_reply}, {no_reply + ": /outputs/reply: "}},
    {{"agent", "create", "a", "--graph", other_input}, {other_input + ": /inputs", "topic"}},
    {{"agent", "create", "a", "--graph", no_message}, {no_message + ": /inputs", "message"}},
    {{"agent", "create", "a", "--graph", unknown_key},
     {unknown_key + ": /steps/x/colour: "}},
    {{"agent", "create", "a", "--graph", malformed}, {malformed + ": "}},
    {{"agent", "create", "a", "--graph", files.path + "/missing.json"},
     {files.path + "/missing.json"}},
    {{"agent", "create", "a", "--graph", good, "--on-busy", "later"},
     {"--on-busy 'later'", "cancel_previous, queue or reject"}},
    {{"agent", "create", "a", "--graph", good, "--node", "gpu 1"},
     {"--node 'gpu 1'", "a node name may hold only"}},
    {{"agent", "create", "a"}, {"--graph"}},
    {{"agent", "send", "a"}, {"text"}},
    {{"agent"}, {}},
  };
  for (auto& c : cases) {
    std::string cmd;
    for (auto& a : c.args)
      cmd += a + " ";
    INFO("canopy " << cmd);
    auto r = run_canopy(home.path, c.args);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    for (auto& s : c.says)
      CHECK_THAT(r.err, Catch::Contains(s));
  }
  CHECK(agent_ls(home.path) == json::array());
  CHECK(roots(home.path) == json::array());
}

TEST_CASE("an unknown agent is exit 4 and an idle agent has nothing to cancel",
          "[integration][cli][agents]") {
  temp_dir home;
  temp_dir files;
  auto graph = files.write("echo.json", echo_agent);
  for (auto args : std::vector<std::vector<std::string>>{{"agent", "send", "nobody", "hi"},
                                                         {"agent", "cancel", "nobody"},
                                                         {"agent", "history", "nobody"}}) {
    INFO("canopy " << args[1]);
    auto r = run_canopy(home.path, args);
    CHECK(r.exit_code == 4);
    CHECK_THAT(r.err, Catch::Contains("unknown agent nobody"));
  }
  REQUIRE(run_canopy(home.path, {"agent", "create", "echo", "--graph", graph}).exit_code == 0);
  auto r = run_canopy(home.path, {"agent", "cancel", "echo"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "no_execution\n");
  CHECK(history(home.path, "echo") == json::array());
  CHECK(roots(home.path) == json::array());
}

TEST_CASE("agent cancel from another process stops a running send, which exits 3",
          "[integration][cli][agents]") {
  temp_dir home;
  temp_dir files;
  auto pid_file = files.path + "/step.pid";
  auto graph = files.write("slow.json", slow_agent(pid_file));
  REQUIRE(run_canopy(home.path, {"agent", "create", "slow", "--graph", graph}).exit_code == 0);

  auto send = start_canopy(home.path, {"agent", "send", "slow", "work hard", "--json"});
  // Running: its step wrote its pid.
  REQUIRE(wait_until(send, [&] { return pid_in(pid_file) > 0; }));
  auto step_pid = pid_in(pid_file);
  auto list = roots(home.path);
  REQUIRE(list.size() == 1);
  CHECK(list[0]["status"] == "running");
  auto id = list[0]["id"].get<std::string>();

  auto r = run_canopy(home.path, {"agent", "cancel", "slow", "--wait", "60"});
  INFO("cancel stderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "cancelled\n");

  REQUIRE(wait_exit(send));
  INFO("send stderr: " << send.err().data);
  CHECK(send.exit_code() == 3);
  auto answer = json::parse(send.out().data, nullptr, false);
  REQUIRE(answer.is_object());
  CHECK(answer["status"] == "stopped");
  CHECK(answer["execution_id"] == id);
  CHECK(answer["reply"].is_null());
  CHECK_THAT(send.err().data, Catch::Contains("resume " + id));
  // The step's subprocess is gone, and the run is stopped, resumable.
  CHECK(process_gone(step_pid));
  auto show = run_canopy(home.path, {"show", id, "--json"});
  REQUIRE(show.exit_code == 0);
  CHECK(show.out_json()["status"] == "stopped");
  CHECK(show.out_json()["steps"]["x"]["status"] == "pending");
  // Nothing runs any more.
  r = run_canopy(home.path, {"agent", "cancel", "slow"});
  CHECK(r.out == "no_execution\n");
}

TEST_CASE("Ctrl-C during agent send cancels the run and prints how to resume it",
          "[integration][cli][agents]") {
  temp_dir home;
  temp_dir files;
  auto pid_file = files.path + "/step.pid";
  auto graph = files.write("slow.json", slow_agent(pid_file));
  REQUIRE(run_canopy(home.path, {"agent", "create", "slow", "--graph", graph}).exit_code == 0);

  auto send = start_canopy(home.path, {"agent", "send", "slow", "hi"});
  REQUIRE(wait_until(send, [&] { return pid_in(pid_file) > 0; }));
  auto step_pid = pid_in(pid_file);
  auto id = roots(home.path)[0]["id"].get<std::string>();
  send.signal_group(SIGINT); // as a terminal's Ctrl-C does
  REQUIRE(wait_exit(send));
  INFO("send stderr: " << send.err().data);
  CHECK(send.exit_code() == 3);
  CHECK(send.out().data.empty());
  CHECK_THAT(send.err().data, Catch::Contains(id));
  CHECK_THAT(send.err().data, Catch::Contains("canopy --home " + home.path + " resume " + id));
  CHECK(process_gone(step_pid));
  auto show = run_canopy(home.path, {"show", id, "--json"});
  REQUIRE(show.exit_code == 0);
  CHECK(show.out_json()["status"] == "stopped");
  auto events = run_canopy(home.path, {"events", id, "--json"});
  CHECK_THAT(events.out, Catch::Contains("\"agent.cancelled\""));
}

TEST_CASE("a busy agent with the reject policy refuses a message with exit 1",
          "[integration][cli][agents]") {
  temp_dir home;
  temp_dir files;
  auto pid_file = files.path + "/step.pid";
  auto graph = files.write("slow.json", slow_agent(pid_file));
  REQUIRE(run_canopy(home.path, {"agent", "create", "slow", "--graph", graph, "--on-busy",
                                 "reject"})
            .exit_code == 0);
  auto send = start_canopy(home.path, {"agent", "send", "slow", "first"});
  REQUIRE(wait_until(send, [&] { return pid_in(pid_file) > 0; }));

  auto r = run_canopy(home.path, {"agent", "send", "slow", "second"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("agent slow is busy"));
  r = run_canopy(home.path, {"agent", "send", "slow", "third", "--json"});
  CHECK(r.exit_code == 1);
  CHECK(r.out_json()["status"] == "busy");
  CHECK(r.out_json()["execution_id"].is_null());

  // Only the first message started a run.
  CHECK(roots(home.path).size() == 1);
  r = run_canopy(home.path, {"agent", "cancel", "slow"});
  CHECK(r.out == "cancelled\n");
  REQUIRE(wait_exit(send));
  CHECK(send.exit_code() == 3);
}

// -- against a server (--server URL) ------------------------------------------------------

TEST_CASE("agent commands with --server create, message, cancel and read a server's agent",
          "[integration][cli][agents][server]") {
  server_process::options opts;
  opts.config = {{"allow_inline_commands", true},
                 {"tools", {{"upper", {{"argv", {"sh", "-c", "printf '%s!' \"$1\"", "upper",
                                                 "${with.text}"}}}}}}};
  server_process srv{opts};
  temp_dir home; // a local home that must stay untouched
  temp_dir files;
  auto graph = files.write("echo.json", echo_agent);
  // A tool only the server has: the CLI leaves tool names to the server.
  auto shouter = files.write("shouter.json", R"({"inputs": ["message"],
    "steps": {"s": {"tool": "upper", "with": {"text": "${inputs.message}"}}},
    "outputs": {"reply": "${steps.s.stdout}"}})");
  auto unknown_tool = files.write("unknown_tool.json", R"({"inputs": ["message"],
    "steps": {"s": {"tool": "nope", "with": {"text": "${inputs.message}"}}},
    "outputs": {"reply": "${steps.s.stdout}"}})");
  auto pid_file = files.path + "/step.pid";
  auto slow = files.write("slow.json", slow_agent(pid_file));
  files.write("leaf.json", R"({"inputs": ["m"],
    "steps": {"a": {"fn": "echo", "with": {"m": "${inputs.m}"}}},
    "outputs": {"m": "${steps.a.m}"}})");
  auto nested = files.write("nested.json", R"({"inputs": ["message"],
    "steps": {"in": {"graph": "leaf.json", "with": {"m": "${inputs.message}"}}},
    "outputs": {"reply": "${steps.in.m}"}})");
  std::vector<std::string> remote = {"--server", srv.url(), "--token", alice_token};
  auto cli = [&](std::vector<std::string> args, bool with_remote = true) {
    if (with_remote)
      args.insert(args.end(), remote.begin(), remote.end());
    return run_canopy(home.path, args);
  };

  auto r = cli({"agent", "create", "echo", "--graph", graph});
  INFO("create stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "created agent echo\n");
  r = cli({"agent", "create", "echo", "--graph", graph, "--on-busy", "queue", "--json"});
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.out_json().is_object()); // one JSON document
  CHECK(r.out_json()["on_busy"] == "queue");
  CHECK(r.out_json()["name"] == "echo");

  r = cli({"agent", "create", "shouter", "--graph", shouter, "--node", "supervisor"});
  INFO("create shouter stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  r = cli({"agent", "send", "shouter", "hey"});
  INFO("send shouter stderr: " << r.err);
  CHECK(r.exit_code == 1); // the node has no cluster: its step fails, naming the node
  CHECK_THAT(r.err + r.out, Catch::Contains("node 'supervisor'"));
  r = cli({"agent", "create", "shouter", "--graph", shouter});
  REQUIRE(r.exit_code == 0);
  r = cli({"agent", "send", "shouter", "hey"});
  CHECK(r.out == "hey!\n");
  r = cli({"agent", "create", "other", "--graph", unknown_tool});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/graph/steps/s/tool"));

  r = cli({"agent", "send", "echo", "hello"});
  INFO("send stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "got: hello\n");
  r = cli({"agent", "send", "echo", "again", "--json"});
  REQUIRE(r.exit_code == 0);
  auto answer = r.out_json();
  CHECK(answer["status"] == "completed");
  CHECK(answer["reply"] == "got: again\n");
  REQUIRE(answer["execution_id"].is_string());

  r = cli({"agent", "history", "echo", "--json"});
  REQUIRE(r.exit_code == 0);
  auto h = r.out_json();
  REQUIRE(h.size() == 4);
  CHECK(h[0]["role"] == "user");
  CHECK(h[0]["content"] == "hello");
  CHECK(h[3]["role"] == "agent");
  CHECK(h[3]["content"] == "got: again\n");
  CHECK(h[3]["execution_id"] == answer["execution_id"]);
  r = cli({"agent", "history", "echo"});
  CHECK(r.out == "user: hello\nagent: got: hello\nuser: again\nagent: got: again\n");
  r = cli({"agent", "ls", "--json"});
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.out_json().size() == 2);
  CHECK(r.out_json()[0]["name"] == "echo");
  CHECK(cli({"agent", "cancel", "echo"}).out == "no_execution\n");

  // Unknown agents, and another user's agent, are 404: exit 4.
  CHECK(cli({"agent", "send", "nobody", "hi"}).exit_code == 4);
  auto bob = run_canopy_env(home.path,
                            {"agent", "history", "echo", "--server", srv.url()},
                            {{"CANOPY_TOKEN", bob_token}});
  CHECK(bob.exit_code == 4);
  // A graph that includes files cannot be sent; local checks still apply.
  r = cli({"agent", "create", "nested", "--graph", nested});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("includes other files"));
  CHECK_THAT(r.err, Catch::Contains("leaf.json"));
  r = cli({"agent", "create", "bad name", "--graph", graph});
  CHECK(r.exit_code == 2);

  // Cancel reaches a send waiting on the server; the send exits 3.
  REQUIRE(cli({"agent", "create", "slow", "--graph", slow}).exit_code == 0);
  std::vector<std::string> args = {"agent", "send", "slow", "hi", "--json"};
  args.insert(args.end(), remote.begin(), remote.end());
  auto send = start_canopy(home.path, args);
  REQUIRE(wait_until(send, [&] { return pid_in(pid_file) > 0; }));
  auto step_pid = pid_in(pid_file);
  r = cli({"agent", "cancel", "slow"});
  INFO("cancel stderr: " << r.err);
  CHECK(r.out == "cancelled\n");
  REQUIRE(wait_exit(send));
  INFO("send stderr: " << send.err().data);
  CHECK(send.exit_code() == 3);
  auto stopped = json::parse(send.out().data, nullptr, false);
  REQUIRE(stopped.is_object());
  CHECK(stopped["status"] == "stopped");
  CHECK_THAT(send.err().data, Catch::Contains("/resume"));
  CHECK(process_gone(step_pid));

  // Nothing of this touched the local home.
  CHECK(agent_ls(home.path) == json::array());
}
