// Acceptance tests: cascading stop and resume, limits and recovery. Real
// `canopy` processes on a real store in a temp home per test, real
// subprocess steps. Every wait is an event wait (an output line, an
// exit, a down, a process that disappears) with a generous deadline, never a
// sleep; the one exception is the deadline test, where wall-clock time passing
// while the execution is stopped is the scenario itself.

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "persistence/error.hpp"
#include "runtime/node/runtime.hpp"
#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"

using canopy::core::event_type;
using canopy::core::step_reason;
using canopy::core::stop_result;

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

namespace fs = std::filesystem;

using clock_type = std::chrono::steady_clock;

std::string fixture(const std::string& name) {
  return source_dir() + "/tests/fixtures/" + name;
}

long elapsed_ms(clock_type::time_point since) {
  return static_cast<long>(
    std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - since).count());
}

/// Milliseconds since the epoch on the wall clock (what event times use).
int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}


size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = 0; (pos = hay.find(needle, pos)) != std::string::npos; pos += needle.size())
    ++n;
  return n;
}

/// Starts `canopy --home HOME ARGS...` in the background (its own process
/// group; its steps run in groups of their own), with `env` merged over
/// this process's environment (its steps inherit it).
canopy::core::subprocess start_canopy(const std::string& home, const std::vector<std::string>& args,
                                std::map<std::string, std::string> env = {}) {
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  opts.env = std::move(env);
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  return std::move(*p);
}

/// Waits until the output of `p` contains `needle` at least `n` times.
bool wait_for_count(canopy::core::subprocess& p, const std::string& needle, size_t n = 1,
                    std::chrono::seconds timeout = 60s) {
  return wait_for_output(
    p, [&](const std::string& out) { return count_of(out, needle) >= n; }, timeout);
}

/// The id of the only root execution of `home` (`ls --json`).
std::string only_root(const std::string& home) {
  auto r = run_canopy(home, {"ls", "--json"});
  REQUIRE(r.exit_code == 0);
  auto list = r.out_json();
  REQUIRE(list.is_array());
  REQUIRE(list.size() == 1);
  return list[0]["id"].get<std::string>();
}

json show(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  INFO("show stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  REQUIRE(doc.is_object());
  return doc;
}

/// `events ID --json`: one event per line.
std::vector<json> events(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"events", id, "--json"});
  REQUIRE(r.exit_code == 0);
  std::vector<json> out;
  std::istringstream in{r.out};
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(json::parse(line));
  return out;
}

size_t count_events(const std::vector<json>& evs, const std::string& type,
                    const std::string& execution_id = {}) {
  return static_cast<size_t>(std::count_if(evs.begin(), evs.end(), [&](const json& e) {
    return e["type"] == type && (execution_id.empty() || e["execution_id"] == execution_id);
  }));
}

/// Every recorded step pid (a process group id) of the tree.
std::vector<long> tree_pids(const json& doc) {
  std::vector<long> out;
  for_each_execution(doc, [&](const json& e) {
    for (auto& kv : e["steps"].items())
      if (kv.value().contains("pid"))
        out.push_back(kv.value()["pid"].get<long>());
  });
  return out;
}

/// Waits (up to `timeout`: a SIGKILLed process takes a moment to disappear)
/// until process `pid` is gone and no live member of process group `pid`
/// remains. Zombies count as gone, as in `process_gone`: a grandchild killed
/// with its group is reparented to PID 1, which reaps it on its own schedule
/// (kill(-pgid, 0) keeps succeeding until then).
/// @returns true when both hold.
bool wait_group_gone(long pid, std::chrono::milliseconds timeout = 2000ms) {
  auto deadline = clock_type::now() + timeout;
  for (;;) {
    bool gone = process_gone(pid) && !group_alive(pid);
    if (gone || clock_type::now() > deadline)
      return gone;
    std::this_thread::sleep_for(2ms);
  }
}

/// Lines of the side-effect log, counted.
std::map<std::string, int> log_counts(const std::string& path) {
  std::map<std::string, int> out;
  std::istringstream in{read_file(path)};
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      ++out[line];
  return out;
}

/// A trapping step: ignores SIGINT and SIGTERM, leaves a grandchild (which
/// inherits the ignored signals) whose pid it writes to `gc_pid`, prints
/// "ready", and never ends on its own.
json trapping_step(const std::string& gc_pid, const std::string& interrupt,
                   const std::string& terminate) {
  return {{"run",
           {"sh", "-c",
            "trap '' INT TERM; sleep 1000 & echo $! > '" + gc_pid
              + "'; echo ready; while :; do sleep 1; done"}},
          {"grace", {{"interrupt", interrupt}, {"terminate", terminate}}}};
}

/// The `step.signalled` events of `evs`, as `SIGNAL>NEXT@NEXT_IN_MS` (`-`
/// for null), in log order.
std::vector<std::string> signals_of(const std::vector<json>& evs) {
  std::vector<std::string> out;
  for (auto& e : evs) {
    if (e["type"] != "step.signalled")
      continue;
    auto& d = e["data"];
    out.push_back(d["signal"].get<std::string>() + ">"
                  + (d["next"].is_null() ? "-" : d["next"].get<std::string>()) + "@"
                  + (d["next_in_ms"].is_null() ? "-" : d["next_in_ms"].dump()));
  }
  return out;
}

/// The types of `evs` after the first of type `from`, in log order.
std::vector<std::string> types_from(const std::vector<json>& evs, const std::string& from) {
  std::vector<std::string> out;
  bool on = false;
  for (auto& e : evs) {
    on = on || e["type"] == from;
    if (on)
      out.push_back(e["type"].get<std::string>());
  }
  return out;
}

long read_pid(const std::string& path) {
  auto text = read_file(path);
  REQUIRE(!text.empty());
  return std::stol(text);
}

} // namespace

// -- 1. stop from another process, resume, exactly once --------------------------------

TEST_CASE("a stop from another process halts the whole agent team and resume finishes it "
          "with every step body run exactly once",
          "[integration][stop]") {
  temp_dir ref_home, home, logs;
  auto team = fixture("stop/team/team.json");
  auto ref_log = logs.path + "/ref.log";
  auto log = logs.path + "/stopped.log";
  const std::vector<std::string> bodies = {
    "planner",        "researcher/search", "researcher/read", "researcher/summarize",
    "analyst/search", "analyst/read",      "analyst/summarize", "critic/search",
    "critic/read",    "critic/summarize",  "merge"};

  // The reference: an uninterrupted run in another home.
  auto ref = run_canopy(ref_home.path,
                        {"run", team, "--input", "topic=stops", "--input", "log=" + ref_log, "--json"});
  REQUIRE(ref.exit_code == 0);
  auto ref_doc = ref.out_json();
  REQUIRE(ref_doc["status"] == "completed");
  REQUIRE(ref_doc["outputs"]["report"].is_object());
  for (auto& b : bodies)
    CHECK(log_counts(ref_log)[b + " done"] == 1);

  // The same graph, stopped while every reader is in the middle of its work:
  // here each reader pauses 30 s instead of 1.5 s, so that `ls` and `stop`
  // (two more processes, about a second each in a ThreadSanitizer build on
  // a loaded machine) come well inside the pause.
  auto run = start_canopy(home.path, {"run", team, "--input", "topic=stops", "--input", "log=" + log},
                          {{"READ_PAUSE", "30"}});
  REQUIRE(wait_for_count(run, "read: checking", 3));
  auto id = only_root(home.path);
  auto stop = run_canopy(home.path, {"stop", id});
  CHECK(stop.exit_code == 0);
  CHECK(stop.out == "stopped (requested)\n");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);

  auto doc = show(home.path, id);
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "requested");
  REQUIRE(doc["children"].size() == 3);

  // Every subprocess of the tree is gone, with its whole process group.
  auto pids = tree_pids(doc);
  CHECK(pids.size() >= 7); // planner, three searches, three reads
  for (auto pid : pids) {
    INFO("step process group " << pid);
    CHECK(wait_group_gone(pid));
  }

  // Statuses and reasons (runtime/docs/reference/statuses.md).
  std::map<std::string, json> completed_before; // "exec/step" → step document
  std::set<std::string> child_ids;
  size_t reset = 0;
  for_each_execution(doc, [&](const json& e) {
    bool root = e["depth"] == 0;
    INFO("execution " << e["graph"] << " " << e["id"]);
    if (!root) {
      child_ids.insert(e["id"].get<std::string>());
      CHECK(e["status"] == "stopped");
      CHECK(e["reason"] == "parent_stopped");
    }
    CHECK(e["outputs"].is_null());
    for (auto& kv : e["steps"].items()) {
      auto& s = kv.value();
      INFO("step " << kv.key() << ": " << s.dump());
      auto key = (root ? std::string{} : e["parent_step"].get<std::string>() + "/") + kv.key();
      CHECK((s["status"] == "completed" || s["status"] == "pending"));
      if (s["status"] == "completed") {
        CHECK(s["reason"].is_null());
        CHECK(s["error"].is_null());
        // value(): a const operator[] with a missing key is undefined (an
        // agent step's result has no exit_code).
        CHECK(s["result"].value("exit_code", -1) == 0);
        completed_before[key] = s;
      } else if (s["attempt"].get<int>() > 0) {
        // It was running: back to pending with the stop's reason.
        ++reset;
        CHECK(s["reason"] == (root ? "requested" : "parent_stopped"));
      } else {
        CHECK(s["reason"].is_null());
      }
    }
  });
  // The planner and the three searches had finished; the three agents (root
  // steps) and the three readers were running.
  CHECK(completed_before.size() == 4);
  CHECK(completed_before.count("planner") == 1);
  for (auto role : {"researcher", "analyst", "critic"}) {
    CHECK(completed_before.count(std::string{role} + "/search") == 1);
    CHECK(doc["steps"][role]["status"] == "pending");
    CHECK(doc["steps"][role]["reason"] == "requested");
  }
  CHECK(reset == 6);
  CHECK(doc["steps"]["merge"]["attempt"] == 0);

  // The stop request is in the log, handled.
  auto evs = events(home.path, id);
  CHECK(count_events(evs, "stop.requested") == 1);
  CHECK(count_events(evs, "stop.handled") == 1);
  CHECK(count_events(evs, "execution.stopping", id) == 1);
  CHECK(count_events(evs, "execution.stopped") == 4);

  // The bodies that were interrupted left no "done" line; the others one.
  auto before = log_counts(log);
  for (auto& kv : completed_before)
    CHECK(before[kv.first + " done"] == 1);
  CHECK(before.size() == completed_before.size());

  // Resume: completes with the reference outputs, nothing finished runs again.
  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  INFO("resume stderr: " << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto done = resumed.out_json();
  CHECK(done["status"] == "completed");
  CHECK(done["outputs"] == ref_doc["outputs"]);
  std::set<std::string> child_ids_after;
  for_each_execution(done, [&](const json& e) {
    bool root = e["depth"] == 0;
    if (!root)
      child_ids_after.insert(e["id"].get<std::string>());
    CHECK(e["status"] == "completed");
    for (auto& kv : e["steps"].items()) {
      auto key = (root ? std::string{} : e["parent_step"].get<std::string>() + "/") + kv.key();
      INFO("step " << key);
      CHECK(kv.value()["status"] == "completed");
      if (completed_before.count(key)) {
        // Untouched by the stop and by the resume.
        auto& old = completed_before[key];
        CHECK(kv.value()["attempt"] == old["attempt"]);
        CHECK(kv.value()["started_at"] == old["started_at"]);
        CHECK(kv.value()["ended_at"] == old["ended_at"]);
        CHECK(kv.value()["result"] == old["result"]);
      }
    }
  });
  // Children resumed under their existing ids.
  CHECK(child_ids_after == child_ids);
  auto all = run_canopy(home.path, {"ls", "--json", "--all"});
  CHECK(all.out_json().size() == 4);

  auto after = log_counts(log);
  for (auto& b : bodies) {
    INFO("step body " << b);
    CHECK(after[b + " done"] == 1);
  }
  CHECK(after.size() == bodies.size());
}

// -- 2. signal escalation: trapping step with a grandchild -------------------------------

TEST_CASE("a step that ignores SIGINT and SIGTERM and has a grandchild is gone after the "
          "grace periods, and at once with --force",
          "[integration][stop]") {
  temp_dir home, g;

  SECTION("graceful: SIGINT, SIGTERM after grace.interrupt, SIGKILL after grace.terminate") {
    auto gc_file = g.path + "/gc.pid";
    auto file = g.write("trap.json",
                        json{{"steps", {{"t", trapping_step(gc_file, "200ms", "200ms")}}}}.dump());
    auto run = start_canopy(home.path, {"run", file});
    REQUIRE(wait_for_count(run, "| ready"));
    auto id = only_root(home.path);
    auto leader = show(home.path, id)["steps"]["t"]["pid"].get<long>();
    auto gc = read_pid(gc_file);
    REQUIRE(!process_gone(leader));
    REQUIRE(!process_gone(gc));

    auto t0 = clock_type::now();
    auto stop = run_canopy(home.path, {"stop", id});
    auto took = elapsed_ms(t0);
    INFO("graceful stop took " << took << " ms");
    CHECK(stop.exit_code == 0);
    CHECK(stop.out == "stopped (requested)\n");
    CHECK(took >= 400); // both grace periods
    CHECK(took < 30000);
    CHECK(wait_group_gone(leader));
    CHECK(process_gone(gc));
    CHECK(wait_group_gone(gc));
    REQUIRE(wait_exit(run));
    CHECK(run.exit_code() == 3);
    auto doc = show(home.path, id);
    CHECK(doc["status"] == "stopped");
    CHECK(doc["steps"]["t"]["status"] == "pending");
    CHECK(doc["steps"]["t"]["reason"] == "requested");

    // The escalation as it happened, in the log: each signal with the next
    // one and its grace, between `stopping` and the snapshot.
    auto evs = events(home.path, id);
    CHECK(signals_of(evs)
          == std::vector<std::string>{"SIGINT>SIGTERM@200", "SIGTERM>SIGKILL@200", "SIGKILL>-@-"});
    CHECK(types_from(evs, "execution.stopping")
          == std::vector<std::string>{"execution.stopping", "step.signalled", "step.signalled",
                                      "step.signalled", "step.pending", "execution.stopped",
                                      "stop.handled"});
    for (auto& e : evs)
      if (e["type"] == "step.signalled") {
        CHECK(e["step"] == "t");
        CHECK(e["data"]["attempt"] == 1);
        CHECK(!e.contains("status")); // it changes no status
      }
    // Readable in `canopy events`.
    auto text = run_canopy(home.path, {"events", id});
    CHECK(text.exit_code == 0);
    CHECK_THAT(text.out, Catch::Contains("step.signalled      trap/t SIGINT (SIGTERM in 200ms)\n")
                           && Catch::Contains("/t SIGTERM (SIGKILL in 200ms)\n")
                           && Catch::Contains("/t SIGKILL\n"));
  }

  SECTION("force: SIGKILL at once, grace periods of 60 s skipped") {
    auto gc_file = g.path + "/gc-force.pid";
    auto file = g.write("trap-force.json",
                        json{{"steps", {{"t", trapping_step(gc_file, "60s", "60s")}}}}.dump());
    auto run = start_canopy(home.path, {"run", file});
    REQUIRE(wait_for_count(run, "| ready"));
    auto id = only_root(home.path);
    auto leader = show(home.path, id)["steps"]["t"]["pid"].get<long>();
    auto gc = read_pid(gc_file);
    REQUIRE(!process_gone(gc));

    auto t0 = clock_type::now();
    auto stop = run_canopy(home.path, {"stop", id, "--force"});
    auto took = elapsed_ms(t0);
    WARN("forced stop took " << took << " ms");
    CHECK(stop.exit_code == 0);
    CHECK(stop.out == "stopped (requested)\n");
    CHECK(took < 30000); // the grace periods alone are 120 s
    CHECK(wait_group_gone(leader, 500ms));
    CHECK(wait_group_gone(gc, 500ms));
    REQUIRE(wait_exit(run, 10s));
    CHECK(run.exit_code() == 3);
    // One signal: SIGKILL, nothing after it.
    auto evs = events(home.path, id);
    CHECK(signals_of(evs) == std::vector<std::string>{"SIGKILL>-@-"});
    CHECK(types_from(evs, "step.signalled")
          == std::vector<std::string>{"step.signalled", "step.pending", "execution.stopped",
                                      "stop.handled"});
  }
}

TEST_CASE("a step that times out and ignores SIGINT is signalled SIGINT then SIGTERM, each "
          "written as it happens, and fails with timeout",
          "[integration][stop]") {
  temp_dir home, g;
  auto file = g.write("slow.json", json{{"steps",
                                         {{"t",
                                           {{"run", {"sh", "-c", "trap '' INT; echo ready; while :; do sleep 0.05; done"}},
                                            {"timeout", "300ms"},
                                            {"grace", {{"interrupt", "300ms"}, {"terminate", "5s"}}}}}}}}
                                     .dump());
  auto r = run_canopy(home.path, {"run", file});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  auto id = only_root(home.path);
  auto evs = events(home.path, id);
  // SIGTERM ends it: no SIGKILL.
  CHECK(signals_of(evs) == std::vector<std::string>{"SIGINT>SIGTERM@300", "SIGTERM>SIGKILL@5000"});
  CHECK(types_from(evs, "step.signalled")
        == std::vector<std::string>{"step.signalled", "step.signalled", "step.failed",
                                    "execution.failed"});
  // `run` without a terminal printed them as they came.
  CHECK_THAT(r.out, Catch::Contains("/t SIGINT (SIGTERM in 300ms)\n")
                      && Catch::Contains("/t SIGTERM (SIGKILL in 5s)\n"));
  CHECK(show(home.path, id)["steps"]["t"]["error"] == "timeout");
}

// -- 3. stop racing with the creation of 200 children ------------------------------------

TEST_CASE("a stop racing with the creation of 200 child executions leaves no step started "
          "after it and every execution terminal",
          "[integration][stop]") {
  temp_dir home, g;
  json steps = json::object();
  json child = {{"steps", {{"s", {{"fn", "sleep"}, {"with", {{"ms", 60000}}}}}}}};
  for (int i = 0; i < 200; ++i)
    steps["c" + std::to_string(i)] = {{"graph", child}};
  auto file = g.write("wide.json", json{{"name", "wide"}, {"steps", steps}}.dump());

  auto run = start_canopy(home.path, {"run", file});
  // The root's own execution.queued, then the first child's.
  REQUIRE(wait_for_count(run, "execution.queued", 2));
  auto id = only_root(home.path);
  auto stop = run_canopy(home.path, {"stop", id});
  CHECK(stop.exit_code == 0);
  CHECK(stop.out == "stopped (requested)\n");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);

  auto evs = events(home.path, id);
  std::optional<uint64_t> stopping, handled;
  for (auto& e : evs) {
    if (e["type"] == "execution.stopping" && e["execution_id"] == id)
      stopping = e["seq"].get<uint64_t>();
    if (e["type"] == "stop.handled")
      handled = e["seq"].get<uint64_t>();
  }
  REQUIRE(stopping);
  REQUIRE(handled);
  size_t started = 0;
  for (auto& e : evs)
    if (e["type"] == "step.started") {
      ++started;
      INFO("event " << e.dump() << " (stopping at seq " << *stopping << ", handled at "
                    << *handled << ")");
      CHECK(e["seq"].get<uint64_t>() < *stopping);
      CHECK(e["seq"].get<uint64_t>() < *handled);
    }
  INFO(started << " steps started before the stop");

  auto doc = show(home.path, id);
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "requested");
  size_t executions = 0;
  for_each_execution(doc, [&](const json& e) {
    ++executions;
    INFO("execution " << e["id"]);
    CHECK(e["status"] == "stopped");
    if (e["depth"] != 0)
      CHECK(e["reason"] == "parent_stopped");
    for (auto& kv : e["steps"].items()) {
      CHECK(kv.value()["status"] != "running");
      CHECK(kv.value()["status"] != "queued");
    }
  });
  // Every child that was created is in the tree, and none is left live.
  CHECK(executions == count_events(evs, "execution.queued"));
  auto live = run_canopy(home.path, {"ls", "--json", "--all", "--status", "running"});
  CHECK(live.out_json() == json::array());
  auto stopping_now = run_canopy(home.path, {"ls", "--json", "--all", "--status", "stopping"});
  CHECK(stopping_now.out_json() == json::array());
}

// -- 4. crash loop --------------------------------------------------------------------

TEST_CASE("20 SIGKILLs at varied moments of a 200-step workload: resume reaches the reference "
          "outputs and no step recorded completed runs again",
          "[integration][stop]") {
  temp_dir g, ref_home;
  // 10 parallel chains of 20 steps; each step logs its name (the side effect)
  // and appends it to its predecessor's stdout, so outputs are deterministic.
  json steps = json::object(), outputs = json::object();
  for (int c = 0; c < 10; ++c)
    for (int k = 0; k < 20; ++k) {
      auto name = "c" + std::to_string(c) + "_" + std::to_string(k);
      json s = {{"run", {"sh", "-c", "echo " + name + " >> \"$LOG\"; printf '%s+" + name + "' \"$PREV\""}},
                {"env", {{"LOG", "${inputs.log}"}, {"PREV", ""}}}};
      if (k > 0) {
        auto prev = "c" + std::to_string(c) + "_" + std::to_string(k - 1);
        s["needs"] = {prev};
        s["env"]["PREV"] = "${steps." + prev + ".stdout}";
      }
      steps[name] = s;
      if (k == 19)
        outputs["chain" + std::to_string(c)] = "${steps." + name + ".stdout}";
    }
  auto file = g.write("chains.json",
                      json{{"name", "chains"}, {"inputs", {"log"}}, {"steps", steps},
                           {"outputs", outputs}}
                        .dump());

  auto ref_log = g.path + "/ref.log";
  auto ref = run_canopy(ref_home.path,
                        {"--max-parallel", "10", "run", file, "--input", "log=" + ref_log, "--json"});
  REQUIRE(ref.exit_code == 0);
  auto ref_outputs = ref.out_json()["outputs"];
  REQUIRE(ref_outputs.size() == 10);
  CHECK(ref_outputs["chain3"].get<std::string>().size() > 20);
  {
    auto counts = log_counts(ref_log);
    CHECK(counts.size() == 200);
    for (auto& kv : counts)
      CHECK(kv.second == 1);
  }

  auto t_start = clock_type::now();
  for (int trial = 0; trial < 20; ++trial) {
    size_t kill_after = static_cast<size_t>((trial * 7) % 150 + 1);
    INFO("trial " << trial << ": SIGKILL after " << kill_after << " completed steps");
    temp_dir home;
    auto log = home.path + "/side.log";
    auto run = start_canopy(home.path,
                            {"--max-parallel", "10", "run", file, "--input", "log=" + log});
    REQUIRE(wait_for_count(run, "step.completed", kill_after));
    run.signal_group(SIGKILL);
    REQUIRE(wait_exit(run));
    REQUIRE(run.term_signal() == SIGKILL);

    auto id = only_root(home.path);
    auto doc = show(home.path, id); // recovers the interrupted execution
    CHECK(doc["status"] == "stopped");
    CHECK(doc["reason"] == "interrupted");
    std::set<std::string> completed;
    for (auto& kv : doc["steps"].items()) {
      auto& s = kv.value();
      CHECK(s["status"] != "running");
      CHECK(s["status"] != "queued");
      if (s["status"] == "completed") {
        completed.insert(kv.key());
      } else if (s.contains("pid")) {
        // An orphan of the killed run: it must not write after this point.
        ::kill(-s["pid"].get<pid_t>(), SIGKILL);
        wait_group_gone(s["pid"].get<long>());
      }
    }
    CHECK(completed.size() >= kill_after);
    CHECK(completed.size() < 200);

    auto resumed = run_canopy(home.path, {"--max-parallel", "10", "resume", id, "--json"});
    INFO("resume stderr: " << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    auto done = resumed.out_json();
    CHECK(done["status"] == "completed");
    CHECK(done["outputs"] == ref_outputs);
    auto counts = log_counts(log);
    CHECK(counts.size() == 200);
    for (auto& name : completed) {
      INFO("step " << name << " was recorded completed before the kill");
      CHECK(counts[name] == 1);
      CHECK(done["steps"][name]["attempt"] == 1);
    }
    for (auto& kv : done["steps"].items())
      CHECK(kv.value()["status"] == "completed");
  }
  WARN("20 crash trials took " << elapsed_ms(t_start) << " ms");
}

// -- 5. idempotency ---------------------------------------------------------------------

TEST_CASE("stopping a completed or stopped execution answers no_execution and changes nothing",
          "[integration][stop]") {
  temp_dir home, g;

  SECTION("completed") {
    auto file = g.write("ok.json", R"({"steps": {"a": {"fn": "noop"}}})");
    auto r = run_canopy(home.path, {"run", file, "--json"});
    REQUIRE(r.exit_code == 0);
    auto id = r.out_json()["id"].get<std::string>();
    auto doc = show(home.path, id);
    auto evs = events(home.path, id);
    for (int i = 0; i < 2; ++i) {
      auto stop = run_canopy(home.path, {"stop", id});
      CHECK(stop.exit_code == 0);
      CHECK(stop.out == "no_execution\n");
      auto forced = run_canopy(home.path, {"stop", id, "--force"});
      CHECK(forced.exit_code == 0);
      CHECK(forced.out == "no_execution\n");
    }
    CHECK(show(home.path, id) == doc);
    CHECK(events(home.path, id) == evs);
  }

  SECTION("stopped") {
    auto file = g.write("sleep.json", R"({"steps": {"a": {"fn": "sleep", "with": {"ms": 60000}}}})");
    auto run = start_canopy(home.path, {"run", file});
    REQUIRE(wait_for_count(run, "step.started"));
    auto id = only_root(home.path);
    auto stop = run_canopy(home.path, {"stop", id});
    CHECK(stop.exit_code == 0);
    CHECK(stop.out == "stopped (requested)\n");
    REQUIRE(wait_exit(run));
    CHECK(run.exit_code() == 3);
    auto doc = show(home.path, id);
    auto evs = events(home.path, id);
    auto again = run_canopy(home.path, {"stop", id});
    CHECK(again.exit_code == 0);
    CHECK(again.out == "no_execution\n");
    CHECK(show(home.path, id) == doc);
    CHECK(events(home.path, id) == evs);
  }

  SECTION("unknown id") {
    auto r = run_canopy(home.path, {"stop", "01nosuchexecution000000000"});
    CHECK(r.exit_code == 4);
  }
}

TEST_CASE("a second stop while the execution is stopping is answered with the same final status",
          "[integration][stop]") {
  temp_dir home, g;
  auto file = g.write(
    "trap.json", json{{"steps", {{"t", trapping_step(g.path + "/gc.pid", "4s", "400ms")}}}}.dump());
  // The step ignores SIGINT for 4 s: the second stop below arrives while the
  // execution is still stopping, even on a loaded machine.
  auto run = start_canopy(home.path, {"run", file});
  REQUIRE(wait_for_count(run, "| ready"));
  auto id = only_root(home.path);
  auto first = start_canopy(home.path, {"stop", id});
  REQUIRE(wait_for_count(run, "execution.stopping"));
  CHECK(show(home.path, id)["status"] == "stopping");
  auto second = run_canopy(home.path, {"stop", id});
  CHECK(second.exit_code == 0);
  CHECK(second.out == "stopped (requested)\n");
  REQUIRE(wait_exit(first));
  CHECK(first.exit_code() == 0);
  CHECK(first.out().data == "stopped (requested)\n");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);
  auto evs = events(home.path, id);
  CHECK(count_events(evs, "stop.requested") == 2);
  CHECK(count_events(evs, "stop.handled") == 2);
  CHECK(count_events(evs, "execution.stopping") == 1);
  CHECK(count_events(evs, "execution.stopped") == 1);
  auto doc = show(home.path, id);
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "requested");
}

// -- 6. stop of a queued execution --------------------------------------------------------

TEST_CASE("a queued execution stopped through the library ends stopped before any step starts",
          "[integration][stop]") {
  temp_dir dir;
  canopy::core::runtime_options opts;
  opts.home = dir.path + "/home";
  auto parse = [&](canopy::core::runtime& rt, const json& doc) {
    auto r = canopy::core::parse_graph(doc, dir.path, rt.graph_options());
    REQUIRE(r);
    return r.value;
  };
  const json work = {{"steps",
                      {{"a", {{"fn", "noop"}}},
                       {"b", {{"run", {"sh", "-c", "echo hi"}}}},
                       {"c", {{"fn", "sleep"}, {"with", {{"ms", 60000}}}}}}}};
  // The stopped execution: stopped/requested, one execution.stopped, and
  // not one step ever started.
  auto check_never_ran = [](canopy::core::runtime& rt, const canopy::core::execution_handle& h) {
    REQUIRE(h.wait_for(canopy::core::millis{30'000}));
    auto rec = h.status();
    REQUIRE(rec);
    CHECK(rec->status == canopy::core::execution_status::stopped);
    CHECK(rec->reason == step_reason::requested);
    auto evs = checked_tree_events(*rt.db(), h.id());
    std::vector<std::string> types;
    for (auto& e : evs)
      types.push_back(to_string(e.type));
    INFO("events: " << json(types).dump());
    CHECK(std::count(types.begin(), types.end(), "step.started") == 0);
    CHECK(std::count(types.begin(), types.end(), "execution.started") == 0);
    CHECK(std::count(types.begin(), types.end(), "execution.stopped") == 1);
    auto steps = rt.db()->steps(h.id());
    REQUIRE(steps);
    for (auto& s : *steps) {
      INFO("step " << s.step);
      CHECK(s.status == canopy::core::step_status::pending);
      CHECK(s.attempt == 0);
    }
  };

  SECTION("waiting for admission (max_running 1)") {
    opts.max_running = 1;
    auto rt = canopy::core::runtime::open(opts);
    REQUIRE(rt);
    auto first = (*rt)->start(parse(**rt, work), json::object());
    REQUIRE(first);
    // The first execution holds the only admission slot once it runs.
    auto deadline = clock_type::now() + 30s;
    while (first->status()->status != canopy::core::execution_status::running
           && clock_type::now() < deadline)
      std::this_thread::sleep_for(2ms);
    REQUIRE(first->status()->status == canopy::core::execution_status::running);
    auto h = (*rt)->start(parse(**rt, work), json::object());
    REQUIRE(h);
    CHECK(h->status()->status == canopy::core::execution_status::queued);
    auto req = h->stop();
    REQUIRE(req);
    CHECK(req->result != canopy::core::stop_result::no_execution);
    check_never_ran(**rt, *h);
    REQUIRE(first->stop());
    REQUIRE(first->wait_for(canopy::core::millis{30'000}));
    CHECK(first->status()->status == canopy::core::execution_status::stopped);
  }

  SECTION("stopped right after start, before its actor may have run (race, 100 trials)") {
    // Whenever the stop request was committed while the execution was still
    // queued (its stop.requested precedes execution.started in the log, or it
    // never started), no step may start.
    auto rt = canopy::core::runtime::open(opts);
    REQUIRE(rt);
    auto g = parse(**rt, work);
    size_t queued_hits = 0;
    for (int trial = 0; trial < 100; ++trial) {
      INFO("trial " << trial);
      auto h = (*rt)->start(g, json::object());
      REQUIRE(h);
      auto req = h->stop();
      REQUIRE(req);
      REQUIRE(h->wait_for(canopy::core::millis{30'000}));
      auto evs = checked_tree_events(*(*rt)->db(), h->id());
      std::optional<uint64_t> requested, started;
      std::vector<std::string> types;
      for (auto& e : evs) {
        types.push_back(to_string(e.type));
        if (e.type == event_type::stop_requested && !requested)
          requested = e.seq;
        if (e.type == event_type::execution_started && !started)
          started = e.seq;
      }
      INFO("events: " << json(types).dump());
      CHECK(h->status()->status == canopy::core::execution_status::stopped);
      if (requested && (!started || *requested < *started)) {
        ++queued_hits;
        CHECK(std::count(types.begin(), types.end(), "step.started") == 0);
      }
    }
    WARN(queued_hits << " of 100 stops reached the execution while it was queued");
  }
}

// -- 7. a lone child stop ---------------------------------------------------------------------

TEST_CASE("a child stopped on its own leaves its step pending, the parent finishes its other "
          "branches and ends stopped, and resume reuses the child",
          "[integration][stop]") {
  temp_dir home, g;
  auto go = g.path + "/go";
  auto release = g.path + "/release";
  json child = {{"name", "kid"},
                {"steps",
                 {{"long",
                   {{"run", {"sh", "-c", "echo started; [ -e '" + go + "' ] || sleep 30; echo kid-done"}}}}}},
                {"outputs", {{"text", "${steps.long.stdout}"}}}};
  json doc = {
    {"name", "lone"},
    {"steps",
     {{"kid", {{"graph", child}}},
      {"other",
       {{"run",
         {"sh", "-c",
          "echo waiting; i=0; until [ -e '" + release
            + "' ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 9; sleep 0.01; done; echo other-done"}}}},
      {"after_other", {{"fn", "echo"}, {"with", {{"v", "${steps.other.stdout}"}}}, {"needs", {"other"}}}},
      {"after_kid", {{"fn", "echo"}, {"with", {{"v", "${steps.kid.text}"}}}, {"needs", {"kid"}}}}}},
    {"outputs", {{"kid", "${steps.after_kid.v}"}, {"other", "${steps.after_other.v}"}}}};
  auto file = g.write("lone.json", doc.dump());

  auto run = start_canopy(home.path, {"run", file});
  REQUIRE(wait_for_count(run, "lone/kid/long | started"));
  REQUIRE(wait_for_count(run, "lone/other | waiting"));
  auto root = only_root(home.path);
  auto tree = show(home.path, root);
  REQUIRE(tree["children"].size() == 1);
  auto kid = tree["children"][0]["id"].get<std::string>();

  auto stop = run_canopy(home.path, {"stop", kid});
  CHECK(stop.exit_code == 0);
  CHECK(stop.out == "stopped (requested)\n");
  REQUIRE(wait_for_count(run, "child_stopped"));

  // The root is still running its other branch.
  tree = show(home.path, root);
  CHECK(tree["status"] == "running");
  CHECK(tree["steps"]["kid"]["status"] == "pending");
  CHECK(tree["steps"]["kid"]["reason"] == "child_stopped");
  CHECK(tree["steps"]["other"]["status"] == "running");
  auto& k = tree["children"][0];
  CHECK(k["status"] == "stopped");
  CHECK(k["reason"] == "requested");
  CHECK(k["steps"]["long"]["status"] == "pending");
  if (k["steps"]["long"].contains("pid"))
    CHECK(wait_group_gone(k["steps"]["long"]["pid"].get<long>()));

  g.write("release", "");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);
  tree = show(home.path, root);
  CHECK(tree["status"] == "stopped");
  CHECK(tree["reason"] == "child_stopped");
  CHECK(tree["steps"]["other"]["status"] == "completed");
  CHECK(tree["steps"]["after_other"]["status"] == "completed");
  CHECK(tree["steps"]["kid"]["status"] == "pending");
  CHECK(tree["steps"]["kid"]["reason"] == "child_stopped");
  CHECK(tree["steps"]["after_kid"]["attempt"] == 0);

  g.write("go", "");
  auto resumed = run_canopy(home.path, {"resume", root, "--json"});
  INFO("resume stderr: " << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto done = resumed.out_json();
  CHECK(done["status"] == "completed");
  CHECK(done["outputs"]["kid"] == "started\nkid-done\n");
  CHECK(done["outputs"]["other"] == "waiting\nother-done\n");
  REQUIRE(done["children"].size() == 1);
  CHECK(done["children"][0]["id"] == kid);
  CHECK(done["children"][0]["status"] == "completed");
  CHECK(done["steps"]["kid"]["child_id"] == kid);
  CHECK(run_canopy(home.path, {"ls", "--json", "--all"}).out_json().size() == 2);
}

// -- 8. sibling_failed ---------------------------------------------------------------------

TEST_CASE("a failing step stops its running sibling subprocess and sibling child execution "
          "with sibling_failed",
          "[integration][stop]") {
  temp_dir home, g;
  auto sib_ready = g.path + "/sib.ready";
  auto kid_ready = g.path + "/kid.ready";
  json child = {{"name", "kid"},
                {"steps", {{"w", {{"run", {"sh", "-c", "touch '" + kid_ready + "'; exec sleep 30"}}}}}}};
  json doc = {
    {"name", "siblings"},
    {"steps",
     {{"bad",
       {{"run",
         {"sh", "-c",
          "i=0; until [ -e '" + sib_ready + "' ] && [ -e '" + kid_ready
            + "' ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 9; sleep 0.01; done; echo broken >&2; exit 5"}}}},
      {"sib", {{"run", {"sh", "-c", "touch '" + sib_ready + "'; exec sleep 30"}}}},
      {"kid", {{"graph", child}}}}}};
  auto file = g.write("siblings.json", doc.dump());

  auto t0 = clock_type::now();
  auto r = run_canopy(home.path, {"run", file, "--json"});
  INFO("run took " << elapsed_ms(t0) << " ms; stderr: " << r.err);
  CHECK(r.exit_code == 1);
  auto out = r.out_json();
  REQUIRE(out.is_object());
  auto id = out["id"].get<std::string>();
  auto tree = show(home.path, id);
  CHECK(tree["status"] == "failed");
  CHECK(tree["reason"] == "step_failed");
  CHECK(tree["steps"]["bad"]["status"] == "failed");
  CHECK(tree["steps"]["bad"]["error"] == "exit code 5");
  CHECK(tree["steps"]["sib"]["status"] == "pending");
  CHECK(tree["steps"]["sib"]["reason"] == "sibling_failed");
  CHECK(tree["steps"]["kid"]["status"] == "pending");
  CHECK(tree["steps"]["kid"]["reason"] == "sibling_failed");
  REQUIRE(tree["children"].size() == 1);
  auto& k = tree["children"][0];
  CHECK(k["status"] == "stopped");
  CHECK(k["reason"] == "sibling_failed");
  CHECK(k["steps"]["w"]["status"] == "pending");
  CHECK(k["steps"]["w"]["reason"] == "sibling_failed");
  REQUIRE(tree["steps"]["sib"].contains("pid"));
  CHECK(wait_group_gone(tree["steps"]["sib"]["pid"].get<long>()));
  REQUIRE(k["steps"]["w"].contains("pid"));
  CHECK(wait_group_gone(k["steps"]["w"]["pid"].get<long>()));
}

// -- 9. limits -----------------------------------------------------------------------------

TEST_CASE("max_steps stops the tree after exactly that many started steps",
          "[integration][stop]") {
  temp_dir home, g;
  json steps = json::object();
  for (int i = 0; i < 5; ++i) {
    json s = {{"fn", "echo"}, {"with", {{"i", i}}}};
    if (i > 0)
      s["needs"] = {"s" + std::to_string(i - 1)};
    steps["s" + std::to_string(i)] = s;
  }
  auto file = g.write("steps.json", json{{"limits", {{"max_steps", 3}}}, {"steps", steps}}.dump());
  auto r = run_canopy(home.path, {"run", file, "--json"});
  CHECK(r.exit_code == 3);
  auto doc = r.out_json();
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "max_steps");
  auto evs = events(home.path, doc["id"].get<std::string>());
  CHECK(count_events(evs, "step.started") == 3);
  CHECK(count_events(evs, "step.completed") == 3);
  for (int i = 0; i < 5; ++i)
    CHECK(doc["steps"]["s" + std::to_string(i)]["status"] == (i < 3 ? "completed" : "pending"));
  CHECK(doc["steps"]["s3"]["attempt"] == 0);
}

TEST_CASE("a budget stops the tree before the step that would pass it, and resume --budget raises "
          "it and spent cost persists",
          "[integration][stop]") {
  temp_dir home, g;
  auto chain = [&](const std::string& name, double budget) {
    json steps = json::object();
    for (int i = 0; i < 5; ++i) {
      json s = {{"fn", "noop"}, {"cost", 1}};
      if (i > 0)
        s["needs"] = {"s" + std::to_string(i - 1)};
      steps["s" + std::to_string(i)] = s;
    }
    return g.write(name, json{{"limits", {{"budget", budget}}}, {"steps", steps}}.dump());
  };
  auto completed = [](const json& doc) {
    size_t n = 0;
    for (auto& kv : doc["steps"].items())
      n += kv.value()["status"] == "completed";
    return n;
  };

  SECTION("budget 2, then resume --budget 10") {
    auto r = run_canopy(home.path, {"run", chain("b2.json", 2), "--json"});
    CHECK(r.exit_code == 3);
    auto doc = r.out_json();
    auto id = doc["id"].get<std::string>();
    CHECK(doc["status"] == "stopped");
    CHECK(doc["reason"] == "budget_exceeded");
    CHECK(completed(doc) == 2);
    CHECK(doc["steps"]["s2"]["attempt"] == 0);
    auto resumed = run_canopy(home.path, {"resume", id, "--budget", "10", "--json"});
    CHECK(resumed.exit_code == 0);
    CHECK(resumed.out_json()["status"] == "completed");
    CHECK(count_events(events(home.path, id), "step.started") == 5);
  }

  SECTION("budget 3, resume --budget 4 runs one more step, spent cost is kept") {
    auto r = run_canopy(home.path, {"run", chain("b3.json", 3), "--json"});
    CHECK(r.exit_code == 3);
    auto doc = r.out_json();
    auto id = doc["id"].get<std::string>();
    CHECK(doc["reason"] == "budget_exceeded");
    CHECK(completed(doc) == 3);
    auto again = run_canopy(home.path, {"resume", id, "--budget", "4", "--json"});
    CHECK(again.exit_code == 3);
    auto d2 = again.out_json();
    CHECK(d2["status"] == "stopped");
    CHECK(d2["reason"] == "budget_exceeded");
    CHECK(completed(d2) == 4);
    // Without --budget the raised budget (4) is spent: nothing more runs.
    auto same = run_canopy(home.path, {"resume", id, "--json"});
    CHECK(same.exit_code == 3);
    CHECK(same.out_json()["reason"] == "budget_exceeded");
    CHECK(completed(same.out_json()) == 4);
    auto last = run_canopy(home.path, {"resume", id, "--budget", "5", "--json"});
    CHECK(last.exit_code == 0);
    CHECK(last.out_json()["status"] == "completed");
    CHECK(count_events(events(home.path, id), "step.started") == 5);
  }
}

TEST_CASE("a deadline stops the tree quickly with reason deadline", "[integration][stop]") {
  temp_dir home, g;
  auto file = g.write("deadline.json", R"({"limits": {"deadline": "300ms"},
    "steps": {"a": {"fn": "sleep", "with": {"ms": 60000}}}})");
  auto t0 = clock_type::now();
  auto r = run_canopy(home.path, {"run", file, "--json"});
  auto took = elapsed_ms(t0);
  INFO("run took " << took << " ms");
  CHECK(r.exit_code == 3);
  auto doc = r.out_json();
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "deadline");
  CHECK(doc["steps"]["a"]["status"] == "pending");
  CHECK(doc["steps"]["a"]["reason"] == "deadline");
  CHECK(took >= 300);
  CHECK(took < 30000 * slow_build); // the sleep alone is 60 s
}

TEST_CASE("the deadline clock counts running time only and persists across resume",
          "[integration][stop]") {
  temp_dir home, g;
  // The stop (`ls` and `stop`, two processes) must land before the deadline.
  const int deadline_ms = 3000 * slow_build; // room for two CLI processes on a loaded CI machine
  auto file = g.write("deadline.json", R"({"limits": {"deadline": ")"
                                         + std::to_string(deadline_ms) + R"(ms"},
    "steps": {"a": {"fn": "sleep", "with": {"ms": 400}},
              "b": {"fn": "sleep", "with": {"ms": 60000}, "needs": ["a"]}}})");
  auto run = start_canopy(home.path, {"run", file});
  REQUIRE(wait_for_count(run, "/a completed"));
  auto id = only_root(home.path);
  auto stop = run_canopy(home.path, {"stop", id});
  CHECK(stop.out == "stopped (requested)\n");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);
  // Stopped time must not count: let more wall-clock time pass than the
  // whole deadline.
  std::this_thread::sleep_for(std::chrono::milliseconds{deadline_ms + 100});
  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  CHECK(resumed.exit_code == 3);
  auto doc = resumed.out_json();
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "deadline");
  auto evs = events(home.path, id);
  int64_t started = 0, stopped1 = 0, resumed_at = 0, stopping2 = 0;
  for (auto& e : evs) {
    if (e["execution_id"] != id)
      continue;
    if (e["type"] == "execution.started")
      started = ms_of(e["time"]);
    else if (e["type"] == "execution.stopped" && stopped1 == 0)
      stopped1 = ms_of(e["time"]);
    else if (e["type"] == "execution.resumed")
      resumed_at = ms_of(e["time"]);
    else if (e["type"] == "execution.stopping" && e["reason"] == "deadline")
      stopping2 = ms_of(e["time"]);
  }
  REQUIRE(started != 0);
  REQUIRE(stopped1 != 0);
  REQUIRE(resumed_at != 0);
  REQUIRE(stopping2 != 0);
  auto first = stopped1 - started, second = stopping2 - resumed_at;
  WARN("ran " << first << " ms, stopped " << (resumed_at - stopped1) << " ms, then ran "
              << second << " ms until the deadline");
  CHECK(first >= 400);
  // The rest of the deadline, not nothing (wall clock would end it at once)
  // ... On a loaded machine the stop may land late in the first run, so the
  // rest can be short.
  CHECK(second >= 50);
  CHECK(first + second >= deadline_ms - 100);
  // ... and not a fresh deadline.
  CHECK(first + second <= deadline_ms + 400 * slow_build);
}

TEST_CASE("recursion past max_depth through nested graph files is rejected at validation",
          "[integration][stop]") {
  temp_dir home, g;
  auto root = g.write("root.json", R"({"limits": {"max_depth": 1}, "steps": {"a": {"graph": "mid.json"}}})");
  g.write("mid.json", R"({"steps": {"b": {"graph": "leaf.json"}}})");
  g.write("leaf.json", R"({"steps": {"c": {"fn": "noop"}}})");
  auto self = g.write("self.json", R"({"steps": {"a": {"graph": "self.json"}}})");
  auto r = run_canopy(home.path, {"run", root});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("max_depth"));
  r = run_canopy(home.path, {"run", self});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("includes itself"));
  CHECK(!has_store(home.path)); // nothing stored: no store was even created
}

TEST_CASE("recursion through plan steps stops the tree with max_depth", "[integration][stop]") {
  temp_dir home, g;
  // The planner prints a graph holding the same plan step: unbounded
  // recursion that validation cannot see.
  json rec = {{"steps", {{"p", {{"plan", {"sh", "-c", "cat rec.json"}}}}}}};
  g.write("rec.json", rec.dump());
  json root = rec;
  root["name"] = "recroot";
  root["limits"] = {{"max_depth", 3}};
  auto file = g.write("recroot.json", root.dump());
  REQUIRE(run_canopy(home.path, {"validate", file}).exit_code == 0);

  auto r = run_canopy(home.path, {"run", file, "--json"}, 60s);
  CHECK(r.exit_code == 3);
  auto doc = r.out_json();
  REQUIRE(doc.is_object());
  auto id = doc["id"].get<std::string>();
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "max_depth");
  CHECK(doc["steps"]["p"]["status"] == "pending");
  CHECK(doc["steps"]["p"]["reason"] == "max_depth");
  // Children down to max_depth 3 were planned and run; nothing deeper remains
  // and nothing is left live.
  int deepest = 0;
  for_each_execution(show(home.path, id), [&](const json& e) {
    INFO("execution " << e["id"] << " depth " << e["depth"]);
    deepest = std::max(deepest, e["depth"].get<int>());
    CHECK(e["status"] == "stopped");
    if (e["depth"] != 0)
      CHECK(e["reason"] == "parent_stopped");
  });
  CHECK(deepest == 3);
  auto all = run_canopy(home.path, {"ls", "--json", "--all"}).out_json();
  CHECK(all.size() == 4);
  for (auto& e : all) {
    CHECK(e["depth"].get<int>() <= 3);
    CHECK(e["status"] == "stopped");
  }
}

TEST_CASE("a plan step stopped while its graph is being created leaves no trace of that graph "
          "and returns to pending",
          "[integration][stop]") {
  temp_dir home, g;
  auto go = g.path + "/go";
  json planned = {{"name", "planned"},
                  {"steps", {{"x", {{"run", {"sh", "-c", "echo planned-ran"}}}}}},
                  {"outputs", {{"text", "${steps.x.stdout}"}}}};
  auto text = planned.dump();
  auto half = text.substr(0, text.size() / 2);
  g.write("planned.json", text);
  // The planner prints half of the graph, then pauses (until `go` exists),
  // then the rest: a stop in the pause catches the graph half created.
  // `$${` is a literal `${` in the parent graph: the references belong to the
  // planned graph.
  auto escape = [](std::string t) {
    for (size_t pos = 0; (pos = t.find("${", pos)) != std::string::npos; pos += 3)
      t.insert(pos, "$");
    return t;
  };
  auto planner = "printf '%s' '" + escape(half) + "'; echo 'planner: half way' >&2; i=0; until [ -e '" + go
                 + "' ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 9; sleep 0.01; done; printf '%s' '"
                 + escape(text.substr(half.size())) + "'";
  json doc = {{"name", "planning"},
              {"steps", {{"p", {{"plan", {"sh", "-c", planner}}}}}},
              {"outputs", {{"text", "${steps.p.text}"}}}};
  auto file = g.write("planning.json", doc.dump());

  auto run = start_canopy(home.path, {"run", file});
  REQUIRE(wait_for_count(run, "planner: half way"));
  auto id = only_root(home.path);
  auto pid = show(home.path, id)["steps"]["p"]["pid"].get<long>();
  auto stop = run_canopy(home.path, {"stop", id});
  CHECK(stop.exit_code == 0);
  CHECK(stop.out == "stopped (requested)\n");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);
  CHECK(wait_group_gone(pid));

  auto tree = show(home.path, id);
  CHECK(tree["status"] == "stopped");
  CHECK(tree["reason"] == "requested");
  CHECK(tree["steps"]["p"]["status"] == "pending");
  CHECK(tree["steps"]["p"]["reason"] == "requested");
  CHECK(!tree["steps"]["p"].contains("child_id"));
  CHECK(tree["children"] == json::array());
  CHECK(run_canopy(home.path, {"ls", "--json", "--all"}).out_json().size() == 1);
  auto evs = events(home.path, id);
  CHECK(count_events(evs, "execution.queued") == 1);

  // Resume plans again and runs the planned graph once.
  g.write("go", "");
  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  INFO("resume stderr: " << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto done = resumed.out_json();
  CHECK(done["status"] == "completed");
  CHECK(done["outputs"]["text"] == "planned-ran\n");
  CHECK(done["children"].size() == 1);
  CHECK(run_canopy(home.path, {"ls", "--json", "--all"}).out_json().size() == 2);
}

// -- 10. Ctrl-C --------------------------------------------------------------------------

TEST_CASE("Ctrl-C during run stops gracefully, exits 3 and prints the resume command, and a second "
          "Ctrl-C forces",
          "[integration][stop]") {
  temp_dir home, g;

  SECTION("one Ctrl-C") {
    auto file = g.write("sleepy.json", R"({"steps": {
      "a": {"fn": "sleep", "with": {"ms": 60000}},
      "b": {"run": ["sh", "-c", "echo up; exec sleep 60"]}}})");
    auto run = start_canopy(home.path, {"run", file});
    REQUIRE(wait_for_count(run, "| up"));
    auto id = only_root(home.path);
    auto pid = show(home.path, id)["steps"]["b"]["pid"].get<long>();
    REQUIRE(::kill(run.pid(), SIGINT) == 0); // the canopy process, not its group
    // The final summary line, then the exit.
    REQUIRE(wait_for_count(run, "stopped (requested): " + id, 1, 15s));
    CHECK(wait_group_gone(pid));
    auto doc = show(home.path, id);
    CHECK(doc["status"] == "stopped");
    CHECK(doc["reason"] == "requested");
    CHECK(doc["steps"]["a"]["status"] == "pending");
    CHECK(doc["steps"]["b"]["status"] == "pending");
    REQUIRE(wait_exit(run, 15s));
    CHECK(run.exit_code() == 3);
    CHECK_THAT(run.err().data, Catch::Contains("canopy --home " + home.path + " resume " + id));
  }

  SECTION("a second Ctrl-C forces") {
    auto gc_file = g.path + "/gc.pid";
    auto file = g.write("trap.json",
                        json{{"steps", {{"t", trapping_step(gc_file, "60s", "60s")}}}}.dump());
    auto run = start_canopy(home.path, {"run", file});
    REQUIRE(wait_for_count(run, "| ready"));
    auto id = only_root(home.path);
    auto leader = show(home.path, id)["steps"]["t"]["pid"].get<long>();
    auto gc = read_pid(gc_file);
    REQUIRE(::kill(run.pid(), SIGINT) == 0);
    REQUIRE(wait_for_count(run, "execution.stopping"));
    auto t0 = clock_type::now();
    REQUIRE(::kill(run.pid(), SIGINT) == 0);
    REQUIRE(wait_for_count(run, "stopped (requested): " + id, 1, 30s));
    auto took = elapsed_ms(t0);
    INFO("the forced stop took " << took << " ms");
    CHECK(took < 30000); // the grace periods alone are 120 s
    CHECK(wait_group_gone(leader, 500ms));
    CHECK(wait_group_gone(gc, 500ms));
    REQUIRE(wait_exit(run, 15s));
    CHECK(run.exit_code() == 3);
    CHECK_THAT(run.err().data, Catch::Contains("resume " + id));
  }
}

// -- 11. latency ---------------------------------------------------------------------------

TEST_CASE("a stop from another process reaches the execution quickly", "[integration][stop]") {
  temp_dir home, g;
  auto file = g.write("sleep.json", R"({"steps": {"a": {"fn": "sleep", "with": {"ms": 60000}}}})");
  auto run = start_canopy(home.path, {"run", file});
  REQUIRE(wait_for_count(run, "step.started"));
  auto id = only_root(home.path);
  auto t0 = wall_ms();
  auto stop = run_canopy(home.path, {"stop", id});
  CHECK(stop.exit_code == 0);
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);
  int64_t stopping = 0;
  for (auto& e : events(home.path, id))
    if (e["type"] == "execution.stopping")
      stopping = ms_of(e["time"]);
  REQUIRE(stopping != 0);
  auto latency = stopping - t0;
  WARN("stop latency (canopy stop started → execution.stopping): " << latency << " ms");
  CHECK(latency >= 0);
  CHECK(latency < 1000);
}
