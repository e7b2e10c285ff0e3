#include "runtime/worker.hpp"

#include "actors/scheduler.hpp"
#include "actors/subprocess.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
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
#include "runtime/cluster_transport.hpp"
#include "runtime/config.hpp"
#include "runtime/logging.hpp"

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

int run_worker(const worker_flags& f) {
  raise_open_files_limit(); // each running step holds pipes
  // -- usage: everything is checked before a thread or a socket exists -------------
  std::string host;
  int port = 0;
  if (!split_host_port(f.join, host, port) || port == 0)
    return usage_error("--join '" + f.join + "': expected HOST:PORT of a supervisor's "
                       "cluster port (canopy serve --cluster HOST:PORT)");
  if (f.slots < 1)
    return usage_error("--slots must be at least 1");
  node_config tools;
  if (!f.tools_file.empty()) {
    auto parsed = load_tools_file(f.tools_file);
    if (!parsed)
      return report_tools_errors(f.tools_file, parsed);
    tools = std::move(*parsed.value);
  }
  std::string secret;
  if (tools.cluster)
    secret = tools.cluster->secret;
  if (secret.empty())
    if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
      secret = env;
  if (secret.empty())
    return usage_error("the cluster needs a secret: put \"cluster\": {\"secret\": \"...\"} in "
                       "the file of --tools FILE, or set $CANOPY_CLUSTER_SECRET");
  // TLS files that load, and no cleartext join off loopback unless the
  // tools file says `"tls": false`.
  {
    auto errors = check_cluster_transport(
      tools.cluster, host, "--join " + f.join,
      f.tools_file.empty() ? std::string{"a tools file passed with --tools FILE"}
                           : "the tools file (" + f.tools_file + ")");
    for (auto& e : errors)
      std::cerr << "error: " << (f.tools_file.empty() ? "" : f.tools_file + ": ") << e.path
                << ": " << e.message << "\n";
    if (!errors.empty())
      return exit_usage;
  }
  std::optional<tls_files> tls;
  if (tools.cluster)
    tls = tools.cluster->tls;
  auto name = f.name.empty() ? host_name() : f.name;
  if (auto why = check_node_name(name); !why.empty())
    return usage_error((f.name.empty() ? "the host name '" + name + "' is no node name, pass "
                                         "--name NAME: "
                                       : "--name '" + name + "': ")
                       + why);
  // Timing: the flags, else the tools file's cluster section, else 1 s / 5 s.
  millis heartbeat = tools.cluster ? tools.cluster->heartbeat : millis{1000};
  millis timeout = tools.cluster ? tools.cluster->timeout : millis{5000};
  for (auto [flag, text, out] : {std::make_tuple("--heartbeat", &f.heartbeat, &heartbeat),
                                 std::make_tuple("--timeout", &f.timeout, &timeout)}) {
    if (text->empty())
      continue;
    auto d = parse_duration(*text);
    if (!d || d->count() <= 0)
      return usage_error(std::string{flag} + " '" + *text
                         + "': expected a positive duration such as 500ms, 1s or 2m");
    *out = *d;
  }
  if (heartbeat >= timeout)
    return usage_error("the heartbeat (" + to_duration_string(heartbeat)
                       + ") must be shorter than the timeout (" + to_duration_string(timeout)
                       + ")");
  auto supervisor = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":"
                    + std::to_string(port);

  // The log, in serve's format (runtime/logging.hpp); ended last, once the
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
  auto main_thread = pthread_self();

  std::mutex mtx;
  std::condition_variable cv;
  bool stop_requested = false;
  std::atomic<bool> refused{false};
  std::mutex out_mtx;
  std::mutex repeat_mtx;
  std::string last_event;
  std::chrono::steady_clock::time_point last_logged;
  size_t repeats = 0;

  // The node runs on a thread of its own; this one only waits for a signal
  // (a thread blocked in sigwait must not call into CAF, see runtime.hpp).
  std::thread node_thread{[&] {
    caf::actor_system_config cfg;
    cfg.set("logger.console", caf::atom("none"));
    configure_scheduler(cfg);
    add_cluster_types(cfg);
    configure_middleman(cfg, heartbeat, timeout, tls ? &*tls : nullptr);
    caf::actor_system sys{cfg};
    worker_options wo;
    wo.host = host;
    wo.port = static_cast<uint16_t>(port);
    wo.secret = secret;
    wo.tls = tls;
    wo.self.name = name;
    wo.self.slots = static_cast<uint32_t>(f.slots);
    for (auto& kv : tools.tools)
      wo.self.tools.push_back(kv.first);
    wo.tools = tools.tools; // the argv templates and limits of `tool` steps placed here
    wo.heartbeat = heartbeat;
    wo.timeout = timeout;
    wo.log = [&, name, supervisor](const std::string& event, const std::string& detail) {
      if (event == "joined") {
        spdlog::info("event=joined supervisor={} name={}", log_value(supervisor),
                     log_value(name));
        std::lock_guard<std::mutex> guard{out_mtx};
        std::cout << "joined " << supervisor << " as " << name << std::endl;
      } else if (event == "refused") {
        spdlog::error("event=refused reason={} supervisor={} name={}", log_value(detail),
                      log_value(supervisor), log_value(name));
      } else if (event == "lost") {
        spdlog::warn("event=lost reason={} supervisor={} name={}", log_value(detail),
                     log_value(supervisor), log_value(name));
      } else {
        // Retries while the supervisor is unreachable come every heartbeat:
        // the first is logged, then one per interval with the number skipped.
        auto now = std::chrono::steady_clock::now();
        std::lock_guard<std::mutex> guard{repeat_mtx};
        if (event == last_event && now - last_logged < repeat_log_interval) {
          ++repeats;
          return;
        }
        spdlog::info("event={} detail={} supervisor={} name={}{}", log_value(event),
                     log_value(detail), log_value(supervisor), log_value(name),
                     repeats > 0 ? " repeated=" + std::to_string(repeats) : std::string{});
        last_event = event;
        last_logged = now;
        repeats = 0;
        return;
      }
      std::lock_guard<std::mutex> guard{repeat_mtx};
      last_event.clear();
      repeats = 0;
    };
    wo.on_refused = [&, supervisor](const std::string& reason) {
      if (refused.exchange(true))
        return;
      {
        std::lock_guard<std::mutex> guard{out_mtx};
        std::cerr << "error: the supervisor at " << supervisor << " refused this worker: "
                  << reason << "\n";
      }
      pthread_kill(main_thread, SIGUSR1); // wake the signal thread
    };
    auto node = spawn_worker_node(sys, std::move(wo));
    spdlog::info("event=worker.start supervisor={} name={} slots={} tools={} tls={}",
                 log_value(supervisor), log_value(name), f.slots, tools.tools.size(),
                 tls ? "on" : "off");
    {
      std::unique_lock<std::mutex> lock{mtx};
      cv.wait(lock, [&] { return stop_requested; });
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
  }};

  int sig = 0;
  sigwait(&set, &sig);
  if (sig != SIGUSR1)
    spdlog::info("event=signal signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  {
    std::lock_guard<std::mutex> guard{mtx};
    stop_requested = true;
  }
  cv.notify_all();
  node_thread.join();
  return refused ? exit_usage : exit_ok;
}

} // namespace canopy::core
