#include "tests/reliability/crash_trial.hpp"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/reliability/trial_processes.hpp"

namespace canopy::core::test {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// How long one incarnation may take to finish once no kill is planned.
constexpr auto finish_timeout = std::chrono::seconds{120};

long elapsed_ms(clock_type::time_point since) {
  return static_cast<long>(
    std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - since).count());
}

// -- the workload -----------------------------------------------------------------------

/// A `run` step that logs its start and end around a short sleep and prints
/// its name. No `${...}` in the script: the log's path comes through `env`.
json run_step(const std::string& name, const std::vector<std::string>& needs) {
  json s = {{"run",
             {"sh", "-c",
              "echo \"begin " + name + " $$\" >> \"$LOG\"; sleep 0.05; echo \"end " + name
                + " $$\" >> \"$LOG\"; echo " + name}},
            {"env", {{"LOG", "${inputs.log}"}}}};
  if (!needs.empty())
    s["needs"] = needs;
  return s;
}

json with_needs(json s, const std::vector<std::string>& needs) {
  s["needs"] = needs;
  return s;
}

// -- one trial -------------------------------------------------------------------------------

/// The parts of a trial common to both modes.
struct trial_state {
  const crash_workload& w;
  const trial_options& opts;
  std::mt19937_64& rng;
  temp_dir dir;
  std::string home = dir.path + "/home";
  std::string log = dir.path + "/side.log";
  std::string mark_base;
  std::string id;
  int planned = 1;
  trial_result result;
  trial_observations obs;

  trial_state(const crash_workload& w, const trial_options& opts, std::mt19937_64& rng)
    : w(w), opts(opts), rng(rng) {
    mark_base = "t" + std::to_string(::getpid()) + "-" + opts.label + "-";
    planned = std::uniform_int_distribution<int>{1, std::max(1, opts.max_kills)}(rng);
    result.mode = opts.mode;
  }

  std::string mark(int incarnation) const { return mark_base + std::to_string(incarnation); }

  /// A random moment within the reference run's duration (process start
  /// to exit), so a kill may land in start-up, recovery, a step or a commit.
  std::chrono::milliseconds random_delay() {
    auto hi = static_cast<long>(w.reference_duration().count());
    return std::chrono::milliseconds{std::uniform_int_distribution<long>{0, hi}(rng)};
  }

  /// After a kill of incarnation `inc`: orphans, the store, a snapshot.
  void after_kill(int inc) {
    ++result.kills;
    result.orphans += settle_marked(mark(inc), opts.orphan_timeout);
    auto v = read_store(home, id);
    if (!v.ok)
      ++result.store_failures;
    if (id.empty())
      id = v.root;
    if (id.empty() || !v.doc.is_object())
      return;
    auto snap = snapshot_of(v.doc, v.events, parse_log(read_file(log)));
    result.completed_at_kill += snap.size();
    result.pending_at_kill += tree_steps(v.doc).size() - snap.size();
    obs.snapshots.push_back(std::move(snap));
  }

  /// The end: the final state of the store, the last orphans, the verdict.
  void finish() {
    result.orphans += settle_marked(mark_base, opts.orphan_timeout, true);
    auto v = read_store(home, id);
    if (!v.ok)
      ++result.store_failures;
    obs.needs = w.needs();
    obs.run_steps = w.run_steps();
    obs.final_doc = v.doc;
    obs.events = std::move(v.events);
    obs.log = parse_log(read_file(log));
    obs.reference_outputs = w.reference_outputs();
    result.verdict = judge(obs);
  }
};

void run_mode(trial_state& t) {
  int inc = 0;
  auto proc = start_marked_canopy(
    t.home, {"run", t.w.graph_file(), "--input", "log=" + t.log, "--json"}, t.mark(inc));
  for (;;) {
    if (t.result.kills >= static_cast<size_t>(t.planned)) {
      exits_by(proc, clock_type::now() + finish_timeout);
      break;
    }
    if (exits_by(proc, clock_type::now() + t.random_delay()))
      break;
    ::kill(proc.pid(), SIGKILL);
    exits_by(proc, clock_type::now() + 30s);
    t.after_kill(inc++);
    if (t.id.empty()) // killed before its execution was stored: start again
      proc = start_marked_canopy(t.home,
                                 {"run", t.w.graph_file(), "--input", "log=" + t.log, "--json"},
                                 t.mark(inc));
    else
      proc = start_marked_canopy(t.home, {"resume", t.id, "--json"}, t.mark(inc));
  }
  if (!proc.poll()) {
    proc.signal_group(SIGKILL);
    exits_by(proc, clock_type::now() + 10s);
  }
  if (t.id.empty()) { // never killed: the id is in the document it printed
    auto doc = json::parse(proc.out().data, nullptr, false);
    if (doc.is_object())
      t.id = doc.value("id", "");
  }
}

void serve_mode(trial_state& t) {
  int inc = 0;
  auto start_server = [&](std::vector<std::string> args) {
    server_process::options so;
    so.config = {{"allow_inline_commands", true}};
    so.args = std::move(args);
    so.home = t.home;
    so.env = {{mark_var, t.mark(inc)}};
    return std::make_unique<server_process>(so);
  };
  auto server = start_server({});
  {
    auto c = server->client(alice_token);
    auto posted = request(c, "POST", "/v1/graphs", t.w.graph().dump());
    if (posted.status != 201)
      throw std::runtime_error("POST /v1/graphs answered " + std::to_string(posted.status) + ": "
                               + posted.text);
    auto started = post_json(c, "/v1/graphs/crash/executions",
                             {{"inputs", {{"log", t.log}}}});
    if (started.status != 201)
      throw std::runtime_error("starting the execution answered "
                               + std::to_string(started.status) + ": " + started.text);
    t.id = started.body.value("id", "");
  }
  auto completed = [&](clock_type::time_point deadline) {
    auto c = server->client(alice_token);
    for (;;) {
      auto a = get_json(c, "/v1/executions/" + t.id);
      if (a.status == 200 && a.body.value("status", "") == "completed")
        return true;
      if (clock_type::now() >= deadline)
        return false;
      std::this_thread::sleep_for(10ms);
    }
  };
  for (;;) {
    if (t.result.kills >= static_cast<size_t>(t.planned)) {
      completed(clock_type::now() + finish_timeout);
      break;
    }
    if (completed(clock_type::now() + t.random_delay()))
      break;
    server->kill();
    server.reset();
    t.after_kill(inc++);
    server = start_server({"--resume-interrupted"});
  }
  server->terminate();
}

} // namespace

const char* to_string(crash_mode m) {
  return m == crash_mode::run ? "run" : "serve";
}

// -- crash_workload ---------------------------------------------------------------------------

crash_workload::crash_workload() {
  json child = {{"inputs", {"log"}},
                {"steps",
                 {{"n1", run_step("n1", {})},
                  {"n2", with_needs({{"fn", "echo"}, {"with", {{"v", "${steps.n1.stdout}"}}}},
                                    {"n1"})},
                  {"n3", run_step("n3", {"n1"})},
                  {"n4", run_step("n4", {"n2", "n3"})}}},
                {"outputs", {{"x", "${steps.n4.stdout}"}}}};
  json steps = {
    {"a", run_step("a", {})},
    {"b", with_needs({{"fn", "sleep"}, {"with", {{"ms", 40}}}}, {"a"})},
    {"c", run_step("c", {"a"})},
    {"d", run_step("d", {"a"})},
    {"nest", {{"graph", child}, {"with", {{"log", "${inputs.log}"}}}, {"needs", {"b"}}}},
    {"e", run_step("e", {"c", "d"})},
    {"f", with_needs({{"fn", "echo"}, {"with", {{"from", "${steps.e.stdout}"}}}},
                     {"e", "nest"})},
    {"g", run_step("g", {"f"})}};
  graph_ = {{"name", "crash"},
            {"inputs", {"log"}},
            {"steps", steps},
            {"outputs",
             {{"g", "${steps.g.stdout}"}, {"x", "${steps.nest.x}"}, {"f", "${steps.f.from}"}}}};
  for (auto* s : {&steps, &child["steps"]})
    for (auto& kv : s->items()) {
      needs_[kv.key()] = kv.value().value("needs", std::vector<std::string>{});
      if (kv.value().contains("run"))
        run_steps_.push_back(kv.key());
    }
  std::string tmpl = "/tmp/canopy-crash-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  file_ = dir_ + "/crash.json";
  std::ofstream{file_} << graph_.dump(2);
  auto home = dir_ + "/home";
  auto t0 = clock_type::now();
  auto ref = run_canopy(home, {"run", file_, "--input", "log=" + dir_ + "/ref.log", "--json"},
                        finish_timeout);
  duration_ = std::chrono::milliseconds{elapsed_ms(t0)};
  auto doc = ref.out_json();
  if (ref.exit_code != 0 || !doc.is_object() || doc.value("status", "") != "completed")
    throw std::runtime_error("the reference run failed (exit " + std::to_string(ref.exit_code)
                             + "): " + ref.err);
  outputs_ = doc["outputs"];
}

crash_workload::~crash_workload() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

// -- run_trial ------------------------------------------------------------------------------

trial_result run_trial(const crash_workload& w, const trial_options& opts, std::mt19937_64& rng) {
  auto t0 = clock_type::now();
  trial_state t{w, opts, rng};
  if (opts.mode == crash_mode::run)
    run_mode(t);
  else
    serve_mode(t);
  t.finish();
  t.result.elapsed_ms = elapsed_ms(t0);
  return t.result;
}

} // namespace canopy::core::test
