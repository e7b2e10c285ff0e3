#include "tests/reliability/race_trial.hpp"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/reliability/race_world.hpp"
#include "tests/reliability/trial_processes.hpp"

namespace canopy::core::test {

namespace race {

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// How long a `run`, `resume` or detached run may take to end on its own
/// once the actions are over (a run of the whole graph takes about 3 s).
constexpr auto owner_timeout = 120s;

/// How long the servers get to finish what they run before their shutdown.
constexpr auto serve_settle_timeout = 30s;

/// How many `canopy resume` the end may take to complete the tree.
constexpr int final_resumes = 6;

/// How long the trial's processes get to vanish at its end.
constexpr auto orphan_timeout = 5000ms;

bool settled(const std::string& status) {
  return status != "running" && status != "stopping" && status != "queued";
}

} // namespace

// -- the workload ---------------------------------------------------------------------------

void world::make_workload() {
  // A step's side effect: its name and the wall-clock ms when it began.
  auto run_step = [&](const std::string& name, std::vector<std::string> needs) {
    json s = {{"run",
               {"sh", "-c",
                "echo \"" + name + " $(date +%s%3N)\" >> '" + side_file + "'; sleep 0.1"}}};
    if (!needs.empty())
      s["needs"] = std::move(needs);
    return s;
  };
  //   s1 → s2 → s3 → s4 → ... → sN      (N drawn from 8..12)
  //         └ p1 → p2 ──────────────┘   a parallel branch
  //               s3 → nap (fn sleep) ┘
  //                    s4 → sub (c1 → c2, a child execution) ┘
  auto n = draw(8, 12);
  json steps = json::object();
  for (int i = 1; i <= n; ++i) {
    std::vector<std::string> needs;
    if (i > 1)
      needs.push_back("s" + std::to_string(i - 1));
    if (i == n)
      needs.insert(needs.end(), {"p2", "nap", "sub"});
    steps["s" + std::to_string(i)] = run_step("s" + std::to_string(i), needs);
  }
  steps["p1"] = run_step("p1", {"s2"});
  steps["p2"] = run_step("p2", {"p1"});
  steps["nap"] = {{"fn", "sleep"}, {"with", {{"ms", draw(100, 300)}}}, {"needs", {"s3"}}};
  json child = {{"steps", {{"c1", run_step("c1", {})}, {"c2", run_step("c2", {"c1"})}}}};
  steps["sub"] = {{"graph", child}, {"needs", {"s4"}}};
  graph = {{"name", "race"}, {"steps", steps}};
  std::ofstream{graph_file} << graph.dump(2);
  note("graph: " + std::to_string(n) + "-step chain, a branch, a sleep and a child");
}

// -- the end --------------------------------------------------------------------------------

void world::finish() {
  note("settling");
  // 1. `run`, `resume` and detached runs end on their own.
  auto runs = [](const tracked& t) { return t.cli.has_value() || t.watched; };
  if (!eventually([&] { return live(runs).empty(); }, owner_timeout, 10ms))
    for (auto i : live(runs)) {
      fail(name_of(i) + " did not exit within "
           + std::to_string(owner_timeout.count()) + " s of the last action");
      signal(i, SIGKILL);
    }
  // 2. The servers finish what they run, then shut down gracefully.
  auto servers = [](const tracked& t) { return t.server != nullptr; };
  if (!live(servers).empty())
    eventually(
      [&] {
        auto doc = run_canopy(home, {"show", id(), "--json"}, 60s).out_json();
        return !doc.is_object() || settled(doc.value("status", ""));
      },
      serve_settle_timeout, 100ms);
  for (auto i : live(servers)) {
    signal(i, SIGTERM);
    if (!wait_ended(i, 60s)) {
      fail(name_of(i) + " did not exit within 60 s of SIGTERM");
      signal(i, SIGKILL);
      wait_ended(i, 10s);
    }
  }
  join_workers();
  // 3. Resumed to completion, without interference.
  for (int i = 0; i < final_resumes; ++i) {
    auto p = spawn_cli("final resume", {"resume", id(), "--json"}, false, true);
    if (!wait_ended(p, owner_timeout)) {
      fail(name_of(p) + " did not exit within " + std::to_string(owner_timeout.count()) + " s");
      signal(p, SIGKILL);
      wait_ended(p, 10s);
      break;
    }
    auto doc = json::parse(out_of(p), nullptr, false);
    if (doc.is_object() && doc.value("status", "") == "completed")
      break;
  }
  // 4. What is left: the store, the side file, the processes.
  auto v = read_store(home, id());
  if (!v.ok)
    fail("reading the store at the end: " + v.error);
  std::map<std::string, std::vector<int64_t>> lines;
  std::istringstream side{read_file(side_file)};
  for (std::string line; std::getline(side, line);) {
    std::istringstream words{line};
    std::string step;
    int64_t ms = 0;
    if (words >> step >> ms)
      lines[step].push_back(ms);
  }
  eventually([&] { return marked_processes(mark_base, true).empty(); }, orphan_timeout);
  std::vector<std::string> orphans;
  for (auto pid : marked_processes(mark_base, true)) {
    std::ifstream in{"/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary};
    std::string cmdline{std::istreambuf_iterator<char>{in}, {}};
    for (auto& c : cmdline)
      if (c == '\0')
        c = ' ';
    orphans.push_back("pid " + std::to_string(pid) + ": " + cmdline);
  }
  settle_marked(mark_base, 0ms, true);
  std::lock_guard<std::mutex> guard{mtx_};
  obs_.final_doc = std::move(v.doc);
  obs_.events = std::move(v.events);
  obs_.side_lines = std::move(lines);
  obs_.orphans = std::move(orphans);
}

race_observations world::observations() {
  std::lock_guard<std::mutex> guard{mtx_};
  auto out = obs_;
  for (auto& t : procs_)
    out.processes.push_back(t->span);
  return out;
}

} // namespace race

// -- race_result ----------------------------------------------------------------------------

namespace {

/// How many violations of one kind a report shows (the event log of a tree
/// run twice at once breaks its invariants dozens of times).
constexpr size_t shown_per_kind = 12;

} // namespace

std::string race_result::report() const {
  std::ostringstream out;
  out << "race trial seed " << seed << " (replay: bench_races --seed " << seed
      << " --trials 1): " << violations.size() << " violation"
      << (violations.size() == 1 ? "" : "s") << ", " << elapsed_ms << " ms, started by "
      << start << (ok() ? "" : ", kept " + dir) << "\n";
  out << "actions (+0 ms = " << t0_ms << " ms since the epoch):\n";
  for (auto& a : actions)
    out << "  " << a << "\n";
  if (!violations.empty()) {
    out << "violations:\n";
    std::map<std::string, size_t> shown;
    for (auto& v : violations)
      if (++shown[v.kind] <= shown_per_kind)
        out << "  [" << v.kind << "] " << v.text << "\n";
    for (auto& [kind, n] : shown)
      if (n > shown_per_kind)
        out << "  [" << kind << "] ... " << n - shown_per_kind << " more\n";
  }
  return out.str();
}

// -- run_race_trial -------------------------------------------------------------------------

race_result run_race_trial(const race_options& opts) {
  auto t0 = std::chrono::steady_clock::now();
  race_result out;
  {
    std::unique_ptr<race::world> w;
    try {
      w = std::make_unique<race::world>(opts);
      w->make_workload();
      w->start_tree();
      auto n = w->draw(opts.min_actions, opts.max_actions);
      for (int i = 0; i < n; ++i) {
        // A random moment: the point of the harness, not a wait for something.
        std::this_thread::sleep_for(std::chrono::milliseconds{w->draw(0, opts.max_gap_ms)});
        w->act();
      }
      w->finish();
      out = w->copy_result();
      out.violations = judge_race(w->observations());
    } catch (const std::exception& e) {
      if (w) {
        out = w->copy_result();
        for (auto& f : w->observations().failures)
          out.violations.push_back({"failures", f});
      }
      out.seed = opts.seed;
      out.violations.push_back({"failures", std::string{"the trial stopped: "} + e.what()});
    }
  } // the world is gone: every process it started is dead and reaped
  out.elapsed_ms = static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count());
  if (out.ok() && !opts.keep && !out.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(out.dir, ec);
  }
  return out;
}

} // namespace canopy::core::test
