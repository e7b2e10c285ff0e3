// bench_cluster: stop latency of 1,000 running tool steps spread over two
// workers, beside the same stop with all 1,000 steps local (runtime/docs/reference/config.md#cluster
// rules 9 and 22).
//
// Scenario `local`: one `canopy serve` (max_parallel 1000) whose own tool
// `holder` runs `sh -c 'echo $$ >> PIDS; exec sleep 3600'`.
// Scenario `cluster`: `canopy serve --cluster 127.0.0.1:0` without tools
// (max_parallel 4) and two `canopy worker --slots 500` processes that hold
// `holder`; every step goes to a worker.
//
// Each run registers a graph of 1,000 independent `holder` steps, starts it,
// waits until the PIDS file has 1,000 lines (every step's process started),
// then times `POST /v1/executions/{id}/stop {"mode": "graceful", "wait": 60}`
// until its answer, which must be 200 `stopped`. Then every pid in the file
// must be gone (checked at the answer, and again up to 10 s later).
//
// The local scenario also measures its floor in the same run, once before
// the server starts and once after it stopped: this process posix_spawns the
// same number of the same `holder` command, each in a process group of its
// own with the pipes a step gets (stdin /dev/null, stdout and stderr on
// non-blocking close-on-exec pipes), timed until the floor's PIDS file has
// every line (polled as the steps' file is), then kills the groups and reaps
// them. The ratio is the steps' time to all running over the mean of the two
// floors.
//
// Prints a Markdown table. Exits 1 when a stop did not answer `stopped` or a
// process outlived it, 2 when a scenario could not be set up.
//
//   usage: bench_cluster [--steps N] [--scenario local|cluster|both]

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/server_process.hpp"

extern char** environ;

using namespace canopy::core::test;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

const std::string secret = "bench-cluster-secret";

std::string cpu_model() {
  std::ifstream in{"/proc/cpuinfo"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      return pos == std::string::npos ? line : line.substr(pos + 2);
    }
  return "unknown";
}

std::string today() {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

/// The pids in `file` (one a line; an incomplete last line is skipped).
std::vector<long> pids_in(const std::string& file) {
  std::vector<long> out;
  auto text = read_file(file);
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (in.eof() && (text.empty() || text.back() != '\n'))
      break;
    if (!line.empty())
      out.push_back(std::stol(line));
  }
  return out;
}

size_t alive(const std::vector<long>& pids) {
  return static_cast<size_t>(
    std::count_if(pids.begin(), pids.end(), [](long p) { return !process_gone(p); }));
}

std::vector<std::string> holder_argv(const std::string& pid_file) {
  return {"sh", "-c", "echo $$ >> " + pid_file + "; exec sleep 3600"};
}

json holder_tool(const std::string& pid_file) {
  return {{"argv", holder_argv(pid_file)},
          {"grace", {{"interrupt", "5s"}, {"terminate", "5s"}}}};
}

// -- the floor ------------------------------------------------------------------------

/// The bare cost of what the local scenario's steps run: `n` `holder`
/// processes started with posix_spawnp from this process, each in a process
/// group of its own with a step's pipes. @returns the milliseconds from the
/// first spawn until the PIDS file has `n` lines, or -1 when they did not all
/// start within 90 s. Every group is killed and reaped before it returns.
double spawn_floor_ms(int n) {
  temp_dir dir;
  auto pid_file = dir.path + "/pids";
  auto args = holder_argv(pid_file);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  sigset_t empty_mask, all_signals;
  sigemptyset(&empty_mask);
  sigfillset(&all_signals);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setsigdefault(&attr, &all_signals);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<pid_t> pids;
  std::vector<int> fds; // the read ends, held until the groups are reaped
  auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0)
      break;
    if (::pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]);
      ::close(out[1]);
      break;
    }
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, "sh", &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    fds.push_back(out[0]);
    fds.push_back(err[0]);
    if (rc != 0)
      break;
    pids.push_back(pid);
  }
  posix_spawnattr_destroy(&attr);
  bool all = static_cast<int>(pids.size()) == n
             && eventually([&] { return line_count(pid_file) >= static_cast<size_t>(n); }, 90s,
                           20ms);
  double ms = all ? ms_since(t0) : -1;
  for (auto pid : pids)
    ::kill(-pid, SIGKILL);
  for (auto pid : pids) {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  for (auto fd : fds)
    ::close(fd);
  return ms;
}

struct outcome {
  std::string scenario;
  int steps = 0;
  bool ok = false;
  std::string failure;
  double to_running_ms = 0;
  double server_cpu_ms = -1; ///< the server's CPU time from the start until all ran
  double stop_ms = 0;
  std::string stop_result;
  bool dead_at_answer = false;
  double all_dead_ms = -1; ///< after the answer; -1: not within 10 s
  std::string placement;
  double floor_before_ms = -1; ///< local only: `spawn_floor_ms` before the server started
  double floor_after_ms = -1;  ///< and after it stopped
};

/// Runs one scenario: `workers` 0 (local) or 2.
outcome run(const std::string& scenario, int steps, int workers) {
  outcome r;
  r.scenario = scenario;
  r.steps = steps;
  if (workers == 0)
    r.floor_before_ms = spawn_floor_ms(steps);
  temp_dir dir;
  auto pid_file = dir.path + "/pids";
  server_process::options o;
  if (workers == 0) {
    o.config = {{"max_parallel", steps}, {"tools", {{"holder", holder_tool(pid_file)}}}};
  } else {
    o.config = {{"max_parallel", 4},
                {"cluster", {{"secret", secret}, {"heartbeat", "1s"}, {"timeout", "5s"}}}};
    o.args = {"--cluster", "127.0.0.1:0"};
  }
  std::unique_ptr<server_process> sup;
  try {
    sup = std::make_unique<server_process>(o);
  } catch (const std::exception& ex) {
    r.failure = std::string{"cannot start the server: "} + ex.what();
    return r;
  }
  std::vector<std::unique_ptr<worker_process>> pool;
  if (workers > 0) {
    int port = sup->cluster_port();
    if (port == 0) {
      r.failure = "no `cluster on` line: " + sup->log();
      return r;
    }
    auto tools = dir.write("tools.json",
                           json{{"tools", {{"holder", holder_tool(pid_file)}}},
                                {"cluster", {{"secret", secret}}}}
                             .dump());
    int slots = (steps + workers - 1) / workers;
    for (int i = 1; i <= workers; ++i) {
      worker_process::options wo;
      wo.args = {"--join", "127.0.0.1:" + std::to_string(port), "--name", "w" + std::to_string(i),
                 "--slots", std::to_string(slots), "--tools", tools};
      wo.stop_timeout = 20s; // a worker may hold many steps
      pool.push_back(std::make_unique<worker_process>(wo));
    }
    auto c = sup->client(alice_token);
    bool joined = eventually(
      [&] {
        auto a = get_json(c, "/v1/nodes");
        return a.status == 200 && a.body["items"].size() == static_cast<size_t>(workers + 1);
      },
      30s, 50ms);
    if (!joined) {
      r.failure = "the workers did not join: " + pool.front()->err();
      return r;
    }
  }

  auto c = sup->client(alice_token);
  json g = {{"name", "wide"}, {"steps", json::object()}};
  for (int i = 0; i < steps; ++i)
    g["steps"]["h" + std::to_string(i)] = {{"tool", "holder"}};
  auto reg = post_json(c, "/v1/graphs", g);
  if (reg.status != 201) {
    r.failure = "POST /v1/graphs: " + std::to_string(reg.status) + " " + reg.text;
    return r;
  }
  auto cpu0 = cpu_ms(sup->pid());
  auto t0 = clock_type::now();
  auto started = post_json(c, "/v1/graphs/wide/executions", {{"inputs", json::object()}});
  if (started.status != 201) {
    r.failure = "POST executions: " + std::to_string(started.status) + " " + started.text;
    return r;
  }
  auto id = started.body.value("id", "");
  bool all_running = eventually([&] { return line_count(pid_file) >= static_cast<size_t>(steps); },
                                90s, 20ms);
  r.to_running_ms = ms_since(t0);
  if (auto cpu1 = cpu_ms(sup->pid()); cpu0 >= 0 && cpu1 >= 0)
    r.server_cpu_ms = cpu1 - cpu0;
  if (!all_running) {
    r.failure = "only " + std::to_string(line_count(pid_file)) + " of " + std::to_string(steps)
                + " steps started within 90 s";
    // Leave nothing behind.
    post_json(c, "/v1/executions/" + id + "/stop", {{"mode", "force"}, {"wait", 60}});
    for (auto p : pids_in(pid_file))
      ::kill(static_cast<pid_t>(p), SIGKILL);
    return r;
  }
  // Where they run (from the execution's steps).
  {
    auto doc = get_json(c, "/v1/executions/" + id);
    std::map<std::string, int> by_node;
    for (auto& kv : doc.body["steps"].items())
      ++by_node[kv.value().value("node", "?") + "/" + kv.value().value("status", "?")];
    for (auto& [node, n] : by_node)
      r.placement += (r.placement.empty() ? "" : ", ") + node + ": " + std::to_string(n);
  }

  auto pids = pids_in(pid_file);
  auto s0 = clock_type::now();
  auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"mode", "graceful"}, {"wait", 60}});
  r.stop_ms = ms_since(s0);
  r.stop_result = std::to_string(stop.status) + " " + stop_result_of(stop.body);
  r.dead_at_answer = alive(pids) == 0;
  auto d0 = clock_type::now();
  if (eventually([&] { return alive(pids) == 0; }, 10s))
    r.all_dead_ms = ms_since(d0);
  if (stop.status == 200 && stop_result_of(stop.body, "") == "stopped" && r.dead_at_answer
      && pids.size() == static_cast<size_t>(steps))
    r.ok = true;
  else if (stop.status != 200)
    r.failure = "stop answered " + stop.text.substr(0, 300);
  for (auto p : pids)
    if (!process_gone(p))
      ::kill(static_cast<pid_t>(p), SIGKILL);
  pool.clear();
  try {
    sup->terminate(60s);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s\n", ex.what());
  }
  sup.reset();
  if (workers == 0)
    r.floor_after_ms = spawn_floor_ms(steps);
  return r;
}

} // namespace

int main(int argc, char** argv) {
  int steps = 1000;
  std::string which = "both";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (a == "--scenario" && i + 1 < argc)
      which = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_cluster [--steps N] [--scenario local|cluster|both]\n");
      return 2;
    }
  }
  // 1,000 subprocesses with two pipes each: lift the descriptor limit the
  // servers and workers inherit as far as allowed.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }

  std::vector<outcome> results;
  if (which == "local" || which == "both")
    results.push_back(run("local (supervisor only)", steps, 0));
  if (which == "cluster" || which == "both")
    results.push_back(run("cluster (2 workers)", steps, 2));

  auto date = today();
  auto machine = std::to_string(std::thread::hardware_concurrency()) + " CPUs, " + cpu_model();
  std::printf("| date | machine | scenario | steps | time to all running (ms) | floor: bare "
              "posix_spawn, before / after (ms) | ratio to the floors' mean | supervisor CPU until "
              "all running (ms) | stop latency (ms) | stop answer | every process dead | placement (node/status: steps) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool bad = false;
  for (auto& r : results) {
    std::string dead = r.dead_at_answer ? "yes"
                       : r.all_dead_ms >= 0
                         ? "no (all dead " + std::to_string(static_cast<long>(r.all_dead_ms))
                             + " ms after the answer)"
                         : "no";
    std::string floor = "–", ratio = "–";
    if (r.floor_before_ms >= 0 && r.floor_after_ms >= 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.0f / %.0f", r.floor_before_ms, r.floor_after_ms);
      floor = buf;
      std::snprintf(buf, sizeof buf, "%.2f×",
                    r.to_running_ms / ((r.floor_before_ms + r.floor_after_ms) / 2));
      ratio = buf;
    } else if (r.floor_before_ms < 0 && r.scenario.rfind("local", 0) == 0) {
      floor = "failed";
    }
    if (!r.failure.empty() && r.stop_result.empty()) {
      std::printf("| %s | %s | %s | %d | failed: %s | %s | | | | | | |\n", date.c_str(),
                  machine.c_str(), r.scenario.c_str(), r.steps, r.failure.c_str(), floor.c_str());
    } else {
      std::printf("| %s | %s | %s | %d | %.0f | %s | %s | %.0f | %.0f | %s | %s | %s |\n",
                  date.c_str(), machine.c_str(), r.scenario.c_str(), r.steps, r.to_running_ms,
                  floor.c_str(), ratio.c_str(), r.server_cpu_ms, r.stop_ms, r.stop_result.c_str(), dead.c_str(),
                  r.placement.c_str());
    }
    if (!r.failure.empty())
      std::fprintf(stderr, "%s: %s\n", r.scenario.c_str(), r.failure.c_str());
    if (!r.ok)
      bad = true;
  }
  bool setup_failed = std::any_of(results.begin(), results.end(), [](const outcome& r) {
    return r.stop_result.empty();
  });
  return setup_failed ? 2 : bad ? 1 : 0;
}
