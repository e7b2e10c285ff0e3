// `canopy logs`: the stored output of steps, from a local home
// and from a server, whole or one step, one stream, the last lines, and
// followed live. Real processes throughout: `canopy` subprocesses on a real
// store in a temp folder, real subprocess steps, a real `canopy serve`.
// Every wait is an event wait (an output line, an exit, a status), never a
// sleep: the steps that run long wait for a gate file the test creates.

#include <sstream>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// The lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

/// The lines of `text` that start with `prefix`, without it.
std::vector<std::string> with_prefix(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  for (auto& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0)
      out.push_back(l.substr(prefix.size()));
  return out;
}

/// Those of `lines` that start with `c`.
std::vector<std::string> starting_with(const std::vector<std::string>& lines, char c) {
  std::vector<std::string> out;
  for (auto& l : lines)
    if (!l.empty() && l[0] == c)
      out.push_back(l);
  return out;
}

using strings = std::vector<std::string>;

/// Steps that write to stdout, stderr or both, and a child execution whose
/// step writes too. `both` writes its streams through two pipes, so only the
/// order within each stream is fixed.
json talky_graph() {
  return json::parse(R"({"name": "talky", "steps": {
    "prep": {"run": ["sh", "-c", "echo p1; echo p2; echo p3"]},
    "warn": {"run": ["sh", "-c", "echo w1 >&2; echo w2 >&2"], "needs": ["prep"]},
    "both": {"run": ["sh", "-c", "echo o1; echo e1 >&2; echo o2; echo e2 >&2"],
             "needs": ["prep"]},
    "sub": {"graph": {"steps": {"inner": {"run": ["sh", "-c", "echo i1; echo i2"]}}},
            "needs": ["prep"]}}})");
}

/// A shell loop that waits for `gate` to exist (at most 60 s, then exit 9).
std::string wait_for_gate(const std::string& gate) {
  return "i=0; while [ ! -e '" + gate + "' ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 9; "
         "sleep 0.01; done";
}

/// `talk` prints a line, waits for `gate1`, prints another and ends; `after`
/// then waits for `gate2` and prints `done`.
json gated_talk(const std::string& gate1, const std::string& gate2) {
  json g = {{"name", "slow"}, {"steps", json::object()}};
  g["steps"]["talk"] = {{"run", {"sh", "-c", "echo first; " + wait_for_gate(gate1)
                                               + "; echo second"}}};
  g["steps"]["after"] = {{"run", {"sh", "-c", wait_for_gate(gate2) + "; echo done"}},
                         {"needs", {"talk"}}};
  return g;
}

/// Starts `canopy --home HOME ARGS...` without waiting for it.
canopy::core::subprocess start_canopy(const std::string& home, const std::vector<std::string>& args) {
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  return std::move(*p);
}

/// The status of execution `id` on the local home ("" when unreadable).
std::string status_of(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  return r.exit_code == 0 ? r.out_json().value("status", "") : "";
}

/// A `canopy serve` on `home` that allows inline commands.
std::unique_ptr<server_process> serve_on(const std::string& home) {
  server_process::options opts;
  opts.home = home;
  opts.config = {{"allow_inline_commands", true}};
  return std::make_unique<server_process>(std::move(opts));
}

/// Registers `graph` and starts it over the API. @returns the execution id.
std::string start_on(const server_process& srv, const json& graph) {
  auto c = srv.client(alice_token);
  auto reg = post_json(c, "/v1/graphs", graph);
  INFO(reg.text);
  REQUIRE(reg.status == 201);
  auto run = post_json(c, "/v1/graphs/" + graph["name"].get<std::string>() + "/executions",
                       {{"inputs", json::object()}});
  INFO(run.text);
  REQUIRE(run.status == 201);
  return run.body["id"].get<std::string>();
}

/// `canopy --home HOME ARGS... --server URL --token alice's`.
proc_result on_server(const server_process& srv, std::vector<std::string> args) {
  args.insert(args.end(), {"--server", srv.url(), "--token", alice_token});
  return run_canopy(srv.home(), args, 120s);
}

} // namespace

TEST_CASE("canopy logs prints the stored output of every step, of one step, of one stream "
          "and its last lines",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto file = files.write("talky.json", talky_graph().dump());
  REQUIRE(run_canopy(home.path, {"run", file}).exit_code == 0);
  auto id = run_canopy(home.path, {"ls", "--json"}).out_json()[0]["id"].get<std::string>();

  // Every step of the tree, each line labelled with its step's path.
  auto all = run_canopy(home.path, {"logs", id});
  REQUIRE(all.exit_code == 0);
  INFO(all.out);
  CHECK(lines_of(all.out).size() == 11);
  CHECK(with_prefix(all.out, "prep | ") == strings{"p1", "p2", "p3"});
  CHECK(with_prefix(all.out, "warn | ") == strings{"w1", "w2"});
  auto both = with_prefix(all.out, "both | ");
  CHECK(starting_with(both, 'o') == strings{"o1", "o2"});
  CHECK(starting_with(both, 'e') == strings{"e1", "e2"});
  CHECK(with_prefix(all.out, "sub/inner | ") == strings{"i1", "i2"});
  // `prep` ran before the others: its lines come first.
  CHECK(lines_of(all.out)[0] == "prep | p1");

  // One step: its lines as they are.
  CHECK(run_canopy(home.path, {"logs", id, "prep"}).out == "p1\np2\np3\n");
  // One stream.
  auto err = run_canopy(home.path, {"logs", id, "both", "--stderr"});
  CHECK(err.exit_code == 0);
  CHECK(err.out == "e1\ne2\n");
  CHECK(run_canopy(home.path, {"logs", id, "both", "--stdout"}).out == "o1\no2\n");
  CHECK(run_canopy(home.path, {"logs", id, "--stderr"}).out.find("| o") == std::string::npos);
  // The last lines.
  CHECK(run_canopy(home.path, {"logs", id, "prep", "--tail", "2"}).out == "p2\np3\n");
  CHECK(run_canopy(home.path, {"logs", id, "prep", "--tail", "0"}).out.empty());
  CHECK(run_canopy(home.path, {"logs", id, "prep", "--tail", "10"}).out == "p1\np2\np3\n");
  auto last = run_canopy(home.path, {"logs", id, "--tail", "2"});
  auto all_lines = lines_of(all.out);
  CHECK(lines_of(last.out) == strings(all_lines.end() - 2, all_lines.end()));

  // A child's step by the path of steps that leads to it, raw; the step that
  // runs the child gives the child's lines, labelled.
  CHECK(run_canopy(home.path, {"logs", id, "sub/inner"}).out == "i1\ni2\n");
  CHECK(run_canopy(home.path, {"logs", id, "sub"}).out == "sub/inner | i1\nsub/inner | i2\n");
  // The child execution on its own: its subtree, labelled from it.
  auto doc = run_canopy(home.path, {"show", id, "--json"}).out_json();
  REQUIRE(doc["children"].size() == 1);
  auto child = doc["children"][0]["id"].get<std::string>();
  CHECK(run_canopy(home.path, {"logs", child}).out == "inner | i1\ninner | i2\n");
}

TEST_CASE("canopy logs names an unknown step with the closest one, and rejects bad options "
          "with exit 2",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto file = files.write("talky.json", talky_graph().dump());
  REQUIRE(run_canopy(home.path, {"run", file}).exit_code == 0);
  auto id = run_canopy(home.path, {"ls", "--json"}).out_json()[0]["id"].get<std::string>();

  auto typo = run_canopy(home.path, {"logs", id, "perp"});
  CHECK(typo.exit_code == 4);
  CHECK(typo.out.empty());
  CHECK_THAT(typo.err, Catch::Contains("has no step 'perp'; did you mean 'prep'?"));
  auto nested = run_canopy(home.path, {"logs", id, "sub/iner"});
  CHECK(nested.exit_code == 4);
  CHECK_THAT(nested.err, Catch::Contains("no step 'iner'; did you mean 'inner'?"));
  auto far = run_canopy(home.path, {"logs", id, "zzzzzzzz"});
  CHECK(far.exit_code == 4);
  CHECK_THAT(far.err, Catch::Contains("no step 'zzzzzzzz'"));
  CHECK_THAT(far.err, !Catch::Contains("did you mean"));
  auto no_child = run_canopy(home.path, {"logs", id, "prep/x"});
  CHECK(no_child.exit_code == 4);
  CHECK_THAT(no_child.err, Catch::Contains("step 'prep'"));
  CHECK_THAT(no_child.err, Catch::Contains("has no child execution"));

  CHECK(run_canopy(home.path, {"logs", "01nosuchexecution000000000"}).exit_code == 4);
  for (auto args : {strings{"logs", id, "--tail", "-1"}, strings{"logs", id, "--tail", "x"},
                    strings{"logs", id, "--stdout", "--stderr"}, strings{"logs"}}) {
    auto r = run_canopy(home.path, args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains("error: "));
  }
  CHECK_THAT(run_canopy(home.path, {"logs", id, "--tail", "-1"}).err,
             Catch::Contains("--tail: '-1': expected a whole number of lines"));
}

TEST_CASE("canopy logs --follow streams a running step's lines and ends when that step ends",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto gate1 = files.path + "/gate1";
  auto gate2 = files.path + "/gate2";
  auto file = files.write("slow.json", gated_talk(gate1, gate2).dump());
  auto started = run_canopy(home.path, {"run", file, "--detach", "--json"}, 30s);
  REQUIRE(started.exit_code == 0);
  auto id = started.out_json()["id"].get<std::string>();

  auto step = start_canopy(home.path, {"logs", id, "talk", "--follow"});
  REQUIRE(wait_for_output(step, [](const std::string& out) { return out == "first\n"; }));
  // While it runs, `show` and `ls` give how long it has run so far.
  auto shown = run_canopy(home.path, {"show", id});
  INFO(shown.out);
  CHECK_THAT(shown.out, Catch::Matches("(.|\n)*\n├─ talk +running +[0-9:-]+ +[0-9][0-9a-z.]*s\n(.|\n)*"));
  auto listed = run_canopy(home.path, {"ls"});
  INFO(listed.out);
  CHECK_THAT(listed.out, Catch::Matches("(.|\n)*\n" + id + " +slow +running +- +[0-9]+s ago +[0-9][0-9a-z.]*s\n(.|\n)*"));

  touch(gate1);
  REQUIRE(wait_exit(step));
  CHECK(step.exit_code() == 0);
  CHECK(step.out().data == "first\nsecond\n");
  // It ended with its step: the tree is still running (`after` waits).
  CHECK(status_of(home.path, id) == "running");

  // The whole tree, from its last line so far, until the tree ends.
  auto tree = start_canopy(home.path, {"logs", id, "--follow", "--tail", "1"});
  REQUIRE(wait_for_output(tree, [](const std::string& out) { return out == "talk | second\n"; }));
  touch(gate2);
  REQUIRE(wait_exit(tree));
  CHECK(tree.exit_code() == 0);
  CHECK(tree.out().data == "talk | second\nafter | done\n");
  CHECK(status_of(home.path, id) == "completed");
  // A settled step is printed and not waited for.
  auto done = run_canopy(home.path, {"logs", id, "after", "--follow"}, 30s);
  CHECK(done.exit_code == 0);
  CHECK(done.out == "done\n");
}

TEST_CASE("canopy logs --server prints what local logs prints and follows a step over the "
          "event stream",
          "[integration][cli][server]") {
  temp_dir home;
  temp_dir files;
  auto srv = serve_on(home.path);
  auto done = start_on(*srv, talky_graph());
  auto c = srv->client(alice_token);
  REQUIRE(wait_status(c, done, "completed")["status"] == "completed");

  // The same lines as the local home gives (read while the server holds it).
  for (auto args : {strings{"logs", done}, strings{"logs", done, "prep"},
                    strings{"logs", done, "both", "--stderr"}, strings{"logs", done, "sub"},
                    strings{"logs", done, "--tail", "3"}}) {
    INFO(args[args.size() - 1]);
    auto remote = on_server(*srv, args);
    CHECK(remote.exit_code == 0);
    auto local = run_canopy(srv->home(), args);
    CHECK(local.exit_code == 0);
    CHECK(remote.out == local.out);
    CHECK(!remote.out.empty());
  }
  CHECK(on_server(*srv, {"logs", done, "prep"}).out == "p1\np2\np3\n");
  auto typo = on_server(*srv, {"logs", done, "perp"});
  CHECK(typo.exit_code == 4);
  CHECK_THAT(typo.err, Catch::Contains("did you mean 'prep'?"));
  CHECK(on_server(*srv, {"logs", "01nosuchexecution000000000"}).exit_code == 4);

  // Following a running step over SSE: it ends with the step.
  auto gate1 = files.path + "/gate1";
  auto gate2 = files.path + "/gate2";
  auto live = start_on(*srv, gated_talk(gate1, gate2));
  auto follow = start_canopy(srv->home(), {"logs", live, "talk", "--follow", "--server",
                                           srv->url(), "--token", alice_token});
  REQUIRE(wait_for_output(follow, [](const std::string& out) { return out == "first\n"; }));
  touch(gate1);
  REQUIRE(wait_exit(follow));
  CHECK(follow.exit_code() == 0);
  CHECK(follow.out().data == "first\nsecond\n");
  CHECK(wait_status(c, live, "running")["status"] == "running");
  touch(gate2);
  CHECK(wait_status(c, live, "completed")["status"] == "completed");
}
