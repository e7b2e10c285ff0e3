#include "runtime/node/worker.hpp"

#include "actors/scheduler.hpp"
#include "actors/process/subprocess.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include <caf/actor_system.hpp>
#include <caf/after.hpp>
#include <caf/atom.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/timespan.hpp>
#include <spdlog/spdlog.h>

#include "persistence/graph.hpp"
#include "runtime/node/cluster_transport.hpp"
#include "runtime/node/config.hpp"
#include "runtime/node/logging.hpp"

namespace canopy::core {

namespace {

constexpr int exit_ok = 0;
constexpr int exit_usage = 2;

/// Longest wait for the node actor to end (it kills its steps first) at
/// shutdown.
constexpr auto node_stop_wait = std::chrono::seconds{30};

/// The same event (e.g. `retry`) is logged at most once in this interval.
constexpr auto repeat_log_interval = std::chrono::seconds{30};

int usage_error(const std::string& msg) {
  std::cerr << "error: " << msg << "\n";
  return exit_usage;
}

/// Prints the errors of a tools file as serve prints a config's:
/// `error: PATH: MESSAGE`, the file's name when no path applies.
int report_tools_errors(const std::string& file, const config_result& parsed) {
  for (auto& e : parsed.errors) {
    auto where = !e.path.empty() ? file + ": " + e.path + ": "
                 : e.message.find(file) == std::string::npos ? file + ": "
                                                             : std::string{};
    std::cerr << "error: " << where << e.message << "\n";
  }
  if (parsed.errors.empty())
    std::cerr << "error: " << file << ": unusable tools file\n";
  return exit_usage;
}

} // namespace

std::string log_value(const std::string& v) {
  bool plain = !v.empty();
  for (unsigned char c : v)
    plain = plain && !std::isspace(c) && c != '"' && c != '=';
  if (plain)
    return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "worker";
  return buf;
}

nlohmann::json node_document(const node_info& n) {
  auto time = [](int64_t ms) {
    return ms > 0 ? nlohmann::json(to_rfc3339(ms)) : nlohmann::json();
  };
  return {{"name", n.name},
          {"slots", n.slots},
          {"tools", n.tools},
          {"running", n.running},
          {"supervisor", n.supervisor},
          {"joined_at", time(n.joined_at)},
          {"last_seen", time(n.last_seen)}};
}

namespace {

/// A worker's settings, checked from its flags and tools file.
struct worker_setup {
  std::string host;
  int port = 0;
  std::string supervisor; ///< HOST:PORT as logs name it
  std::string secret;
  std::optional<tls_files> tls;
  std::string name;
  millis heartbeat{1000};
  millis timeout{5000};
  node_config tools;
  int slots = 4;
};

/// Checks the flags and the tools file, before a thread or a socket exists.
/// @returns the exit code of the first problem (printed), or nothing.
std::optional<int> check_worker(const worker_flags& f, worker_setup& w) {
  if (!split_host_port(f.join, w.host, w.port) || w.port == 0)
    return usage_error("--join '" + f.join + "': expected HOST:PORT of a supervisor's "
                       "cluster port (canopy serve --cluster HOST:PORT)");
  if (f.slots < 1)
    return usage_error("--slots must be at least 1");
  w.slots = f.slots;
  if (!f.tools_file.empty()) {
    auto parsed = load_tools_file(f.tools_file);
    if (!parsed)
      return report_tools_errors(f.tools_file, parsed);
    w.tools = std::move(*parsed.value);
  }
  auto& cluster = w.tools.cluster;
  if (cluster)
    w.secret = cluster->secret;
  if (w.secret.empty())
    if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
      w.secret = env;
  if (w.secret.empty())
    return usage_error("the cluster needs a secret: put \"cluster\": {\"secret\": \"...\"} in "
                       "the file of --tools FILE, or set $CANOPY_CLUSTER_SECRET");
  // TLS files that load, and no cleartext join off loopback unless the
  // tools file says `"tls": false`.
  auto errors = check_cluster_transport(
    cluster, w.host, "--join " + f.join,
    f.tools_file.empty() ? std::string{"a tools file passed with --tools FILE"}
                         : "the tools file (" + f.tools_file + ")");
  for (auto& e : errors)
    std::cerr << "error: " << (f.tools_file.empty() ? "" : f.tools_file + ": ") << e.path
              << ": " << e.message << "\n";
  if (!errors.empty())
    return exit_usage;
  if (cluster)
    w.tls = cluster->tls;
  w.name = f.name.empty() ? host_name() : f.name;
  if (auto why = check_node_name(w.name); !why.empty())
    return usage_error((f.name.empty() ? "the host name '" + w.name + "' is no node name, pass "
                                         "--name NAME: "
                                       : "--name '" + w.name + "': ")
                       + why);
  // Timing: the flags, else the tools file's cluster section, else 1 s / 5 s.
  if (cluster) {
    w.heartbeat = cluster->heartbeat;
    w.timeout = cluster->timeout;
  }
  for (auto [flag, text, out] : {std::make_tuple("--heartbeat", &f.heartbeat, &w.heartbeat),
                                 std::make_tuple("--timeout", &f.timeout, &w.timeout)}) {
    if (text->empty())
      continue;
    auto d = parse_duration(*text);
    if (!d || d->count() <= 0)
      return usage_error(std::string{flag} + " '" + *text
                         + "': expected a positive duration such as 500ms, 1s or 2m");
    *out = *d;
  }
  if (w.heartbeat >= w.timeout)
    return usage_error("the heartbeat (" + to_duration_string(w.heartbeat)
                       + ") must be shorter than the timeout (" + to_duration_string(w.timeout)
                       + ")");
  w.supervisor = (w.host.find(':') != std::string::npos ? "[" + w.host + "]" : w.host) + ":"
                 + std::to_string(w.port);
  return std::nullopt;
}

/// What the node reports about its membership, to the log (and `joined` to
/// stdout). Retries while the supervisor is unreachable come every
/// heartbeat: the first is logged, then one per interval with the number
/// skipped. Threading: any thread.
class membership_log {
public:
  membership_log(std::string supervisor, std::string name, std::mutex& out_mtx)
    : supervisor_(std::move(supervisor)), name_(std::move(name)), out_mtx_(out_mtx) {
  }

  void operator()(const std::string& event, const std::string& detail) {
    if (event == "joined") {
      spdlog::info("event=joined supervisor={} name={}", log_value(supervisor_), log_value(name_));
      std::lock_guard<std::mutex> guard{out_mtx_};
      std::cout << "joined " << supervisor_ << " as " << name_ << std::endl;
    } else if (event == "refused") {
      spdlog::error("event=refused reason={} supervisor={} name={}", log_value(detail),
                    log_value(supervisor_), log_value(name_));
    } else if (event == "lost") {
      spdlog::warn("event=lost reason={} supervisor={} name={}", log_value(detail),
                   log_value(supervisor_), log_value(name_));
    } else {
      repeated(event, detail);
      return;
    }
    std::lock_guard<std::mutex> guard{mtx_};
    last_event_.clear();
    repeats_ = 0;
  }

private:
  void repeated(const std::string& event, const std::string& detail) {
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> guard{mtx_};
    if (event == last_event_ && now - last_logged_ < repeat_log_interval) {
      ++repeats_;
      return;
    }
    spdlog::info("event={} detail={} supervisor={} name={}{}", log_value(event),
                 log_value(detail), log_value(supervisor_), log_value(name_),
                 repeats_ > 0 ? " repeated=" + std::to_string(repeats_) : std::string{});
    last_event_ = event;
    last_logged_ = now;
    repeats_ = 0;
  }

  std::string supervisor_;
  std::string name_;
  std::mutex& out_mtx_;
  std::mutex mtx_;
  std::string last_event_;
  std::chrono::steady_clock::time_point last_logged_;
  size_t repeats_ = 0;
};

/// How the signal thread and the node's thread meet.
struct worker_control {
  std::mutex mtx;
  std::condition_variable cv;
  bool stop_requested = false;
  std::atomic<bool> refused{false};
  std::mutex out_mtx; ///< one writer of stdout/stderr at a time
  pthread_t signal_thread;
};

/// The node's thread: an actor system with the middleman, the worker node
/// actor, until a stop is requested; then the node ends its steps.
void run_node(const worker_setup& w, worker_control& ctl) {
  caf::actor_system_config cfg;
  cfg.set("logger.console", caf::atom("none"));
  configure_scheduler(cfg);
  add_cluster_types(cfg);
  configure_middleman(cfg, w.heartbeat, w.timeout, w.tls ? &*w.tls : nullptr);
  caf::actor_system sys{cfg};
  worker_options wo;
  wo.host = w.host;
  wo.port = static_cast<uint16_t>(w.port);
  wo.secret = w.secret;
  wo.tls = w.tls;
  wo.self.name = w.name;
  wo.self.slots = static_cast<uint32_t>(w.slots);
  for (auto& kv : w.tools.tools)
    wo.self.tools.push_back(kv.first);
  wo.tools = w.tools.tools; // the argv templates and limits of `tool` steps placed here
  wo.heartbeat = w.heartbeat;
  wo.timeout = w.timeout;
  auto log = std::make_shared<membership_log>(w.supervisor, w.name, ctl.out_mtx);
  wo.log = [log](const std::string& event, const std::string& detail) { (*log)(event, detail); };
  wo.on_refused = [&ctl, supervisor = w.supervisor](const std::string& reason) {
    if (ctl.refused.exchange(true))
      return;
    {
      std::lock_guard<std::mutex> guard{ctl.out_mtx};
      std::cerr << "error: the supervisor at " << supervisor << " refused this worker: "
                << reason << "\n";
    }
    pthread_kill(ctl.signal_thread, SIGUSR1); // wake the signal thread
  };
  auto node = spawn_worker_node(sys, std::move(wo));
  spdlog::info("event=worker.start supervisor={} name={} slots={} tools={} tls={}",
               log_value(w.supervisor), log_value(w.name), w.slots, w.tools.tools.size(),
               w.tls ? "on" : "off");
  {
    std::unique_lock<std::mutex> lock{ctl.mtx};
    ctl.cv.wait(lock, [&] { return ctl.stop_requested; });
  }
  // The node actor kills the steps it runs when it exits.
  {
    caf::scoped_actor self{sys};
    self->monitor(node);
    self->send_exit(node, caf::exit_reason::user_shutdown);
    self->receive([](const caf::down_msg&) {},
                  caf::after(node_stop_wait) >> [] {
                    spdlog::warn("event=shutdown error=\"the node actor did not stop\"");
                  });
  }
  node = nullptr;
  spdlog::info("event=shutdown phase=done");
}

} // namespace

int run_worker(const worker_flags& f) {
  raise_open_files_limit(); // each running step holds pipes
  worker_setup w;
  if (auto rc = check_worker(f, w))
    return *rc;
  // The log, in serve's format (runtime/node/logging.hpp); ended last, once the
  // node ended.
  process_log logging;
  // Signals are taken by this thread only: block them before any other
  // thread exists (the log's blocks them all), so every thread inherits the
  // mask. SIGUSR1 wakes this thread when the supervisor refused the secret.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  worker_control ctl;
  ctl.signal_thread = pthread_self();
  // The node runs on a thread of its own; this one only waits for a signal
  // (a thread blocked in sigwait must not call into CAF, see runtime.hpp).
  std::thread node_thread{[&] { run_node(w, ctl); }};
  int sig = 0;
  sigwait(&set, &sig);
  if (sig != SIGUSR1)
    spdlog::info("event=signal signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  {
    std::lock_guard<std::mutex> guard{ctl.mtx};
    ctl.stop_requested = true;
  }
  ctl.cv.notify_all();
  node_thread.join();
  return ctl.refused ? exit_usage : exit_ok;
}

} // namespace canopy::core
