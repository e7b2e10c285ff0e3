// The race harness in the suite: its judge on made-up observations (it must
// see each kind of violation), then a few real trials of canopy processes
// racing for one tree (bench_races runs them for as long as asked). The
// seed is fixed; CANOPY_RACE_SEED overrides it, and a failing trial prints
// its own seed and the command that replays it.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/reliability/race_check.hpp"
#include "tests/reliability/race_trial.hpp"

using namespace canopy::core::test;
using json = nlohmann::json;

namespace {

constexpr int64_t t0 = 1'800'000'000'000; ///< ms since the epoch of the made-up trial

json event(uint64_t seq, int64_t ms, const std::string& type, const std::string& step = {},
           const std::string& reason = {}) {
  json e = {{"seq", seq}, {"time", "2027-01-15T08:00:00.000Z"}, {"type", type},
            {"execution_id", "r"}, {"root_id", "r"}};
  // Times relative to t0 (2027-01-15T08:00:00Z).
  auto s = ms / 1000, frac = ms % 1000;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "2027-01-15T08:%02lld:%02lld.%03lldZ",
                static_cast<long long>(s / 60), static_cast<long long>(s % 60),
                static_cast<long long>(frac));
  e["time"] = buf;
  if (!step.empty())
    e["step"] = step;
  if (!reason.empty())
    e["reason"] = reason;
  return e;
}

/// A clean trial: `run` (pid 10, alive 0..1000 ms after t0) starts the tree,
/// runs `a` and completes.
race_observations clean() {
  race_observations o;
  o.root = "r";
  o.processes = {{"run", 10, t0 - 5, t0 + 1000, 0, 0, 0, false, ""}};
  o.claims = {{0, t0 - 5}};
  o.events = {event(1, 0, "execution.queued"), event(2, 10, "execution.started"),
              event(3, 20, "step.started", "a"), event(4, 200, "step.completed", "a"),
              event(5, 210, "execution.completed")};
  o.final_doc = {{"id", "r"}, {"status", "completed"},
                 {"steps", {{"a", {{"status", "completed"}}}}}, {"children", json::array()}};
  o.side_lines = {{"a", {ms_of(o.events[2]["time"]) + 5}}};
  o.reads = {{"SSE from the start", 0, {o.events[0], o.events[1]}},
             {"SSE after 2", 2, {o.events[2], o.events[3], o.events[4]}}};
  o.http = {{"GET /v1/executions/r", 200, t0, 12, false, true, ""}};
  return o;
}

size_t count_kind(const std::vector<race_violation>& v, const std::string& kind) {
  size_t n = 0;
  for (auto& x : v)
    n += x.kind == kind;
  return n;
}

uint64_t seed() {
  auto* env = std::getenv("CANOPY_RACE_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20261127;
}

} // namespace

TEST_CASE("the race judge passes a clean trial and finds interrupted live owners, re-runs, "
          "reads unlike the log and unhandled stops",
          "[reliability]") {
  auto o = clean();
  REQUIRE(ms_of(o.events[1]["time"]) == t0 + 10);
  CHECK(judge_race(o).empty());

  SECTION("a reader marks the live run's execution interrupted") {
    o.events.pop_back();
    o.events.push_back(event(5, 300, "step.pending", "b", "interrupted"));
    o.events.push_back(event(6, 300, "execution.stopped", {}, "interrupted"));
    o.final_doc["status"] = "stopped";
    auto v = judge_race(o);
    CHECK(count_kind(v, "live owner interrupted") == 2);
    // Its owner exiting on its own just after (because of it) changes nothing.
    o.processes[0].ended_ms = t0 + 320;
    CHECK(count_kind(judge_race(o), "live owner interrupted") == 2);
    // Once its owner is dead, the same events are recovery, not a violation;
    // so they are once the harness killed it, reaped or not.
    o.processes[0].ended_ms = t0 + 250;
    CHECK(count_kind(judge_race(o), "live owner interrupted") == 0);
    o.processes[0].ended_ms = t0 + 1000;
    o.processes[0].signalled = SIGKILL;
    o.processes[0].signalled_ms = t0 + 280;
    CHECK(count_kind(judge_race(o), "live owner interrupted") == 0);
    o.processes[0].signalled_ms = t0 + 400;
    CHECK(count_kind(judge_race(o), "live owner interrupted") == 2);
    o.processes[0].signalled = 0;
    o.processes[0].signalled_ms = 0;
    // And when another process claimed the run and died, nobody is blamed.
    o.processes[0].ended_ms = t0 + 1000;
    o.processes.push_back({"resume", 11, t0, t0 + 100, 137, SIGKILL, t0 + 90, false, ""});
    o.claims.push_back({1, t0});
    CHECK(count_kind(judge_race(o), "live owner interrupted") == 0);
  }
  SECTION("a side-file line written after the step completed is a re-run") {
    o.side_lines["a"].push_back(ms_of(o.events[3]["time"]) + 40);
    CHECK(count_kind(judge_race(o), "re-run") == 1);
  }
  SECTION("a read that is not a contiguous run of the final log") {
    o.reads.push_back({"SSE skipping seq 2", 0, {o.events[0], o.events[2]}});
    o.reads.push_back({"SSE past the end", 3, {o.events[3], o.events[4], event(6, 300, "x")}});
    CHECK(count_kind(judge_race(o), "reads") == 2);
  }
  SECTION("a stop request never handled, a child not completed") {
    o.events.push_back(event(6, 300, "stop.requested"));
    o.events.back()["data"] = {{"stop_id", "s1"}};
    o.final_doc["children"] = {{{"id", "c"}, {"status", "stopped"}, {"steps", json::object()}}};
    auto v = judge_race(o);
    CHECK(count_kind(v, "stop not handled") == 1);
    CHECK(count_kind(v, "not completed") == 1);
  }
  SECTION("slow, 5xx and unanswered requests, unsent signals and orphans") {
    o.http.push_back({"POST /stop", 503, t0, 10, false, true, ""}); // allowed
    o.http.push_back({"POST /stop", 500, t0, 10, false, true, ""});
    o.http.push_back({"GET /tree", 200, t0, 31'000, false, true, ""});
    o.http.push_back({"GET /x", 0, t0, 5, false, true, "Connection"});
    o.http.push_back({"GET /y", 0, t0, 5, true, false, "Connection"}); // the server was killed
    o.processes.push_back({"serve", 12, t0, t0 + 900, 134, 0, 0, false, "abort"});
    o.orphans = {"pid 99: sleep 30"};
    auto v = judge_race(o);
    CHECK(count_kind(v, "http") == 3);
    CHECK(count_kind(v, "crash") == 2); // SIGABRT, and a serve that exited unasked
    CHECK(count_kind(v, "orphans") == 1);
  }
  SECTION("the event log's own invariants") {
    std::swap(o.events[2], o.events[3]);
    CHECK(count_kind(judge_race(o), "event log") >= 1);
  }
}

TEST_CASE("canopy run, resume, serve, stops, readers and signals racing for one tree keep its "
          "event log, its owner, its steps and its stops consistent",
          "[reliability][integration]") {
  auto s = seed();
  WARN("race harness seed " << s << " (CANOPY_RACE_SEED)");
  // 6 trials of 4 to 8 actions: about a minute on 2 cores.
  for (uint64_t i = 0; i < 6; ++i) {
    race_options opts;
    opts.seed = s + i;
    opts.min_actions = 4;
    opts.max_actions = 8;
    auto r = run_race_trial(opts);
    INFO(r.report());
    CHECK(r.ok());
  }
}
