#include "tests/reliability/crash_trial.hpp"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

namespace canopy::test {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// The environment variable that marks every process of an incarnation.
constexpr const char* mark_var = "CANOPY_CRASH_MARK";

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

// -- processes ------------------------------------------------------------------------------

/// State of the /proc/PID/stat line (0 when unreadable).
char state_of(const std::string& pid) {
  std::ifstream in{"/proc/" + pid + "/stat"};
  std::string stat;
  if (!std::getline(in, stat))
    return 0;
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

/// Waits up to `timeout` for the processes marked `mark` to vanish; kills
/// (SIGKILL to each one's group and to itself) the ones left.
/// @returns the number of processes that had to be killed: orphans.
size_t settle(const std::string& mark, std::chrono::milliseconds timeout, bool prefix = false) {
  std::vector<long> left;
  auto deadline = clock_type::now() + timeout;
  while (!(left = marked_processes(mark, prefix)).empty() && clock_type::now() < deadline)
    std::this_thread::sleep_for(5ms);
  for (auto pid : left) {
    ::kill(static_cast<pid_t>(-pid), SIGKILL);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  if (!left.empty())
    eventually([&] { return marked_processes(mark, prefix).empty(); }, 5000ms);
  return left.size();
}

subprocess start_canopy(const std::string& home, const std::vector<std::string>& args,
                        const std::string& mark) {
  subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  opts.env = {{mark_var, mark}};
  auto p = subprocess::start(opts);
  if (!p)
    throw std::runtime_error("cannot start " + canopy_binary());
  return std::move(*p);
}

/// Waits for `p` to exit until `deadline`. @returns true when it exited.
bool exits_by(subprocess& p, clock_type::time_point deadline) {
  for (;;) {
    if (p.poll())
      return true;
    if (clock_type::now() >= deadline)
      return false;
    std::this_thread::sleep_for(2ms);
  }
}

// -- the store seen from the command line -----------------------------------------------

/// What `ls`, `show` and `events` answered; `ok` false when one failed.
struct store_view {
  bool ok = true;
  std::string root;              ///< the only root execution, if any
  json doc;                      ///< its tree document
  std::vector<json> events;      ///< its tree's events, by seq
};

store_view read_store(const std::string& home, std::string id) {
  store_view v;
  // Killed before the store was created: nothing stored, nothing to read
  // (a reading command refuses a home without a store).
  if (!has_store(home))
    return v;
  auto ls = run_canopy(home, {"ls", "--json"}, 60s);
  auto list = ls.out_json();
  if (ls.exit_code != 0 || !list.is_array()) {
    v.ok = false;
    return v;
  }
  if (id.empty() && !list.empty())
    id = list.back().value("id", "");
  v.root = id;
  if (id.empty())
    return v;
  auto show = run_canopy(home, {"show", id, "--json"}, 60s);
  v.doc = show.out_json();
  auto events = run_canopy(home, {"events", id, "--json"}, 60s);
  v.ok = show.exit_code == 0 && v.doc.is_object() && events.exit_code == 0;
  std::istringstream in{events.out};
  for (std::string line; std::getline(in, line);) {
    if (line.empty())
      continue;
    auto e = json::parse(line, nullptr, false);
    if (e.is_discarded())
      v.ok = false;
    else
      v.events.push_back(std::move(e));
  }
  std::stable_sort(v.events.begin(), v.events.end(), [](const json& a, const json& b) {
    return a.value("seq", uint64_t{0}) < b.value("seq", uint64_t{0});
  });
  return v;
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
    result.orphans += settle(mark(inc), opts.orphan_timeout);
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
    result.orphans += settle(mark_base, opts.orphan_timeout, true);
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
  auto proc = start_canopy(t.home, {"run", t.w.graph_file(), "--input", "log=" + t.log, "--json"},
                           t.mark(inc));
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
      proc = start_canopy(t.home,
                          {"run", t.w.graph_file(), "--input", "log=" + t.log, "--json"},
                          t.mark(inc));
    else
      proc = start_canopy(t.home, {"resume", t.id, "--json"}, t.mark(inc));
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

std::vector<long> marked_processes(const std::string& mark, bool prefix) {
  std::vector<long> out;
  auto needle = std::string{mark_var} + "=" + mark;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator("/proc", ec)) {
    auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in{entry.path().string() + "/environ", std::ios::binary};
    bool hit = false;
    for (std::string var; !hit && std::getline(in, var, '\0');)
      hit = prefix ? var.compare(0, needle.size(), needle) == 0 : var == needle;
    if (!hit)
      continue;
    auto state = state_of(name);
    if (state != 0 && state != 'Z' && state != 'X')
      out.push_back(std::stol(name));
  }
  return out;
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
  fs::remove_all(dir_, ec);
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

} // namespace canopy::test
