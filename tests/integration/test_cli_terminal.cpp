// `canopy run` on a terminal, driven through a pseudo-terminal of a given
// size (pty_session.hpp) and read back as a screen: the live tree fits the
// window, Ctrl-C is answered at once, a failed step's stderr is shown; the
// same for `run --server` against a real `canopy serve`.

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/pty_session.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// A run step that ignores SIGINT, writes its pid to `pid_file`, prints
/// `ready` and runs until killed; its grace periods are a minute each.
json stubborn_step(const std::string& pid_file) {
  return {{"run",
           {"sh", "-c",
            "trap '' INT; echo $$ > '" + pid_file
              + "'; echo ready; while :; do sleep 0.05; done"}},
          {"grace", {{"interrupt", "60s"}, {"terminate", "60s"}}}};
}

/// The id of the only root execution of `home`.
std::string only_root(const std::string& home) {
  auto ls = run_canopy(home, {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  auto rows = ls.out_json();
  REQUIRE(rows.size() == 1);
  return rows[0]["id"].get<std::string>();
}

/// How many lines of `lines` start with `prefix`.
size_t count_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  size_t n = 0;
  for (auto& l : lines)
    n += l.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

/// True when a line of `s`'s screen is exactly `line`.
bool on_screen(const screen_model& s, const std::string& line) {
  for (auto& l : s.lines())
    if (l == line)
      return true;
  return false;
}

/// True when a line of `s`'s screen holds `text`.
bool screen_has(const screen_model& s, const std::string& text) {
  for (auto& l : s.lines())
    if (l.find(text) != std::string::npos)
      return true;
  return false;
}

/// The environment of a canopy run on a pty: in a ThreadSanitizer run its
/// reports go to files in `dir` (the pty would mix them into the screen),
/// which `echo_tsan_reports` shows.
std::map<std::string, std::string> pty_env(const std::string& dir) {
  std::map<std::string, std::string> env;
  add_tsan_log_path(env, dir);
  return env;
}

/// The seconds of the countdown on the screen's line that starts with
/// `prefix` (`└─ t stopping  SIGINT sent · SIGTERM in `), else -1.
int countdown(const screen_model& s, const std::string& prefix) {
  for (auto& l : s.lines())
    if (l.rfind(prefix, 0) == 0) {
      size_t i = prefix.size(), digits = 0;
      while (i + digits < l.size() && std::isdigit(static_cast<unsigned char>(l[i + digits])))
        ++digits;
      if (digits == 0 || digits > 3 || i + digits >= l.size() || l[i + digits] != 's')
        return -1;
      return std::stoi(l.substr(i, digits));
    }
  return -1;
}

std::string screen_text(pty_session& p) {
  std::string text;
  p.with_screen([&](const screen_model& s) {
    for (auto& l : s.transcript())
      text += l + "\n";
  });
  return text;
}

/// Sends Ctrl-C to `run` and waits for the notice on its screen; reports
/// the latency (`what` names the case) and checks it against a loose bound
/// (the issue asks 200 ms; a timed bound in a test only catches a hang).
void ctrl_c_says_stopping(pty_session& run, const std::string& what) {
  auto t0 = std::chrono::steady_clock::now();
  run.send("\x03");
  REQUIRE(run.wait_for([](const std::string&, const screen_model& s) {
    return on_screen(s, "stopping… (Ctrl-C again to force)");
  }, 10s));
  auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - t0)
                   .count();
  WARN("Ctrl-C to `stopping…` on the screen" << what << ": " << latency << " ms");
  CHECK(latency < 2000 * slow_build);
}

/// After a forced stop of execution `id` of the stubborn graph: the final
/// tree replaced the live frame, with one header and no notice left.
void final_screen_is_the_stopped_tree(pty_session& run, const std::string& id) {
  run.with_screen([&](const screen_model& s) {
    CHECK(s.unknown().empty());
    CHECK(s.scrolled_at_last_erase() == 0);
    auto lines = s.transcript();
    CHECK(count_starting(lines, "stubborn " + id) == 1);
    CHECK(count_starting(lines, "stubborn " + id + " stopped (requested)") == 1);
    CHECK(count_starting(lines, "stopping…") == 0);
    CHECK(count_starting(lines, "forcing stop…") == 0);
    CHECK(count_starting(lines, "stopped (requested): " + id) == 1);
  });
}

} // namespace

TEST_CASE("the live tree of a 45-step graph fits an 80x20 terminal, and the final screen holds "
          "one whole tree",
          "[integration][cli]") {
  temp_dir home, g;
  // 15 layers of 3 steps, each layer needing the one before; one step of
  // each layer a subprocess that prints a line.
  json steps = json::object();
  for (int layer = 0; layer < 15; ++layer)
    for (int j = 0; j < 3; ++j) {
      json s = j == 0 ? json{{"run", {"sh", "-c", "echo layer " + std::to_string(layer) + "; sleep 0.05"}}}
                      : json{{"fn", "sleep"}, {"with", {{"ms", 60}}}};
      if (layer > 0)
        for (int k = 0; k < 3; ++k)
          s["needs"].push_back("s" + std::to_string(layer - 1) + "_" + std::to_string(k));
      steps["s" + std::to_string(layer) + "_" + std::to_string(j)] = s;
    }
  auto file = g.write("wide45.json", json{{"name", "wide45"}, {"steps", steps}}.dump());
  pty_session run({canopy_binary(), "--home", home.path, "run", file}, 20, 80, pty_env(g.path));
  REQUIRE(run.wait_exit(120s));
  echo_tsan_reports("canopy run on a pty", g.path);
  auto text = screen_text(run);
  INFO(text);
  REQUIRE(run.exit_code() == 0);
  auto id = only_root(home.path);
  run.with_screen([&](const screen_model& s) {
    // Only what the model interprets was written.
    CHECK(s.unknown().empty());
    // Live frames were drawn over one another...
    CHECK(s.cursor_ups() >= 3);
    // ...and none scrolled a line off the screen: every line that scrolled
    // did so after the last erase, in the final output.
    CHECK(s.scrolled_at_last_erase() == 0);
    CHECK(s.scrolled() > 0); // the final tree is taller than the window
    auto lines = s.transcript();
    // One tree: one header of the root, each step once.
    CHECK(count_starting(lines, "wide45 " + id + " completed") == 1);
    for (auto step : {"s0_0", "s7_1", "s14_2"}) {
      CHECK(count_starting(lines, std::string{"├─ "} + step + " completed")
              + count_starting(lines, std::string{"└─ "} + step + " completed")
            == 1);
    }
    CHECK(count_starting(lines, "completed: " + id) == 1);
  });
  // While it ran, completed steps were folded into one line.
  auto out = run.output();
  auto tick = out.find("✓");
  REQUIRE(tick != std::string::npos);
  auto rest = out.substr(tick + std::string{"✓"}.size(), 40);
  if (rest.rfind("\033[0m", 0) == 0)
    rest = rest.substr(4);
  CHECK_THAT(rest, Catch::Matches(" [0-9]+ completed[\\s\\S]*"));
}

TEST_CASE("Ctrl-C on a run whose step ignores SIGINT says stopping at once on the screen, and a "
          "second Ctrl-C forces the stop",
          "[integration][cli]") {
  temp_dir home, g;
  auto pid_file = g.path + "/t.pid";
  auto file = g.write("stubborn.json",
                      json{{"name", "stubborn"}, {"steps", {{"t", stubborn_step(pid_file)}}}}.dump());
  pty_session run({canopy_binary(), "--home", home.path, "run", file}, 20, 80, pty_env(g.path));
  REQUIRE(run.wait_for([](const std::string&, const screen_model& s) {
    return screen_has(s, "─ t running  ready");
  }));
  auto pid = wait_pid_file(pid_file);
  REQUIRE(pid > 0);

  ctrl_c_says_stopping(run, "");
  CHECK(!process_gone(pid)); // the step still runs

  // The escalation as it happens: the execution and its step are stopping,
  // the step's line says SIGINT was sent and counts down to SIGTERM, and
  // the step, ignoring SIGINT, still runs.
  auto id = only_root(home.path);
  const std::string signal_line = "└─ t stopping  SIGINT sent · SIGTERM in ";
  int first = -1;
  REQUIRE(run.wait_for([&](const std::string&, const screen_model& s) {
    first = countdown(s, signal_line);
    return screen_has(s, "stubborn " + id + " stopping") && first >= 0
           && on_screen(s, "stopping… (Ctrl-C again to force)");
  }, 30s));
  CHECK(first <= 60);
  CHECK(first > 30);
  // A second later the frame shows one second less, with no event.
  REQUIRE(run.wait_for([&](const std::string&, const screen_model& s) {
    auto n = countdown(s, signal_line);
    return n >= 0 && n < first;
  }, 10s));
  CHECK(!process_gone(pid));

  run.send("\x03");
  REQUIRE(run.wait_exit(60s));
  echo_tsan_reports("canopy run on a pty", g.path);
  auto text = screen_text(run);
  INFO(text);
  CHECK(run.exit_code() == 3);
  CHECK_THAT(run.output(), Catch::Contains("forcing stop…"));
  CHECK(eventually([&] { return process_gone(pid); }, 10s));
  final_screen_is_the_stopped_tree(run, id);
  run.with_screen([&](const screen_model& s) {
    CHECK(count_starting(s.transcript(), "└─ t pending") == 1);
  });
  CHECK_THAT(run.output(),
             Catch::Contains("resume with: canopy --home " + home.path + " resume " + id));
}

TEST_CASE("run shows the last stderr lines of a failed step under it, on a terminal and on a "
          "pipe",
          "[integration][cli]") {
  temp_dir home, g;
  auto file = g.write("demo.json", R"({"name": "demo", "steps": {
    "ok": {"fn": "noop"},
    "boom": {"run": ["sh", "-c", "echo to stdout; for i in 1 2 3 4 5 6 7; do echo err line $i >&2; done; exit 7"],
             "needs": ["ok"]}}})");

  SECTION("on a terminal: under the step in the final tree") {
    pty_session run({canopy_binary(), "--home", home.path, "run", file}, 30, 100,
                    pty_env(g.path));
    REQUIRE(run.wait_exit(60s));
    echo_tsan_reports("canopy run on a pty", g.path);
    auto text = screen_text(run);
    INFO(text);
    CHECK(run.exit_code() == 1);
    run.with_screen([&](const screen_model& s) {
      CHECK(s.unknown().empty());
      auto lines = s.transcript();
      auto at = std::find(lines.begin(), lines.end(), "└─ boom failed");
      REQUIRE(at != lines.end());
      REQUIRE(lines.end() - at > 5);
      for (int i = 1; i <= 5; ++i)
        CHECK(at[i] == "     stderr: err line " + std::to_string(i + 2));
      CHECK(at[6].find("stderr:") == std::string::npos);
      CHECK(text.find("err line 2") == std::string::npos); // only the last five
    });
  }

  SECTION("on a pipe: after the error") {
    auto r = run_canopy(home.path, {"run", file});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.out, Catch::Contains("error: ") && Catch::Contains("exit code 7\n"
                                                                    "demo/boom stderr:\n"
                                                                    "  err line 3\n"
                                                                    "  err line 4\n"
                                                                    "  err line 5\n"
                                                                    "  err line 6\n"
                                                                    "  err line 7\n"));
  }
}

TEST_CASE("Ctrl-C on run --server whose step ignores SIGINT says stopping at once on the "
          "screen, and a second Ctrl-C forces the stop on the server",
          "[integration][cli][server]") {
  server_process::options opts;
  opts.config = {{"allow_inline_commands", true}};
  server_process srv{std::move(opts)};
  temp_dir cli, g;
  auto pid_file = g.path + "/t.pid";
  auto file = g.write("stubborn.json",
                      json{{"name", "stubborn"}, {"steps", {{"t", stubborn_step(pid_file)}}}}.dump());
  pty_session run({canopy_binary(), "--home", cli.path, "run", file, "--server", srv.url(),
                   "--token", alice_token},
                  20, 80, pty_env(g.path));
  REQUIRE(run.wait_for([](const std::string&, const screen_model& s) {
    return screen_has(s, "─ t running  ready");
  }));
  auto pid = wait_pid_file(pid_file);
  REQUIRE(pid > 0);
  auto c = srv.client(alice_token);
  auto listed = get_json(c, "/v1/executions");
  REQUIRE(listed.body["items"].size() == 1);
  auto id = listed.body["items"][0]["id"].get<std::string>();

  ctrl_c_says_stopping(run, " (--server)");
  // The stop reached the server: the execution and its step are stopping
  // there, shown from the server's stream, while the step still runs.
  REQUIRE(run.wait_for([&](const std::string&, const screen_model& s) {
    return screen_has(s, "stubborn " + id + " stopping")
           && countdown(s, "└─ t stopping  SIGINT sent · SIGTERM in ") >= 0
           && on_screen(s, "stopping… (Ctrl-C again to force)");
  }, 30s));
  CHECK(get_json(c, "/v1/executions/" + id).body["status"] == "stopping");
  CHECK(!process_gone(pid));

  run.send("\x03");
  REQUIRE(run.wait_exit(60s));
  echo_tsan_reports("canopy run --server on a pty", g.path);
  auto text = screen_text(run);
  INFO(text << srv.log());
  CHECK(run.exit_code() == 3);
  CHECK_THAT(run.output(), Catch::Contains("forcing stop…"));
  CHECK(eventually([&] { return process_gone(pid); }, 10s));
  CHECK(get_json(c, "/v1/executions/" + id).body["status"] == "stopped");
  final_screen_is_the_stopped_tree(run, id);
  CHECK_THAT(run.output(),
             Catch::Contains("resume with: canopy resume " + id + " --server " + srv.url()));
  // Nothing was written to the local home.
  CHECK(!has_store(cli.path));
}
