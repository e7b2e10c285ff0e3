// The guardian seen from outside: a real `canopy run` on a real store,
// SIGKILLed while a step runs, must leave no step process behind (our rule:
// no host is left running orphaned steps). Every wait is an event wait (a
// file that appears, a process that disappears) with a generous deadline.

#include <dirent.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

/// The deadline of every wait below.
constexpr auto deadline_after = 20s;

/// Polls `p` (so its output pipes never fill) until `pred` holds (true) or
/// the deadline passes or `p` exits (false).
template <class Pred>
bool wait_while_running(canopy::core::subprocess& p, Pred pred) {
  auto deadline = clock_type::now() + deadline_after;
  for (;;) {
    bool exited = p.poll();
    if (pred())
      return true;
    if (exited || clock_type::now() > deadline)
      return false;
    std::this_thread::sleep_for(2ms);
  }
}

/// The pid written to `file` (complete: written by `mv`), or 0.
long pid_in(const std::string& file) {
  std::ifstream in{file};
  long pid = 0;
  in >> pid;
  return in ? pid : 0;
}

/// The pid of the `canopy-guard` child of `parent`, or 0.
long guardian_of(long parent) {
  long found = 0;
  DIR* d = ::opendir("/proc");
  if (d == nullptr)
    return 0;
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0')
      continue;
    std::ifstream in{std::string{"/proc/"} + e->d_name + "/stat"};
    std::string stat;
    if (!in || !std::getline(in, stat))
      continue;
    auto open = stat.find('(');
    auto close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos)
      continue;
    auto comm = stat.substr(open + 1, close - open - 1);
    std::istringstream fields{stat.substr(close + 1)};
    std::string state;
    long ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent && comm == "canopy-guard") {
      found = pid;
      break;
    }
  }
  ::closedir(d);
  return found;
}

/// Starts `canopy --home HOME run FILE` in the foreground of its own group.
canopy::core::subprocess start_run(const std::string& home, const std::string& file) {
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home, "run", file};
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  return std::move(*p);
}

} // namespace

TEST_CASE("a SIGKILLed canopy run leaves no step process behind",
          "[integration][guardian][crash]") {
  temp_dir home;
  temp_dir g;
  auto step_file = g.path + "/step.pid";
  auto bg_file = g.path + "/background.pid";
  // The step's shell has a background child, then becomes a long sleep.
  auto script = "sleep 600 & echo $! > '" + bg_file + ".tmp' && mv '" + bg_file + ".tmp' '"
                + bg_file + "'; echo $$ > '" + step_file + ".tmp' && mv '" + step_file
                + ".tmp' '" + step_file + "'; exec sleep 600";
  auto file = g.write("long.json",
                      json{{"steps", {{"long", {{"run", {"sh", "-c", script}}}}}}}.dump());
  auto p = start_run(home.path, file);
  REQUIRE(wait_while_running(p, [&] { return pid_in(step_file) > 0 && pid_in(bg_file) > 0; }));
  auto step = pid_in(step_file);
  auto background = pid_in(bg_file);
  REQUIRE_FALSE(process_gone(step));
  REQUIRE_FALSE(process_gone(background));
  long guard = 0;
  REQUIRE(eventually([&] { return (guard = guardian_of(p.pid())) > 0; }, deadline_after));
  // Only the canopy process: not its group, not the step's.
  REQUIRE(::kill(p.pid(), SIGKILL) == 0);
  REQUIRE(wait_exit(p, 30s));
  CHECK(p.term_signal() == SIGKILL);
  CHECK(eventually([&] { return process_gone(step); }, deadline_after));
  CHECK(eventually([&] { return process_gone(background); }, deadline_after));
  CHECK(eventually([&] { return process_gone(guard); }, deadline_after));
  // Clean up whatever a failure above left.
  ::kill(static_cast<pid_t>(-step), SIGKILL);
}

TEST_CASE("the guardian of a canopy run that finishes exits with it",
          "[integration][guardian]") {
  temp_dir home;
  temp_dir g;
  auto step_file = g.path + "/step.pid";
  auto go_file = g.path + "/go";
  // The step waits for the test to have seen the guardian.
  auto script = "echo $$ > '" + step_file + ".tmp' && mv '" + step_file + ".tmp' '" + step_file
                + "'; while [ ! -e '" + go_file + "' ]; do sleep 0.01; done";
  auto file = g.write("wait.json",
                      json{{"steps", {{"wait", {{"run", {"sh", "-c", script}}}}}}}.dump());
  auto p = start_run(home.path, file);
  REQUIRE(wait_while_running(p, [&] { return pid_in(step_file) > 0; }));
  long guard = 0;
  REQUIRE(eventually([&] { return (guard = guardian_of(p.pid())) > 0; }, deadline_after));
  g.write("go", "");
  REQUIRE(wait_exit(p, 60s));
  CHECK(p.exit_code() == 0);
  CHECK(eventually([&] { return process_gone(guard); }, deadline_after));
}
