// The runtime's life: opening a home (services, cluster port) and the
// shutdown sequence that closes it; the node's members and counts.

#include "runtime/node/runtime.hpp"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/publish.hpp>

#include "actors/blocking.hpp"
#include "actors/error.hpp"
#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/slot_pool.hpp"
#include "actors/stop_protocol.hpp"
#include "actors/scheduler.hpp"
#include "actors/signal_desk.hpp"
#include "actors/stop_watcher.hpp"
#include "actors/store_writer.hpp"
#include "actors/timer.hpp"
#include "actors/tls.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"
#include "runtime/node/memory.hpp"

namespace canopy::core {

// -- free functions ------------------------------------------------------------

std::string default_home() {
  if (auto env = std::getenv("CANOPY_HOME"); env != nullptr && *env != '\0')
    return env;
  return "./.canopy";
}

// -- runtime ---------------------------------------------------------------------------

namespace {

/// The actor system's settings: the scheduler, no console log and, with a
/// cluster, the middleman (heartbeat and connection timeout set; TLS files
/// checked first: CAF aborts the process when it cannot load them later).
caf::error configure_system(const runtime_options& opts, caf::actor_system_config& cfg) {
  if (opts.scheduler_threads > 0)
    cfg.set("scheduler.max-threads", opts.scheduler_threads);
  cfg.set("logger.console", caf::atom("none"));
  configure_scheduler(cfg);
  if (!opts.cluster)
    return {};
  auto& c = *opts.cluster;
  if (c.tls)
    if (auto problems = check_tls_files(*c.tls); !problems.empty())
      return make_error(runtime_errc::cluster_port,
                        "cluster.tls." + problems.front().field + ": " + problems.front().message);
  add_cluster_types(cfg);
  configure_middleman(cfg, c.heartbeat, c.timeout, c.tls ? &*c.tls : nullptr);
  return {};
}

/// This node as the cluster's supervisor: its name, slots and tools.
cluster_options supervisor_options(const runtime_options& opts) {
  auto& c = *opts.cluster;
  cluster_options co;
  co.secret = c.secret;
  co.heartbeat = c.heartbeat;
  co.timeout = c.timeout;
  co.self.name = c.name;
  co.self.slots = static_cast<uint32_t>(opts.max_parallel);
  for (auto& kv : opts.tools)
    co.self.tools.push_back(kv.first);
  co.self.supervisor = true;
  co.self.joined_at = co.self.last_seen = now_ms();
  co.log = c.log;
  co.tools = std::make_shared<member_tools>();
  return co;
}

} // namespace

caf::expected<std::unique_ptr<runtime>> runtime::open(runtime_options opts) {
  if (opts.start_permits == 0)
    return make_error(runtime_errc::invalid_input,
                      "runtime_options.start_permits is 0: no execution could ever start "
                      "(at least 1)");
  if (opts.max_parallel == 0)
    return make_error(runtime_errc::invalid_input,
                      "runtime_options.max_parallel is 0: no run or tool step could ever run "
                      "(at least 1)");
  if (opts.home.empty())
    opts.home = default_home();
  // Process-wide, each with its opt-out (runtime_options).
  if (opts.ignore_sigpipe)
    std::signal(SIGPIPE, SIG_IGN); // a step that closes its stdin must not kill us
  if (opts.raise_open_files_limit)
    raise_open_files_limit();
  if (opts.tune_malloc)
    fix_malloc_thresholds(); // large transient buffers go back to the kernel
  auto db = store::open({opts.home});
  if (!db)
    return db.error();
  auto recovered = recover_interrupted(**db);
  if (!recovered)
    return recovered.error();
  std::unique_ptr<runtime> rt{new runtime};
  rt->recovered_ = std::move(*recovered);
  rt->opts_ = opts;
  rt->db_ = std::move(*db);
  rt->fns_ = std::make_shared<fn_registry>();
  rt->cfg_ = std::make_unique<caf::actor_system_config>();
  if (auto err = configure_system(opts, *rt->cfg_))
    return err;
  rt->sys_ = std::make_unique<caf::actor_system>(*rt->cfg_);
  if (opts.on_commit)
    rt->db_->on_commit(opts.on_commit);
  rt->start_services();
  if (opts.cluster)
    if (auto err = rt->publish_cluster())
      return err;
  return rt;
}

void runtime::start_services() {
  auto& opts = opts_;
  store_writer_options wopts;
  wopts.on_fenced = opts.on_fenced;
  writer_ = spawn_store_writer(*sys_, db_, wopts);
  slots_ = spawn_slot_pool(*sys_, opts.max_parallel);
  auto svc = std::make_shared<execution_services>();
  svc->db = db_;
  svc->writer = writer_;
  svc->slots = slots_;
  svc->gate = std::make_shared<start_gate>(opts.start_permits);
  timer_ = spawn_timer(*sys_);
  svc->timer = timer_;
  if (opts.max_running > 0) {
    admission_ = spawn_slot_pool(*sys_, opts.max_running);
    svc->admission = admission_;
  }
  svc->fns = fns_;
  svc->pool = std::make_shared<fn_pool>(opts.fn_threads);
  svc->directory = std::make_shared<execution_directory>();
  svc->graves = std::make_shared<graveyard<execution_machine>>();
  keeper_ = spawn_memory_keeper(*sys_, [dir = svc->directory, dead = svc->graves] {
    dir->sweep_if_settled();
    dead->reap_if_settled();
  });
  svc->tools = std::make_shared<const tool_table>(opts.tools);
  svc->providers = std::make_shared<const std::map<std::string, chat_provider>>(opts.providers);
  svc->child_options = graph_options();
  for (auto& kv : opts.tools)
    if (kv.second.max_parallel > 0)
      svc->tool_slots[kv.first] = spawn_slot_pool(*sys_, kv.second.max_parallel);
  for (auto& kv : opts.providers)
    svc->provider_slots[kv.first] = spawn_slot_pool(*sys_, kv.second.max_parallel);
  add_lookups(*svc);
  svc->owner_pid = ::getpid();
  svc->owner_start = process_start_time(::getpid());
  if (opts.cluster) {
    // Steps are placed through the cluster actor, on this node or a worker.
    auto co = supervisor_options(opts);
    svc->cluster_tools = co.tools;
    cluster_ = spawn_cluster(*sys_, std::move(co));
    svc->cluster = cluster_;
    svc->cluster_timeout = opts.cluster->timeout;
    svc->node_name = opts.cluster->name;
  }
  desk_ = spawn_signal_desk(*sys_, db_, armed_waits_);
  svc->desk = desk_;
  svc->machine = make_machine_env(*svc);
  svc_ = std::move(svc);
  watcher_ = spawn_stop_watcher(*sys_, svc_);
}

void runtime::add_lookups(execution_services& svc) {
  std::weak_ptr<store> weak_db = db_;
  svc.find_graph = [weak_db](const std::string& owner, const std::string& name,
                             const parse_options& popts) {
    parse_result out;
    auto db = weak_db.lock();
    auto rg = db ? db->registered(owner, name)
                 : caf::expected<registered_graph>{make_error(persistence_errc::io_error,
                                                              "the store is closed")};
    if (!rg) {
      out.errors.push_back({"", message_of(rg.error()), ""});
      return out;
    }
    return parse_graph(rg->document, db->home(), popts);
  };
  svc.find_agent = [this](const std::string& owner, const std::string& name) {
    return agent_of(owner, name);
  };
  svc.track_root = [this](const caf::actor& root) { track(root); };
}

caf::error runtime::publish_cluster() {
  auto& c = *opts_.cluster;
  auto port = c.tls ? caf::openssl::publish(cluster_, c.port, c.host.c_str(), true)
                    : sys_->middleman().publish(cluster_, c.port, c.host.c_str(), true);
  if (!port)
    return make_error(runtime_errc::cluster_port,
                      "cannot open the cluster port " + c.host + ":" + std::to_string(c.port)
                        + ": " + sys_->render(port.error()));
  cluster_port_ = *port;
  return {};
}

runtime::~runtime() {
  if (!sys_)
    return;
  // Explicit shutdown sequence: agents start no more runs, every live root is
  // stopped (snapshotted with reason `shutdown`), their downs are awaited,
  // then the agents and the services stop.
  std::map<std::pair<std::string, std::string>, agent_actor> agents;
  {
    std::lock_guard<std::mutex> guard{agents_mtx_};
    closing_ = true;
    agents.swap(agents_);
  }
  {
    caf::scoped_actor self{*sys_};
    for (auto& kv : agents)
      self->send(kv.second, close_atom::value);
    std::vector<caf::actor> roots;
    {
      std::lock_guard<std::mutex> guard{roots_mtx_};
      roots.swap(roots_);
    }
    for (auto& r : roots) {
      self->monitor(r);
      self->send(r, make_stop_message(stop_reason::shutdown));
    }
    for (size_t i = 0; i < roots.size(); ++i)
      self->receive([](caf::down_msg&) {});
    for (auto& kv : agents)
      self->send_exit(kv.second, caf::exit_reason::user_shutdown);
    self->send_exit(watcher_, caf::exit_reason::user_shutdown);
    self->send_exit(desk_, caf::exit_reason::user_shutdown);
    if (cluster_)
      self->send_exit(cluster_, caf::exit_reason::user_shutdown);
    if (admission_)
      self->send_exit(admission_, caf::exit_reason::user_shutdown);
    self->send_exit(slots_, caf::exit_reason::user_shutdown);
    self->send_exit(timer_, caf::exit_reason::user_shutdown);
    self->send_exit(keeper_, caf::exit_reason::user_shutdown);
    for (auto* pools : {&svc_->tool_slots, &svc_->provider_slots})
      for (auto& kv : *pools)
        self->send_exit(kv.second, caf::exit_reason::user_shutdown);
    self->send_exit(writer_, caf::exit_reason::user_shutdown);
  }
  watcher_ = nullptr;
  desk_ = nullptr;
  cluster_ = nullptr;
  timer_ = nullptr;
  keeper_ = nullptr;
  writer_ = nullptr;
  slots_ = nullptr;
  svc_.reset();
  sys_.reset(); // waits for every actor
}

void runtime::track(const caf::actor& root) {
  std::lock_guard<std::mutex> guard{roots_mtx_};
  // Forget roots that are gone so a long-lived runtime does not grow.
  roots_.erase(std::remove_if(roots_.begin(), roots_.end(),
                              [](const caf::actor& a) {
                                return a->getf(caf::abstract_actor::is_terminated_flag);
                              }),
               roots_.end());
  roots_.push_back(root);
}

std::vector<node_info> runtime::nodes() {
  if (cluster_)
    if (auto members = blocking_ask<std::vector<node_info>>(*sys_, cluster_, millis{5000}, nodes_atom::value))
      return std::move(*members);
  node_info self;
  self.name = "local";
  self.slots = static_cast<uint32_t>(opts_.max_parallel);
  for (auto& kv : opts_.tools)
    self.tools.push_back(kv.first);
  self.supervisor = true;
  return {self};
}

size_t runtime::waiting_steps() const {
  return armed_waits_->load(std::memory_order_relaxed);
}

size_t runtime::live_executions() const {
  return svc_->directory->size();
}

caf::actor_system& runtime::system() {
  return *sys_;
}

} // namespace canopy::core
