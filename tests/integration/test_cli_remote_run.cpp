// `canopy run FILE --server URL`, `resume ID --server URL` and `canopy graph
// push|ls --server URL`: the real `canopy` binary against a real
// `canopy serve` on 127.0.0.1. Every wait is an event wait (an output line, an
// exit, a status read back), never a sleep.

#include <signal.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// A `canopy serve` on a fresh home (users alice and bob); inline commands
/// allowed unless `inline_commands` is false.
std::unique_ptr<server_process> serve(bool inline_commands = true) {
  server_process::options opts;
  if (inline_commands)
    opts.config = {{"allow_inline_commands", true}};
  return std::make_unique<server_process>(std::move(opts));
}

std::string url_of(const server_process& srv) {
  return "http://127.0.0.1:" + std::to_string(srv.port());
}

/// `canopy --home HOME ARGS... --server URL --token TOKEN`; HOME is a folder
/// of the test's, apart from the server's home.
proc_result on_server(const server_process& srv, const std::string& home,
                      std::vector<std::string> args, const std::string& token = alice_token) {
  args.insert(args.end(), {"--server", url_of(srv), "--token", token});
  return run_canopy(home, args, 120s);
}

/// Starts `canopy --home HOME ARGS... --server URL --token ta` without waiting.
canopy::core::subprocess start_on_server(const server_process& srv, const std::string& home,
                                   std::vector<std::string> args) {
  args.insert(args.begin(), {canopy_binary(), "--home", home});
  args.insert(args.end(), {"--server", url_of(srv), "--token", alice_token});
  canopy::core::subprocess_options opts;
  opts.argv = std::move(args);
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  return std::move(*p);
}

/// How many lines of `text` hold both `a` and `b` (just `a` when `b` is empty).
size_t lines_with(const std::string& text, const std::string& a, const std::string& b = {}) {
  std::istringstream in{text};
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    n += line.find(a) != std::string::npos && line.find(b) != std::string::npos;
  return n;
}

/// The execution id of a run's outcome line `STATUS[ (REASON)]: ID`.
std::string id_of_outcome(const std::string& out, const std::string& status) {
  std::istringstream in{out};
  for (std::string line; std::getline(in, line);)
    if (line.rfind(status, 0) == 0 && line.size() > status.size()
        && (line[status.size()] == ':' || line[status.size()] == ' ')
        && line.find(": ") != std::string::npos)
      return line.substr(line.rfind(": ") + 2);
  FAIL("no line '" << status << "...: ID' in: " << out);
  return {};
}

} // namespace

TEST_CASE("run --server registers the file with its included graph inline, follows the run "
          "and prints its outputs",
          "[integration][cli][server]") {
  auto srv = serve();
  temp_dir cli;
  temp_dir files;
  files.write("leaf.json", R"({"inputs": ["v"], "steps": {"x": {"fn": "echo",
    "with": {"v": "${inputs.v}"}}}, "outputs": {"v": "${steps.x.v}"}})");
  auto file = files.write("greet.json", R"({"inputs": ["who"], "steps": {
    "hello": {"run": ["sh", "-c", "printf 'hello %s' \"$1\"", "sh", "${inputs.who}"]},
    "child": {"graph": "leaf.json", "with": {"v": "${steps.hello.stdout}"}, "needs": ["hello"]},
    "last": {"fn": "echo", "with": {"said": "${steps.child.v}"}, "needs": ["child"]}},
    "outputs": {"said": "${steps.last.said}"}})");

  auto r = on_server(*srv, cli.path, {"run", file, "--input", "who=bob"});
  INFO(r.err << srv->log());
  REQUIRE(r.exit_code == 0);
  auto id = id_of_outcome(r.out, "completed");
  CHECK_THAT(r.out, Catch::Contains("\"said\": \"hello bob\""));
  // Output that is not a terminal: one line per event, labelled as locally.
  CHECK(lines_with(r.out, "step.completed", "greet/hello") == 1);
  CHECK(lines_with(r.out, "step.completed", "greet/child/x") == 1);
  CHECK(lines_with(r.out, "execution.completed", "greet") >= 1);
  CHECK(r.err.empty());
  // Nothing was written to the local home.
  CHECK(!has_store(cli.path));

  // The execution is the server's, with the child graph run from the inline copy.
  auto show = on_server(*srv, cli.path, {"show", id, "--json"});
  REQUIRE(show.exit_code == 0);
  auto doc = show.out_json();
  CHECK(doc["status"] == "completed");
  CHECK(doc["graph"] == "greet");
  CHECK(doc["outputs"] == json{{"said", "hello bob"}});
  REQUIRE(doc["children"].size() == 1);
  CHECK(doc["children"][0]["graph"] == "leaf");
  auto c = srv->client(alice_token);
  auto g = get_json(c, "/v1/graphs/greet");
  REQUIRE(g.status == 200);
  CHECK(g.body["graph"]["steps"]["child"]["graph"]["steps"]["x"]["fn"] == "echo");

  // --json prints the final document, as show --json has it; each run is a
  // new version of the graph.
  auto js = on_server(*srv, cli.path, {"run", file, "--input", "who=eve", "--json"});
  REQUIRE(js.exit_code == 0);
  auto final_doc = js.out_json();
  CHECK(final_doc["status"] == "completed");
  CHECK(final_doc["graph_version"] == 2);
  CHECK(final_doc["outputs"] == json{{"said", "hello eve"}});
  auto again = on_server(*srv, cli.path, {"show", final_doc["id"].get<std::string>(), "--json"});
  CHECK(again.out_json() == final_doc);
}

TEST_CASE("run --server of a failing graph exits 1, shows a failed step's last stderr lines and "
          "prints how to resume it",
          "[integration][cli][server]") {
  auto srv = serve();
  temp_dir cli;
  temp_dir files;
  auto file = files.write("broken.json", R"({"steps": {"ok": {"fn": "noop"},
    "bad": {"fn": "fail", "with": {"message": "no luck"}, "needs": ["ok"]}}})");
  auto r = on_server(*srv, cli.path, {"run", file});
  INFO(r.err);
  CHECK(r.exit_code == 1);
  auto id = id_of_outcome(r.out, "failed");
  CHECK_THAT(r.out, Catch::Contains("no luck"));
  CHECK_THAT(r.err, Catch::Contains("resume with: canopy resume " + id + " --server "
                                    + url_of(*srv)));
  auto show = on_server(*srv, cli.path, {"show", id, "--json"});
  CHECK(show.out_json()["status"] == "failed");

  // Not on a terminal: the last five stderr lines of the step, from the
  // server's stream, follow the error as in a local run.
  auto loud = files.write("loud.json", R"({"steps": {"boom": {"run": ["sh", "-c",
    "for i in 1 2 3 4 5 6 7; do echo err line $i >&2; done; exit 7"]}}})");
  auto l = on_server(*srv, cli.path, {"run", loud});
  INFO(l.out << l.err);
  CHECK(l.exit_code == 1);
  CHECK_THAT(l.out, Catch::Contains("exit code 7\n"
                                    "loud/boom stderr:\n"
                                    "  err line 3\n"
                                    "  err line 4\n"
                                    "  err line 5\n"
                                    "  err line 6\n"
                                    "  err line 7\n"));
}

TEST_CASE("run --server --detach prints the id and the execution runs on without it",
          "[integration][cli][server]") {
  auto srv = serve();
  temp_dir cli;
  temp_dir files;
  auto gate = files.path + "/gate";
  auto file = files.write("gated.json", json{{"steps",
    {{"wait", {{"run", {"sh", "-c", "while [ ! -e '" + gate + "' ]; do sleep 0.01; done"}}}},
     {"after", {{"fn", "noop"}, {"needs", {"wait"}}}}}}}.dump());
  auto r = on_server(*srv, cli.path, {"run", file, "--detach"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out.substr(0, r.out.find('\n'));
  REQUIRE(id.size() == 26);
  CHECK(r.out == id + "\n");
  auto c = srv->client(alice_token);
  // It runs (held by the gate) after the CLI exited; open the gate and it ends.
  CHECK(wait_status(c, id, "running")["status"] == "running");
  // A running execution cannot be resumed.
  auto busy = on_server(*srv, cli.path, {"resume", id});
  CHECK(busy.exit_code == 2);
  CHECK_THAT(busy.err, Catch::Contains("is running"));
  touch(gate);
  CHECK(wait_status(c, id, "completed")["status"] == "completed");

  auto js = on_server(*srv, cli.path, {"run", file, "--detach", "--json"});
  REQUIRE(js.exit_code == 0);
  auto second = js.out_json()["id"].get<std::string>();
  CHECK(wait_status(c, second, "completed")["status"] == "completed");
}

TEST_CASE("Ctrl-C during run --server stops the execution on the server, and resume --server "
          "finishes it without running completed steps again",
          "[integration][cli][server]") {
  auto srv = serve();
  temp_dir cli;
  temp_dir files;
  auto gate = files.path + "/gate";
  auto count = files.path + "/first.count";
  auto file = files.write("held.json", json{{"steps",
    {{"first", {{"run", {"sh", "-c", "echo ran >> '" + count + "'"}}}},
     {"held", {{"run", {"sh", "-c", "while [ ! -e '" + gate + "' ]; do sleep 0.01; done"}},
               {"needs", {"first"}}}},
     {"last", {{"fn", "noop"}, {"needs", {"held"}}}}}}}.dump());

  auto run = start_on_server(*srv, cli.path, {"run", file});
  REQUIRE(wait_for_output(run, [](const std::string& out) {
    return lines_with(out, "step.started", "held/held") > 0;
  }));
  run.signal_group(SIGINT); // as a terminal's Ctrl-C does
  REQUIRE(wait_exit(run));
  auto out = run.out().data;
  auto err = run.err().data;
  INFO(out << err << srv->log());
  CHECK(run.exit_code() == 3);
  auto id = id_of_outcome(out, "stopped");
  CHECK_THAT(out, Catch::Contains("stopped (requested): " + id));
  CHECK_THAT(err, Catch::Contains("stopping " + id));
  CHECK_THAT(err, Catch::Contains("resume with: canopy resume " + id + " --server "));
  auto c = srv->client(alice_token);
  auto doc = get_json(c, "/v1/executions/" + id).body;
  CHECK(doc["status"] == "stopped");
  CHECK(doc["steps"]["first"]["status"] == "completed");
  CHECK(doc["steps"]["last"]["status"] == "pending");

  touch(gate);
  auto resumed = on_server(*srv, cli.path, {"resume", id});
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Catch::Contains("completed: " + id));
  // Only what happened after the resume is printed, and `first` ran once.
  CHECK(lines_with(resumed.out, "step.completed", "held/held") == 1);
  CHECK(lines_with(resumed.out, "held/first") == 0);
  CHECK(lines_with(resumed.out, "execution.stopped", "held") == 0);
  CHECK(read_file(count) == "ran\n");
  CHECK(get_json(c, "/v1/executions/" + id).body["status"] == "completed");

  // Resuming a completed execution runs nothing, as locally; an unknown one
  // is not found.
  auto twice = on_server(*srv, cli.path, {"resume", id, "--json"});
  CHECK(twice.exit_code == 0);
  CHECK(twice.out_json()["status"] == "completed");
  CHECK(read_file(count) == "ran\n");
  CHECK(on_server(*srv, cli.path, {"resume", "01nosuchexecution000000000"}).exit_code == 4);
  CHECK(on_server(*srv, cli.path, {"resume", id}, bob_token).exit_code == 4);
}

TEST_CASE("resume --server --json with a budget prints the final document",
          "[integration][cli][server]") {
  auto srv = serve();
  temp_dir cli;
  temp_dir files;
  auto file = files.write("costly.json", R"({"limits": {"budget": 1}, "steps": {
    "a": {"fn": "noop", "cost": 1}, "b": {"fn": "noop", "cost": 1, "needs": ["a"]}}})");
  auto r = on_server(*srv, cli.path, {"run", file, "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  auto doc = r.out_json();
  CHECK(doc["status"] == "stopped");
  auto id = doc["id"].get<std::string>();
  auto resumed = on_server(*srv, cli.path, {"resume", id, "--budget", "5", "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out_json()["status"] == "completed");
  CHECK(resumed.out_json()["steps"]["b"]["status"] == "completed");
}

TEST_CASE("graph push registers a file's next version and graph ls lists it",
          "[integration][cli][server]") {
  auto srv = serve();
  temp_dir cli;
  temp_dir files;
  auto file = files.write("pushed.json", R"({"steps": {"a": {"fn": "noop"}}})");
  auto r = on_server(*srv, cli.path, {"graph", "push", file});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "pushed\n");
  auto js = on_server(*srv, cli.path, {"graph", "push", file, "--json"});
  REQUIRE(js.exit_code == 0);
  CHECK(js.out_json() == json{{"id", "pushed"}, {"version", 2}});

  auto ls = on_server(*srv, cli.path, {"graph", "ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  REQUIRE(ls.out_json().size() == 1);
  CHECK(ls.out_json()[0]["id"] == "pushed");
  CHECK(ls.out_json()[0]["version"] == 2);
  auto human = on_server(*srv, cli.path, {"graph", "ls"});
  CHECK(human.exit_code == 0);
  CHECK(lines_with(human.out, "pushed", " 2 ") == 1);
  // Another user has none; the pushed graph starts over the API.
  CHECK(on_server(*srv, cli.path, {"graph", "ls", "--json"}, bob_token).out_json()
        == json::array());
  auto c = srv->client(alice_token);
  CHECK(post_json(c, "/v1/graphs/pushed/executions").status == 201);

  // Without a server there is nothing to push to.
  auto local = run_canopy(cli.path, {"graph", "push", file});
  CHECK(local.exit_code == 2);
  CHECK_THAT(local.err, Catch::Contains("--server"));
  CHECK(run_canopy(cli.path, {"graph", "ls"}).exit_code == 2);
}

TEST_CASE("a graph the server refuses is reported with its JSON path and nothing is "
          "registered",
          "[integration][cli][server]") {
  auto srv = serve(false); // no inline commands
  temp_dir cli;
  temp_dir files;
  files.write("inner.json", R"({"steps": {"sh": {"run": ["true"]}}})");
  auto file = files.write("outer.json", R"({"steps": {"ok": {"fn": "noop"},
    "nested": {"graph": "inner.json"}}})");
  for (auto cmd : {"run", "push"}) {
    std::vector<std::string> args = std::string{cmd} == "run"
                                       ? std::vector<std::string>{"run", file}
                                       : std::vector<std::string>{"graph", "push", file};
    auto r = on_server(*srv, cli.path, args);
    INFO(cmd << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains("the server refused graph 'outer'"));
    CHECK_THAT(r.err, Catch::Contains("/steps/nested/graph/steps/sh/run: "));
  }
  // A tool the server does not have: checked there, not locally.
  auto tool = files.write("tool.json", R"({"steps": {"t": {"tool": "nosuch"}}})");
  auto t = on_server(*srv, cli.path, {"run", tool});
  CHECK(t.exit_code == 2);
  CHECK_THAT(t.err, Catch::Contains("/steps/t/tool: unknown tool 'nosuch'"));
  CHECK(on_server(*srv, cli.path, {"graph", "ls", "--json"}).out_json() == json::array());
  CHECK(on_server(*srv, cli.path, {"ls", "--json"}).out_json() == json::array());
}

TEST_CASE("run --server checks the file and inputs locally first and reports a bad token or "
          "an unreachable server",
          "[integration][cli][server]") {
  temp_dir cli;
  temp_dir files;
  auto closed = "http://127.0.0.1:" + std::to_string(closed_port());
  // Invalid graphs and inputs are found before any request (the server is
  // not even there).
  auto bad = files.write("bad.json", R"({"steps": {"a": {"fn": "noop", "needs": ["zz"]}}})");
  auto r = run_canopy(cli.path, {"run", bad, "--server", closed, "--token", "t"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(bad + ": /steps/a/needs"));
  auto good = files.write("good.json", R"({"inputs": ["x"], "steps": {"a": {"fn": "noop"}}})");
  r = run_canopy(cli.path, {"run", good, "--server", closed, "--token", "t"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("missing input 'x'"));
  auto spaced = files.write("two words.json", R"({"steps": {"a": {"fn": "noop"}}})");
  r = run_canopy(cli.path, {"run", spaced, "--server", closed, "--token", "t"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("graph name 'two words'"));
  // Unreachable: exit 5 naming the address.
  r = run_canopy(cli.path, {"run", good, "--input", "x=1", "--server", closed, "--token", "t"});
  CHECK(r.exit_code == 5);
  CHECK_THAT(r.err, Catch::Contains("cannot reach the server at " + std::string{closed}));
  r = run_canopy(cli.path, {"resume", "01nosuchexecution000000000", "--server", closed,
                            "--token", "t"});
  CHECK(r.exit_code == 5);
  CHECK(run_canopy(cli.path, {"resume", "x", "--token", "t"}).exit_code == 2);

  // A bad token: exit 2, nothing registered or started.
  auto srv = serve();
  auto wrong = on_server(*srv, cli.path, {"run", good, "--input", "x=1"}, "wrong");
  CHECK(wrong.exit_code == 2);
  CHECK_THAT(wrong.err, Catch::Contains("unauthorized: check --token or $CANOPY_TOKEN"));
  CHECK(on_server(*srv, cli.path, {"graph", "push", good}, "wrong").exit_code == 2);
  CHECK(on_server(*srv, cli.path, {"graph", "ls", "--json"}).out_json() == json::array());
  CHECK(!has_store(cli.path));
}
