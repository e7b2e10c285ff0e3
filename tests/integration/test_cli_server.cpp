// The command line against a server (`--server URL`, runtime/docs/reference/cli.md rules
// 13-20), `events --follow` on a local home, and `canopy serve`'s start-up.
// Real processes throughout: `canopy` subprocesses, a real `canopy serve` on
// 127.0.0.1 with a temp config, real HTTP. Every wait is an event wait (an
// output line, an exit), never a sleep.
//
// Tests tagged [server] start `canopy serve`; run them alone with
// `canopy_tests "[cli][server]"`. The parts of the client (URL parsing, the
// event-stream parser, the error mapping) are tested directly, [client].

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "persistence/error.hpp"
#include "runtime/client/client.hpp"
#include "runtime/node/error.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

// -- output ------------------------------------------------------------------------

/// The complete lines of `text` parsed as JSON (a line that is not JSON fails
/// the test).
std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (line.empty())
      continue;
    INFO("line: " << line);
    auto j = json::parse(line, nullptr, false);
    REQUIRE(!j.is_discarded());
    out.push_back(std::move(j));
  }
  return out;
}

/// True when some complete line of `text` is a JSON event of `type` for `step`.
bool has_event(const std::string& text, const std::string& type, const std::string& step) {
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (in.eof())
      break; // an incomplete last line
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == type && j.value("step", "") == step)
      return true;
  }
  return false;
}

/// Checks a followed event log: seqs without gaps and strictly increasing,
/// starting with the tree's `execution.queued` and ending with the terminal
/// event `last_type` of `root`.
void check_gapless_log(const std::vector<json>& events, const std::string& root,
                       const std::string& last_type) {
  REQUIRE(events.size() >= 4);
  CHECK(events.front()["type"] == "execution.queued");
  CHECK(events.front()["execution_id"] == root);
  for (size_t i = 1; i < events.size(); ++i) {
    INFO("event " << i << ": " << events[i].dump());
    CHECK(events[i]["seq"].get<uint64_t>() == events[i - 1]["seq"].get<uint64_t>() + 1);
  }
  CHECK(events.back()["type"] == last_type);
  CHECK(events.back()["execution_id"] == root);
}

// -- a server and its API ----------------------------------------------------------------

const std::string& alice = alice_token;
const std::string& bob = bob_token;

/// A `canopy serve` on `home` (users alice and bob, a free port, inline
/// commands allowed).
std::unique_ptr<server_process> serve_on(const std::string& home,
                                         std::vector<std::string> args = {}) {
  server_process::options opts;
  opts.home = home;
  opts.config = {{"allow_inline_commands", true}};
  opts.args = std::move(args);
  return std::make_unique<server_process>(std::move(opts));
}

std::string url_of(const server_process& srv) {
  return "http://127.0.0.1:" + std::to_string(srv.port());
}

/// Registers `graph` and starts it over the API (directly, not through the
/// client under test). @returns the execution id.
std::string start_on(const server_process& srv, const json& graph,
                     const std::string& token = alice) {
  auto c = srv.client(token);
  auto reg = post_json(c, "/v1/graphs", graph);
  INFO(reg.text);
  REQUIRE(reg.status == 201);
  auto name = graph["name"].get<std::string>();
  auto run = post_json(c, "/v1/graphs/" + name + "/executions", {{"inputs", json::object()}});
  INFO(run.text);
  REQUIRE(run.status == 201);
  return run.body["id"].get<std::string>();
}

/// `canopy --home HOME ARGS... --server URL --token TOKEN`.
proc_result on_server(const server_process& srv, std::vector<std::string> args,
                      const std::string& token = alice) {
  args.insert(args.end(), {"--server", url_of(srv), "--token", token});
  return run_canopy(srv.home(), args, 120s);
}

/// Sets an environment variable of this process (inherited by the
/// processes it starts) for one scope.
class scoped_env {
public:
  scoped_env(std::string name, const std::string& value) : name_(std::move(name)) {
    if (auto old = std::getenv(name_.c_str()))
      old_ = old;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

private:
  std::string name_;
  std::optional<std::string> old_;
};

/// A graph whose first step waits for `gate` to exist (at most 60 s), then a
/// child execution and a last step.
json gated_graph(const std::string& name, const std::string& gate) {
  auto g = json::parse(R"({"steps": {
    "gate": {"run": ["sh", "-c", ""]},
    "child": {"graph": {"steps": {"x": {"fn": "echo", "with": {"v": 1}}}}, "needs": ["gate"]},
    "last": {"fn": "noop", "needs": ["child"]}}})");
  g["name"] = name;
  g["steps"]["gate"]["run"][2] = "i=0; while [ ! -e '" + gate
                                 + "' ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 9; sleep 0.01; done";
  return g;
}

/// A graph of one step that sleeps ten minutes unless stopped.
json sleeper(const std::string& name) {
  auto g = json::parse(R"({"steps": {"a": {"fn": "sleep", "with": {"ms": 600000}}}})");
  g["name"] = name;
  return g;
}

} // namespace

// -- the client's parts ------------------------------------------------------------------

TEST_CASE("server URLs are http or https://HOST:PORT and anything else is rejected with a "
          "reason",
          "[runtime][client]") {
  auto ok = canopy::core::parse_server_url("http://127.0.0.1:8080");
  REQUIRE(ok);
  CHECK(ok->host == "127.0.0.1");
  CHECK(ok->port == 8080);
  auto slash = canopy::core::parse_server_url("HTTP://example.org:9/");
  REQUIRE(slash);
  CHECK(slash->host == "example.org");
  CHECK(slash->port == 9);
  auto v6 = canopy::core::parse_server_url("http://[::1]:7000");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->text() == "http://[::1]:7000");
  auto no_port = canopy::core::parse_server_url("http://localhost");
  REQUIRE(no_port);
  CHECK(no_port->port == 80);
  auto tls = canopy::core::parse_server_url("https://example.org");
  REQUIRE(tls);
  CHECK(tls->tls);
  CHECK(tls->port == 443);
  CHECK(tls->text() == "https://example.org:443");
  CHECK(!canopy::core::parse_server_url("http://h:1")->tls);
  for (auto bad : {"https://127.0.0.1:0", "ftp://h:1", "127.0.0.1:8080", "http://",
                   "http://:80", "http://h:", "http://h:0", "http://h:65536", "http://h:8x",
                   "http://h:80/v1", "http://u@h:80", "http://[::1", "http://h:80?x=1"}) {
    INFO(bad);
    auto r = canopy::core::parse_server_url(bad);
    REQUIRE(!r);
    CHECK(canopy::core::exit_code_of(r.error()) == 2);
    CHECK_THAT(canopy::core::message_of(r.error()), Catch::Contains(bad));
  }
  CHECK_THAT(canopy::core::message_of(canopy::core::parse_server_url("ftp://h:1").error()),
             Catch::Contains("only http and https"));
}

TEST_CASE("error answers map to the exit codes of SPEC 6", "[runtime][client]") {
  auto body = [](const std::string& msg, const std::string& path) {
    return json{{"error", {{"code", "x"}, {"message", msg}, {"path", path}}}}.dump();
  };
  using canopy::core::error_of_answer;
  using canopy::core::exit_code_of;
  using canopy::core::message_of;
  CHECK(exit_code_of(error_of_answer(401, body("no", ""))) == 2);
  CHECK_THAT(message_of(error_of_answer(401, "")), Catch::Contains("--token or $CANOPY_TOKEN"));
  CHECK(exit_code_of(error_of_answer(404, body("no execution 'x'", ""))) == 4);
  CHECK(exit_code_of(error_of_answer(400, body("bad", "/wait"))) == 2);
  CHECK(message_of(error_of_answer(400, body("bad", "/wait"))) == "/wait: bad");
  CHECK(message_of(error_of_answer(409, body("busy", ""))) == "busy");
  CHECK(exit_code_of(error_of_answer(409, body("busy", ""))) == 2);
  CHECK(exit_code_of(error_of_answer(413, "not json")) == 2);
  CHECK(exit_code_of(error_of_answer(503, body("store", ""))) == 5);
  CHECK(exit_code_of(error_of_answer(500, "")) == 1);
}

TEST_CASE("the event-stream parser handles comments, CRLF, multi-line data and split chunks",
          "[runtime][client]") {
  std::string stream = ": keep-alive\r\n\r\nid: 1\r\nevent: execution.queued\r\ndata: {\"seq\":1}"
                       "\r\n\r\nid: 2\nevent: step.output\ndata: {\"seq\":2,\ndata: \"x\":1}\n\n"
                       ":comment\rid:3\rdata:{\"seq\":3}\r\r"
                       "retry: 10\nunknown: y\ndata\n\nid: 9\n";
  // Every split of the stream into two chunks gives the same messages.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    INFO("cut at " << cut);
    canopy::core::sse_parser p;
    std::vector<canopy::core::sse_message> got;
    auto f = [&](const canopy::core::sse_message& m) {
      got.push_back(m);
      return true;
    };
    REQUIRE(p.feed(stream.data(), cut, f));
    REQUIRE(p.feed(stream.data() + cut, stream.size() - cut, f));
    REQUIRE(got.size() == 4);
    CHECK(got[0].id == "1");
    CHECK(got[0].event == "execution.queued");
    CHECK(json::parse(got[0].data)["seq"] == 1);
    CHECK(got[1].event == "step.output");
    CHECK(got[1].data == "{\"seq\":2,\n\"x\":1}");
    CHECK(json::parse(got[1].data)["x"] == 1);
    CHECK(got[2].id == "3");
    CHECK(got[2].event.empty());
    CHECK(got[3].data.empty()); // a bare `data` line is an empty data field
    CHECK(p.comments() == 2);
  }
  // A handler that returns false stops the parse.
  canopy::core::sse_parser p;
  size_t n = 0;
  CHECK(!p.feed(stream.data(), stream.size(), [&](const canopy::core::sse_message&) {
    ++n;
    return false;
  }));
  CHECK(n == 1);
}

// -- --server without a server -------------------------------------------------------------

TEST_CASE("a bad --server URL, a missing token and --token alone exit 2",
          "[integration][cli]") {
  temp_dir home;
  for (auto url : {"ftp://127.0.0.1:1", "https://127.0.0.1:0", "127.0.0.1:1", "http://h:99999",
                   "http://127.0.0.1:1/api"}) {
    INFO(url);
    for (std::vector<std::string> cmd :
         {std::vector<std::string>{"show", "x"}, {"ls"}, {"stop", "x"}, {"events", "x"}}) {
      cmd.insert(cmd.end(), {"--server", url, "--token", "t"});
      auto r = run_canopy(home.path, cmd);
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains("--server"));
    }
  }
  auto no_token = run_canopy_env(home.path, {"ls", "--server", "http://127.0.0.1:1"},
                                 {{"CANOPY_TOKEN", ""}});
  CHECK(no_token.exit_code == 2);
  CHECK_THAT(no_token.err, Catch::Contains("--token"));
  CHECK(run_canopy(home.path, {"ls", "--token", "t"}).exit_code == 2);
  CHECK(run_canopy(home.path, {"ls", "--server", "http://127.0.0.1:1", "--token", "t",
                               "--status", "bogus"})
          .exit_code
        == 2);
}

TEST_CASE("an unreachable server exits 5 naming its address", "[integration][cli]") {
  temp_dir home;
  auto url = "http://127.0.0.1:" + std::to_string(closed_port());
  for (std::vector<std::string> cmd :
       {std::vector<std::string>{"show", "x"}, {"ls", "--json"}, {"stop", "x"}, {"events", "x"},
        {"events", "x", "--follow", "--json"}}) {
    INFO(cmd[0]);
    cmd.insert(cmd.end(), {"--server", url, "--token", "t"});
    auto r = run_canopy(home.path, cmd, 60s);
    CHECK(r.exit_code == 5);
    CHECK_THAT(r.err, Catch::Contains("cannot reach the server at " + url));
    CHECK(r.out.empty());
  }
  // The token can come from the environment.
  auto env = run_canopy_env(home.path, {"ls", "--server", url}, {{"CANOPY_TOKEN", "t"}});
  CHECK(env.exit_code == 5);
}

// -- events --follow on a local home ----------------------------------------------------------

TEST_CASE("events --follow --json prints a detached run's events live until its tree ends",
          "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  auto gate = g.path + "/gate";
  g.write("leaf.json", R"({"steps": {"x": {"fn": "echo", "with": {"v": 1}}}})");
  auto graph = gated_graph("followed", gate);
  graph["steps"]["child"]["graph"] = "leaf.json";
  auto file = g.write("followed.json", graph.dump());
  auto r = run_canopy(home.path, {"run", file, "--detach", "--json"}, 60s);
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();

  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home.path, "events", id, "--follow", "--json"};
  auto follow = canopy::core::subprocess::start(opts);
  REQUIRE(follow);
  // The gate holds the tree running: the follower prints what happened so
  // far and keeps waiting.
  REQUIRE(wait_for_output(*follow, [](const std::string& out) {
    return has_event(out, "step.started", "gate");
  }));
  CHECK(!follow->poll());
  CHECK_THAT(follow->out().data, !Catch::Contains("execution.completed"));
  touch(gate);
  REQUIRE(wait_exit(*follow));
  CHECK(follow->exit_code() == 0);
  auto events = json_lines(follow->out().data);
  check_gapless_log(events, id, "execution.completed");
  // The child's events are part of the tree's log.
  std::set<std::string> executions;
  for (auto& e : events)
    executions.insert(e["execution_id"].get<std::string>());
  CHECK(executions.size() == 2);
  // The same log, read once afterwards.
  auto once = run_canopy(home.path, {"events", id, "--json"});
  CHECK(once.exit_code == 0);
  CHECK(json_lines(once.out) == events);
  // Following a finished tree prints its log and exits at once.
  auto again = run_canopy(home.path, {"events", id, "--follow"});
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.out, Catch::Contains("followed/child"));
  CHECK_THAT(again.out, Catch::Contains("execution.completed"));
}

TEST_CASE("events --follow on a child gives only its subtree and ends with it",
          "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  g.write("leaf.json", R"({"steps": {"x": {"fn": "echo", "with": {"v": 1}}}})");
  auto file = g.write("parent.json", R"({"steps": {
    "child": {"graph": "leaf.json"}, "after": {"fn": "noop", "needs": ["child"]}}})");
  auto r = run_canopy(home.path, {"run", file, "--json"});
  REQUIRE(r.exit_code == 0);
  auto child = r.out_json()["steps"]["child"]["child_id"].get<std::string>();
  auto ev = run_canopy(home.path, {"events", child, "--follow", "--json"}, 60s);
  REQUIRE(ev.exit_code == 0);
  auto events = json_lines(ev.out);
  REQUIRE(!events.empty());
  for (auto& e : events)
    CHECK(e["execution_id"] == child);
  CHECK(events.back()["type"] == "execution.completed");
  CHECK(run_canopy(home.path, {"events", "01nosuchexecution000000000", "--follow"}).exit_code
        == 4);
}

// -- serve start-up ---------------------------------------------------------------------------

TEST_CASE("serve reports every config error with its path and exits 2", "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto bad = files.write("bad.json", R"({"bogus": 1, "max_parallel": "many",
    "users": {"alice": {"token": 5}}})");
  auto r = run_canopy(home.path, {"serve", "--config", bad}, 60s);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("error: /bogus: "));
  CHECK_THAT(r.err, Catch::Contains("error: /max_parallel: "));
  CHECK_THAT(r.err, Catch::Contains("error: /users/alice/token: "));
  CHECK(r.out.empty());

  auto missing = run_canopy(home.path, {"serve", "--config", files.path + "/none.json"}, 60s);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("none.json"));

  auto malformed = files.write("malformed.json", "{\"users\": ");
  CHECK(run_canopy(home.path, {"serve", "--config", malformed}, 60s).exit_code == 2);

  auto good = files.write("good.json", R"({"users": {"a": {"token": "t"}}})");
  auto listen = run_canopy(home.path, {"serve", "--config", good, "--listen", "nowhere"}, 60s);
  CHECK(listen.exit_code == 2);
  CHECK_THAT(listen.err, Catch::Contains("--listen"));
  CHECK(run_canopy(home.path, {"serve", "--config", good, "--cluster", "x:y"}, 60s).exit_code
        == 2);
}

TEST_CASE("serve without any user exits 2 and says how to configure one",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto no_users = files.write("c.json", R"({"listen": "127.0.0.1:0"})");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"serve"}, {"serve", "--config", no_users}}) {
    auto r = run_canopy_env(home.path, args, {{"CANOPY_TOKEN", ""}}, 60s);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("\"users\""));
    CHECK_THAT(r.err, Catch::Contains("$CANOPY_TOKEN"));
  }
}

// -- against a real server ---------------------------------------------------------------------

TEST_CASE("stop --server waits for the snapshot and answers like a local stop",
          "[integration][cli][server]") {
  temp_dir home;
  auto srv = serve_on(home.path);
  auto id = start_on(*srv, sleeper("sleeper"));

  auto r = on_server(*srv, {"stop", id, "--wait", "30"});
  INFO(r.err << srv->log());
  CHECK(r.exit_code == 0);
  CHECK(r.out == "stopped (requested)\n");
  // Nothing left to stop.
  r = on_server(*srv, {"stop", id});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "no_execution\n");
  auto show = on_server(*srv, {"show", id, "--json"});
  REQUIRE(show.exit_code == 0);
  auto doc = show.out_json();
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "requested");
  CHECK(doc["steps"]["a"]["status"] == "pending");

  // --wait 0 does not wait: still stopping is exit 1, as locally.
  auto second = start_on(*srv, sleeper("sleeper"));
  r = on_server(*srv, {"stop", second, "--wait", "0"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("still "));
  r = on_server(*srv, {"stop", second, "--wait", "30"});
  CHECK(r.exit_code == 0);
  CHECK((r.out == "stopped (requested)\n" || r.out == "no_execution\n"));

  auto third = start_on(*srv, sleeper("sleeper"));
  r = on_server(*srv, {"stop", third, "--force"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "stopped (requested)\n");

  // Unknown ids, another user's ids and bad tokens.
  CHECK(on_server(*srv, {"stop", "01nosuchexecution000000000"}).exit_code == 4);
  CHECK(on_server(*srv, {"stop", third}, bob).exit_code == 4);
  auto wrong = on_server(*srv, {"stop", third}, "nobody");
  CHECK(wrong.exit_code == 2);
  CHECK_THAT(wrong.err, Catch::Contains("unauthorized"));
}

TEST_CASE("show --server answers the document local show prints, for its owner only",
          "[integration][cli][server]") {
  temp_dir home;
  temp_dir files;
  auto gate = files.path + "/gate";
  touch(gate);
  auto srv = serve_on(home.path);
  auto id = start_on(*srv, gated_graph("shown", gate));
  // Follow it to its end first (the stream ends with the tree).
  REQUIRE(on_server(*srv, {"events", id, "--follow", "--json"}).exit_code == 0);

  auto remote = on_server(*srv, {"show", id, "--json"});
  REQUIRE(remote.exit_code == 0);
  auto doc = remote.out_json();
  CHECK(doc["status"] == "completed");
  REQUIRE(doc["children"].size() == 1);
  CHECK(doc["children"][0]["parent_step"] == "child");
  // Read commands work while the server holds the home (runtime/docs/reference/cli.md#client-options).
  auto local = run_canopy(home.path, {"show", id, "--json"});
  REQUIRE(local.exit_code == 0);
  CHECK(local.out_json() == doc);
  // Human output renders the same tree.
  auto human = on_server(*srv, {"show", id});
  CHECK(human.exit_code == 0);
  CHECK(human.out == run_canopy(home.path, {"show", id}).out);
  CHECK_THAT(human.out, Catch::Contains("shown " + id));
  // A child through the server gives its subtree.
  auto child = doc["children"][0]["id"].get<std::string>();
  auto sub = on_server(*srv, {"show", child, "--json"});
  CHECK(sub.exit_code == 0);
  CHECK(sub.out_json()["id"] == child);

  CHECK(on_server(*srv, {"show", id}, bob).exit_code == 4);
  CHECK(on_server(*srv, {"show", "01nosuchexecution000000000"}).exit_code == 4);
  auto wrong = on_server(*srv, {"show", id}, "wrong-token");
  CHECK(wrong.exit_code == 2);
  CHECK_THAT(wrong.err, Catch::Contains("unauthorized: check --token or $CANOPY_TOKEN"));
}

TEST_CASE("ls --server follows cursors across pages and filters by status",
          "[integration][cli][server]") {
  temp_dir home;
  auto srv = serve_on(home.path);
  auto c = srv->client(alice);
  auto reg = post_json(c, "/v1/graphs", {{"name", "quick"}, {"steps", {{"a", {{"fn", "noop"}}}}}});
  REQUIRE(reg.status == 201);
  // More than one page (the server's default page is 100).
  for (int i = 0; i < 130; ++i) {
    auto run = post_json(c, "/v1/graphs/quick/executions", {{"inputs", json::object()}});
    REQUIRE(run.status == 201);
  }
  auto held = start_on(*srv, sleeper("held"));
  REQUIRE(on_server(*srv, {"stop", held}).exit_code == 0);

  auto r = on_server(*srv, {"ls", "--json"});
  REQUIRE(r.exit_code == 0);
  auto items = r.out_json();
  REQUIRE(items.is_array());
  CHECK(items.size() == 131);
  std::set<std::string> listed;
  for (size_t i = 0; i < items.size(); ++i) {
    listed.insert(items[i]["id"].get<std::string>());
    CHECK(!items[i].contains("steps"));
    CHECK(!items[i].contains("children"));
    if (i > 0) // newest first
      CHECK(items[i - 1]["id"].get<std::string>() > items[i]["id"].get<std::string>());
  }
  CHECK(listed.size() == 131);
  CHECK(items[0]["id"] == held);

  auto stopped = on_server(*srv, {"ls", "--status", "stopped", "--json"});
  REQUIRE(stopped.exit_code == 0);
  REQUIRE(stopped.out_json().size() == 1);
  CHECK(stopped.out_json()[0]["id"] == held);

  auto human = on_server(*srv, {"ls", "--status", "stopped"});
  CHECK(human.exit_code == 0);
  CHECK_THAT(human.out, Catch::Contains(held));
  CHECK_THAT(human.out, Catch::Contains("requested"));

  // Another user sees none of it; a bad token is exit 2.
  auto other = on_server(*srv, {"ls", "--json"}, bob);
  CHECK(other.exit_code == 0);
  CHECK(other.out_json() == json::array());
  CHECK(on_server(*srv, {"ls"}, "wrong-token").exit_code == 2);
}

TEST_CASE("events --server --follow --json streams the tree's log until the tree ends",
          "[integration][cli][server]") {
  temp_dir home;
  temp_dir files;
  auto gate = files.path + "/gate";
  auto srv = serve_on(home.path);
  auto id = start_on(*srv, gated_graph("streamed", gate));

  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home.path, "events",      id,    "--follow",
               "--json",        "--server", url_of(*srv), "--token", alice};
  auto follow = canopy::core::subprocess::start(opts);
  REQUIRE(follow);
  REQUIRE(wait_for_output(*follow, [](const std::string& out) {
    return has_event(out, "step.started", "gate");
  }));
  CHECK(!follow->poll());
  touch(gate);
  REQUIRE(wait_exit(*follow));
  INFO(follow->err().data);
  CHECK(follow->exit_code() == 0);
  auto events = json_lines(follow->out().data);
  check_gapless_log(events, id, "execution.completed");

  // Following a settled tree replays its log and ends (the stream's `end`).
  auto settled = on_server(*srv, {"events", id, "--follow", "--json"});
  INFO(settled.err);
  CHECK(settled.exit_code == 0);
  CHECK(json_lines(settled.out) == events);

  // Without --follow: the same log as JSON Lines, and as the local home has it.
  auto once = on_server(*srv, {"events", id, "--json"});
  CHECK(once.exit_code == 0);
  CHECK(json_lines(once.out) == events);
  CHECK(json_lines(run_canopy(home.path, {"events", id, "--json"}).out) == events);
  // Human lines are labelled like local ones.
  auto human = on_server(*srv, {"events", id});
  CHECK(human.exit_code == 0);
  CHECK(human.out == run_canopy(home.path, {"events", id}).out);
  CHECK_THAT(human.out, Catch::Contains("streamed/child"));

  CHECK(on_server(*srv, {"events", id, "--follow"}, bob).exit_code == 4);
  CHECK(on_server(*srv, {"events", id, "--follow"}, "wrong").exit_code == 2);
}

TEST_CASE("events --server --follow reconnects after the server restarts and misses nothing",
          "[integration][cli][server]") {
  temp_dir home;
  temp_dir files;
  auto gate = files.path + "/gate";
  auto first = serve_on(home.path);
  auto port = first->port();
  auto id = start_on(*first, gated_graph("restarted", gate));

  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home.path, "events",      id,    "--follow",
               "--json",        "--server", url_of(*first), "--token", alice};
  auto follow = canopy::core::subprocess::start(opts);
  REQUIRE(follow);
  REQUIRE(wait_for_output(*follow, [](const std::string& out) {
    return has_event(out, "step.started", "gate");
  }));
  // The server dies mid-stream. A new one on the same home and port finds
  // the tree interrupted: the follower reconnects from its last seq, gets
  // the events the new server wrote, and ends with the tree.
  first->kill();
  touch(gate); // an orphan would end here (the guardian killed the step)
  auto second = serve_on(home.path, {"--listen", "127.0.0.1:" + std::to_string(port)});
  REQUIRE(wait_exit(*follow, 120s));
  INFO(follow->err().data << second->log());
  CHECK(follow->exit_code() == 0);
  auto events = json_lines(follow->out().data);
  check_gapless_log(events, id, "execution.stopped");
  CHECK(events.back()["reason"] == "interrupted");
  // Nothing was printed twice.
  std::set<uint64_t> seqs;
  for (auto& e : events)
    CHECK(seqs.insert(e["seq"].get<uint64_t>()).second);
  CHECK(json_lines(run_canopy(home.path, {"events", id, "--json"}).out) == events);
}

TEST_CASE("serve takes its user from $CANOPY_TOKEN when the config has none",
          "[integration][cli][server]") {
  temp_dir home;
  scoped_env token{"CANOPY_TOKEN", "env-token"};
  server_process::options opts;
  opts.home = home.path;
  opts.config = {{"users", nullptr}}; // merge patch: no users in the file
  server_process srv{opts};
  auto r = run_canopy(home.path, {"ls", "--json", "--server", url_of(srv)});
  CHECK(r.exit_code == 0);
  CHECK(r.out_json() == json::array());
  CHECK(run_canopy_env(home.path, {"ls", "--server", url_of(srv)}, {{"CANOPY_TOKEN", "other"}})
          .exit_code
        == 2);
}
