#include "runtime/server/server.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "persistence/error.hpp"
#include "runtime/node/error.hpp"
#include "runtime/server/http_api.hpp"
#include "runtime/server/http_listener.hpp"
#include "runtime/node/logging.hpp"
#include "runtime/server/metrics.hpp"
#include "runtime/node/pruner.hpp"
#include "runtime/node/runtime.hpp"

namespace canopy::core {

namespace {

using api::api_server;
using api::notifier;
using api::await_resumed;

/// The runtime's options from the node config: home, limits, tools,
/// providers, the metrics' hooks and, when configured, the cluster port
/// (`cluster_host` its host). @returns false after logging what is wrong
/// (an unusable configuration).
bool runtime_options_of(const node_config& cfg, const std::shared_ptr<metrics>& m,
                        runtime_options& ro, std::string& cluster_host) {
  ro.home = cfg.home.empty() ? default_home() : cfg.home;
  ro.max_parallel = cfg.max_parallel;
  ro.tools = cfg.tools;
  ro.providers = cfg.providers;
  ro.allow_inline_commands = cfg.allow_inline_commands;
  ro.allow_graph_files = false;
  ro.on_commit = [m](double s) { m->observe_commit(s); };
  ro.on_fenced = [m](const std::string& root) {
    m->count_fenced();
    spdlog::warn("event=fenced execution={} why=\"taken over by another process\"", root);
  };
  if (!cfg.cluster || cfg.cluster->listen.empty())
    return true;
  auto& cc = *cfg.cluster;
  int cluster_port = 0;
  if (!split_host_port(cc.listen, cluster_host, cluster_port)) {
    spdlog::error("event=config error=\"cluster.listen: expected HOST:PORT, got '{}'\"", cc.listen);
    return false;
  }
  cluster_listen cl;
  cl.host = cluster_host;
  cl.port = static_cast<uint16_t>(cluster_port);
  cl.secret = cc.secret;
  if (cl.secret.empty())
    if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
      cl.secret = env;
  if (cl.secret.empty()) {
    spdlog::error("event=config error=\"the cluster needs a secret: cluster.secret in the "
                  "config, or $CANOPY_CLUSTER_SECRET\"");
    return false;
  }
  cl.tls = cc.tls;
  cl.heartbeat = cc.heartbeat;
  cl.timeout = cc.timeout;
  cl.log = [](const std::string& event, const std::string& node, const std::string& detail) {
    auto level = event == "joined" ? spdlog::level::info : spdlog::level::warn;
    spdlog::log(level, "event=node.{} node={} detail={}", log_value(event), log_value(node),
                log_value(detail));
  };
  ro.cluster = std::move(cl);
  return true;
}

/// How many interrupted roots `resume_at_start` reads at a time.
constexpr size_t resume_page = 1000;

/// Resumes, before the port opens, every root left interrupted with
/// `resume_interrupted`; without it, the interrupted roots that hold nothing
/// but waits (they run nothing until a signal or a deadline), whoever
/// recovered them: a reader's recovery before this start leaves them the
/// same. @returns false when the store could not be read (logged).
bool resume_at_start(runtime& rt, bool resume_interrupted) {
  auto db = rt.db();
  // The interrupted roots only (their own index range, not every stopped
  // root of the history), page by page, newest first.
  execution_filter f;
  f.interrupted_only = true;
  f.limit = resume_page;
  for (;;) {
    auto stopped = db->list(f);
    if (!stopped) {
      spdlog::error("event=store.read error=\"{}\"", message_of(stopped.error()));
      return false;
    }
    for (auto& rec : *stopped) {
      if (!(resume_interrupted || only_waits_interrupted(*db, rec.id)))
        continue;
      auto h = rt.resume(rec.id);
      if (!h) {
        spdlog::error("event=execution.resume execution={} error=\"{}\"", rec.id,
                      message_of(h.error()));
        continue;
      }
      // Visible as resumed before the port opens: a client that connects
      // right after `listening on` never sees it still stopped.
      await_resumed(*db, *h, rec);
      spdlog::info("event=execution.resume execution={} why={}", rec.id,
                   resume_interrupted ? "resume-interrupted" : "waits");
    }
    if (stopped->size() < resume_page)
      return true;
    f.before = stopped->back().id;
  }
}

/// Prints `listening on HOST:PORT` (and `cluster on ADDRESS`) to stdout,
/// the lines clients and scripts wait for, and logs them.
void announce(const std::string& host, int bound, const runtime_options& ro,
              const std::string& cluster_host, const runtime& rt, bool tls) {
  std::cout << "listening on " << host << ":" << bound << std::endl;
  spdlog::info("event=listening address={}:{} home={} tls={}", host, bound, ro.home,
               tls ? "on" : "off");
  if (!ro.cluster)
    return;
  auto address = (cluster_host.find(':') != std::string::npos ? "[" + cluster_host + "]"
                                                               : cluster_host)
                 + ":" + std::to_string(rt.cluster_port());
  std::cout << "cluster on " << address << std::endl;
  spdlog::info("event=cluster.listening address={} name={} tls={}", address, ro.cluster->name,
               ro.cluster->tls ? "on" : "off");
}

/// Runs the node on this thread until `stop_requested` is set.
/// @returns the exit code.
int serve(const server_options& opts, std::atomic<bool>& stop_requested, std::mutex& mtx,
          std::condition_variable& cv, pthread_t main_thread) {
  auto& cfg = opts.config;
  auto fatal = [&](int code) {
    pthread_kill(main_thread, SIGUSR1); // wake the signal thread
    return code;
  };
  std::string host;
  int port = 0;
  if (!split_host_port(cfg.listen, host, port)) {
    spdlog::error("event=config error=\"listen: expected HOST:PORT, got '{}'\"", cfg.listen);
    return fatal(2);
  }
  if (cfg.users.empty()) {
    spdlog::error("event=config error=\"no users: configure users in --config\"");
    return fatal(2);
  }
  auto m = std::make_shared<metrics>();
  runtime_options ro;
  std::string cluster_host;
  if (!runtime_options_of(cfg, m, ro, cluster_host))
    return fatal(2);
  auto rt = runtime::open(ro);
  if (!rt) {
    auto msg = message_of(rt.error());
    // A cluster port that cannot be opened is the node's address, not its
    // store: an unusable configuration, as an HTTP port that cannot be bound.
    if (is(rt.error(), runtime_errc::cluster_port)) {
      spdlog::error("event=cluster.listen address={} error={}", cfg.cluster->listen,
                    log_value(msg));
      return fatal(2);
    }
    spdlog::error("event=store.open home={} error=\"{}\"", ro.home, msg);
    return fatal(5);
  }
  for (auto& id : (*rt)->recovered())
    spdlog::warn("event=execution.interrupted execution={}", id);
  notifier events;
  auto db = (*rt)->db();
  auto sub = (*rt)->subscribe([m, db, &events](const event_record& e) {
    m->on_event(e, *db);
    auto family = family_of(e.type);
    if (family == event_family::execution || family == event_family::stop)
      spdlog::info("event={} execution={} root={} status={} reason={}", to_string(e.type),
                   e.execution_id, e.root_id, to_string(e.status), to_string(e.reason));
    events.bump();
  });
  if (!resume_at_start(**rt, opts.resume_interrupted))
    return fatal(5);
  http_listener svr{http_limits{}, opts.tls};
  svr.set_payload_max_length(cfg.max_request_bytes);
  svr.set_read_timeout(30, 0);
  svr.set_write_timeout(30, 0);
  api_server api{cfg, **rt, *m, events};
  api.install(svr);
  int bound = svr.bind(host, port);
  if (bound < 0) {
    spdlog::error("event=listen address={} error=\"cannot bind\"", cfg.listen);
    sub.cancel();
    return fatal(2);
  }
  std::thread http{[&svr] { svr.listen_after_bind(); }};
  announce(host, bound, ro, cluster_host, **rt, opts.tls != nullptr);
  std::optional<pruner> retention;
  retention.emplace(**rt, *m, cfg.retention);
  {
    std::unique_lock<std::mutex> lock{mtx};
    cv.wait(lock, [&] { return stop_requested.load(); });
  }
  retention.reset();
  // Shutdown sequence: stop taking requests and end the streams, then stop
  // every live execution with reason `shutdown` (snapshotted) and close the
  // store.
  spdlog::info("event=shutdown phase=http");
  events.shutdown();
  api.close();
  svr.stop();
  http.join();
  sub.cancel();
  spdlog::info("event=shutdown phase=executions live={}", (*rt)->live_executions());
  rt->reset();
  spdlog::info("event=shutdown phase=done");
  return 0;
}

} // namespace

int run_server(const server_options& opts) {
  // The log (runtime/node/logging.hpp); ended last, once the node ended.
  process_log logging;
  // Signals are taken by this thread only: block them before any other thread
  // exists (the log's blocks them all), so every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::atomic<bool> stop_requested{false};
  std::mutex mtx;
  std::condition_variable cv;
  std::atomic<int> code{0};
  auto self = pthread_self();
  // The node runs on its own thread; this one only waits for a signal (a
  // thread blocked in sigwait must not call into CAF, see runtime.hpp).
  std::thread node{[&] { code = serve(opts, stop_requested, mtx, cv, self); }};
  int sig = 0;
  sigwait(&set, &sig);
  if (sig != SIGUSR1)
    spdlog::info("event=signal signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  {
    std::lock_guard<std::mutex> guard{mtx};
    stop_requested = true;
  }
  cv.notify_all();
  node.join();
  return code;
}

} // namespace canopy::core
