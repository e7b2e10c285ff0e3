// Tests of the process watch (actors/process/process_watch.hpp) with a real actor
// system and real processes: the watch alone drives a subprocess to its end.

#include "actors/process/process_watch.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/process/subprocess.hpp"
#include "persistence/error.hpp"
#include "tests/actors/system_fixture.hpp"

using namespace canopy::core;
using canopy::core::test::system_fixture;
using namespace std::chrono_literals;

namespace {

subprocess start_ok(std::vector<std::string> argv) {
  subprocess_options opts;
  opts.argv = std::move(argv);
  auto p = subprocess::start(opts);
  if (!p)
    FAIL("start failed: " << message_of(p.error()));
  return std::move(*p);
}

/// Waits up to `limit` for a `poll_atom`. @returns whether one came.
bool woken(caf::scoped_actor& self, std::chrono::milliseconds limit) {
  bool got = false;
  self->receive([&](poll_atom) { got = true; }, caf::after(limit) >> [] {});
  return got;
}

} // namespace

TEST_CASE("a watch wakes its actor for output and for the leader's exit, once per arm",
          "[actors][subprocess]") {
  system_fixture f;
  caf::scoped_actor self{*f.sys};
  // Quiet, then a line, quiet again, then the exit: each step must wake the
  // actor, and nothing may wake it while it is not re-armed.
  auto p = start_ok({"sh", "-c", "sleep 0.2; echo hi; sleep 0.2; exit 3"});
  std::vector<std::string> lines;
  auto on_line = [&](int, const std::string& line) { lines.push_back(line); };
  process_watch watch;
  REQUIRE(watch.start(self->address(), p));
  CHECK(watch.active());
  int wakes = 0;
  while (!p.done()) {
    REQUIRE(woken(self, 10s));
    ++wakes;
    if (p.poll(on_line))
      break;
    watch.rearm();
  }
  watch.stop();
  CHECK_FALSE(watch.active());
  CHECK(wakes >= 2); // the line, the exit (an EOF may come on its own)
  CHECK(lines == std::vector<std::string>{"hi"});
  CHECK(p.exit_code() == 3);
  CHECK_FALSE(woken(self, 100ms));
}

TEST_CASE("a stopped watch wakes nobody", "[actors][subprocess]") {
  system_fixture f;
  caf::scoped_actor self{*f.sys};
  // Silent for a second: nothing is ready before the watch stops.
  auto p = start_ok({"sh", "-c", "sleep 1; echo hi"});
  {
    process_watch watch;
    REQUIRE(watch.start(self->address(), p));
    watch.stop();
  }
  CHECK_FALSE(woken(self, 1500ms));
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!p.poll() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  CHECK(p.done());
}
