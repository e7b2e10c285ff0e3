// The reliability harness in the suite: the judge on made-up
// observations (it must see each kind of violation), then a few real crash
// trials of `canopy run` and `canopy serve` (bench_crash runs thousands).
// The seed is fixed; CANOPY_CRASH_SEED overrides it, and a failure prints it.

#include <signal.h>

#include <cstdlib>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "actors/process/subprocess.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/reliability/crash_check.hpp"
#include "tests/reliability/crash_trial.hpp"

using namespace canopy::core::test;
using json = nlohmann::json;

namespace {

/// Observations of a clean trial: a → b, both run steps, completed once
/// each, `a` completed at the one kill.
trial_observations clean() {
  trial_observations o;
  o.needs = {{"a", {}}, {"b", {"a"}}};
  o.run_steps = {"a", "b"};
  o.final_doc = {{"status", "completed"},
                 {"outputs", {{"b", "b\n"}}},
                 {"steps",
                  {{"a", {{"status", "completed"}, {"attempt", 1}}},
                   {"b", {{"status", "completed"}, {"attempt", 1}}}}}};
  o.events = {{{"seq", 1}, {"type", "step.started"}, {"step", "a"}},
              {{"seq", 2}, {"type", "step.completed"}, {"step", "a"}},
              {{"seq", 3}, {"type", "step.started"}, {"step", "b"}},
              {{"seq", 4}, {"type", "step.completed"}, {"step", "b"}}};
  o.log = parse_log("begin a 10\nend a 10\nbegin b 11\nend b 11\n");
  auto at_kill = o.final_doc;
  at_kill["steps"]["b"]["status"] = "pending";
  o.snapshots = {snapshot_of(at_kill, {o.events[0], o.events[1]},
                             parse_log("begin a 10\nend a 10\n"))};
  o.reference_outputs = {{"b", "b\n"}};
  return o;
}

uint64_t seed() {
  auto* env = std::getenv("CANOPY_CRASH_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20261123;
}

} // namespace

TEST_CASE("the crash judge passes a clean trial and counts re-runs, out-of-order starts and "
          "wrong endings",
          "[reliability]") {
  auto o = clean();
  REQUIRE(o.snapshots.at(0).size() == 1); // only `a`: b was not done at the kill
  CHECK(judge(o).ok());

  SECTION("a step completed at a kill that starts again is a re-run") {
    o.log = parse_log("begin a 10\nend a 10\nbegin b 11\nbegin a 12\nend a 12\nend b 11\n");
    auto v = judge(o);
    CHECK(v.reruns == 1);
    CHECK_FALSE(v.ok());
  }
  SECTION("a higher attempt of a completed step is a re-run, even without a log line") {
    o.run_steps = {};
    o.final_doc["steps"]["a"]["attempt"] = 2;
    CHECK(judge(o).reruns == 1);
  }
  SECTION("a step that starts before what it needs completed breaks the order") {
    o.log = parse_log("begin a 10\nbegin b 11\nend a 10\nend b 11\n");
    CHECK(judge(o).order_violations == 1);
    o = clean();
    o.events[2]["seq"] = 0; // b started before a's completion event
    CHECK(judge(o).order_violations == 1);
  }
  SECTION("a wrong output or a step left pending is an incomplete trial") {
    o.final_doc["outputs"]["b"] = "c\n";
    CHECK(judge(o).incomplete == 1);
    o = clean();
    o.final_doc["steps"]["b"]["status"] = "pending";
    CHECK(judge(o).incomplete >= 1);
  }
  SECTION("an event log that breaks its invariants is a log violation") {
    o.events.push_back({{"seq", 5}, {"type", "stop.handled"}, {"data", {{"stop_id", "x"}}}});
    CHECK(judge(o).log_violations == 1);
    CHECK_FALSE(judge(o).ok());
  }
  SECTION("a line cut short by a SIGKILL counts as neither a start nor an end") {
    CHECK(parse_log("begin a 10\nbeg\nend a\nend a 10 x\n").size() == 1);
  }
}

TEST_CASE("canopy run and canopy serve SIGKILLed at random moments resume without re-running "
          "completed steps, out of order, orphans or an unreadable store",
          "[reliability][integration]") {
  auto s = seed();
  std::mt19937_64 rng{s};
  crash_workload w;
  WARN("crash loop seed " << s << " (CANOPY_CRASH_SEED), reference run "
                          << w.reference_duration().count() << " ms");
  size_t kills = 0;
  int trial = 0;
  // 16 trials, the two modes alternating: about 15 s on 2 cores.
  for (int i = 0; i < 16; ++i) {
    auto mode = i % 2 == 0 ? crash_mode::run : crash_mode::serve;
    trial_options opts;
    opts.mode = mode;
    opts.label = std::to_string(trial);
    auto r = run_trial(w, opts, rng);
    std::string notes;
    for (auto& n : r.verdict.notes)
      notes += "\n  " + n;
    INFO("seed " << s << ", trial " << trial << " (" << to_string(mode) << "), " << r.kills
                 << " kills, " << r.completed_at_kill << " steps completed at kills" << notes);
    CHECK(r.verdict.reruns == 0);
    CHECK(r.verdict.order_violations == 0);
    CHECK(r.verdict.incomplete == 0);
    CHECK(r.orphans == 0);
    CHECK(r.store_failures == 0);
    kills += r.kills;
    ++trial;
  }
  // A trial may finish before its first kill; in a TSan build more do.
  CHECK(kills >= (slow_build > 1 ? 4u : 8u));
}

TEST_CASE("the orphan check finds a process by the mark in its environment, also in a group of "
          "its own, and not once it is gone",
          "[reliability]") {
  canopy::core::subprocess_options opts;
  // The shell starts `sleep` in a new session: another process group, as a
  // step's is, and no longer a child of the shell's group.
  opts.argv = {"sh", "-c", "setsid sleep 30 & echo $!; wait"};
  opts.env = {{"CANOPY_CRASH_MARK", "orphan-check-1"}};
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  REQUIRE(wait_for_output(*p, [](const std::string& out) { return out.find('\n') != std::string::npos; }));
  auto child = std::stol(p->out().data);
  REQUIRE(eventually([&] { return pgid_of(child) == child; })); // setsid() done
  // ... and its exec of `sleep`: while a process execs, /proc/PID/environ
  // reads empty, and the orphan check would miss it.
  auto comm = "/proc/" + std::to_string(child) + "/comm";
  REQUIRE(eventually([&] { return read_file(comm) == "sleep\n"; }));
  REQUIRE(eventually([&] { return marked_processes("orphan-check-1").size() == 2; }));
  CHECK(marked_processes("orphan-check").empty()); // an exact mark by default
  CHECK(marked_processes("orphan-check", true).size() == 2);
  p->signal_group(SIGKILL); // the shell's group: the setsid child survives it
  REQUIRE(wait_exit(*p));
  auto left = marked_processes("orphan-check-1");
  REQUIRE(left.size() == 1);
  CHECK(left[0] == child);
  ::kill(static_cast<pid_t>(child), SIGKILL);
  CHECK(eventually([&] { return marked_processes("orphan-check-1").empty(); }));
}
