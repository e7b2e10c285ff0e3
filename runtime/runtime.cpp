#include "runtime/runtime.hpp"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/publish.hpp>

#include "actors/blocking.hpp"
#include "actors/error.hpp"
#include "actors/event_forwarder.hpp"
#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/slot_pool.hpp"
#include "actors/stop_protocol.hpp"
#include "actors/stop_watcher.hpp"
#include "actors/store_writer.hpp"
#include "actors/timer.hpp"
#include "actors/tls.hpp"
#include "persistence/error.hpp"
#include "runtime/error.hpp"
#include "runtime/memory.hpp"

namespace canopy {

// -- free functions ------------------------------------------------------------

std::string default_home() {
  if (auto env = std::getenv("CANOPY_HOME"); env != nullptr && *env != '\0')
    return env;
  return "./.canopy";
}

namespace {

/// The longest a commit through the store writer may take: the writers'
/// lock wait, plus headroom for the commit itself.
millis commit_bound(const store& db) {
  return db.write_wait() + millis{5000};
}

bool owner_alive(const execution_record& rec) {
  if (rec.owner_pid <= 0)
    return false;
  auto start = process_start_time(rec.owner_pid);
  return start != 0 && start == rec.owner_start;
}

} // namespace

caf::expected<std::vector<std::string>> recover_interrupted(store& db) {
  auto live = db.live();
  if (!live)
    return live.error();
  std::vector<std::string> recovered;
  write_batch batch;
  auto now = now_ms();
  for (auto& rec : *live) {
    if (owner_alive(rec))
      continue;
    auto steps = db.steps(rec.id);
    if (!steps)
      return steps.error();
    for (auto& s : *steps) {
      if (s.status != step_status::running && s.status != step_status::queued)
        continue;
      // The dead owner's subprocess group may live on: kill it, unless the
      // pid now belongs to another process (its start time differs).
      if (s.pid > 0) {
        auto start = process_start_time(s.pid);
        bool leader_is_ours = start != 0 && start == s.pid_start;
        bool leader_gone = start == 0;
        if (leader_is_ours || leader_gone)
          ::kill(static_cast<pid_t>(-s.pid), SIGKILL);
      }
      reset_step_record(s, step_reason::interrupted, now);
      batch.events.push_back(
        make_event(rec, "step.pending", now, s.step, "pending", "interrupted"));
      batch.steps.push_back(std::move(s));
    }
    rec.status = execution_status::stopped;
    rec.reason = "interrupted";
    rec.ended_at = now;
    batch.events.push_back(
      make_event(rec, "execution.stopped", now, {}, "stopped", "interrupted"));
    recovered.push_back(rec.id);
    batch.executions.push_back(std::move(rec));
  }
  // The store answers the stop requests of what this batch ends, and any
  // request an older release left pending for an execution that ended.
  if (auto pending = db.pending_stops())
    for (auto& r : *pending)
      if (auto target = db.execution(r.target); !target || is_terminal(target->status))
        batch.settle_stops.push_back(r.target);
  if (!batch.empty())
    if (auto err = db.commit(batch))
      return err;
  return recovered;
}

caf::error check_inputs(const graph& g, const json& inputs) {
  if (!inputs.is_object())
    return make_error(runtime_errc::invalid_input, "inputs must be a JSON object");
  for (auto& name : g.inputs)
    if (!inputs.contains(name))
      return make_error(runtime_errc::invalid_input,
                        "missing input '" + name + "' (graph '" + g.name + "' declares it)");
  for (auto& kv : inputs.items())
    if (std::find(g.inputs.begin(), g.inputs.end(), kv.key()) == g.inputs.end())
      return make_error(runtime_errc::invalid_input,
                        "undeclared input '" + kv.key() + "' (graph '" + g.name
                          + "' does not declare it)");
  return caf::none;
}

// -- subscription -------------------------------------------------------------

subscription make_subscription(caf::actor_system& sys, const caf::actor& writer,
                               std::shared_ptr<store> db,
                               std::function<void(const event_record&)> f, std::string root_id) {
  subscription s;
  s.writer_ = writer;
  s.subscriber_ = spawn_event_forwarder(sys, writer, std::move(db), std::move(f),
                                        std::move(root_id));
  return s;
}

subscription::~subscription() {
  cancel();
}

void subscription::cancel() {
  if (!subscriber_)
    return;
  // Drain: the writer answers after sending every committed event, the
  // forwarder after delivering everything in its mailbox.
  auto& sys = subscriber_->home_system();
  (void) blocking_request(sys, writer_, std::nullopt, unsubscribe_atom::value, subscriber_);
  (void) blocking_request(sys, subscriber_, std::nullopt, flush_atom::value);
  caf::anon_send_exit(subscriber_, caf::exit_reason::user_shutdown);
  await_down(sys, subscriber_);
  subscriber_ = nullptr;
  writer_ = nullptr;
}

// -- execution handle --------------------------------------------------------------

caf::expected<execution_record> execution_handle::wait() const {
  if (actor_) {
    caf::error reason;
    await_down(rt_->system(), actor_, std::nullopt, &reason);
    // An execution quits normally once its end is recorded; any other reason
    // is what kept it from recording (e.g. `store_busy`).
    if (reason && reason != caf::exit_reason::normal)
      return reason;
  }
  return status();
}

bool execution_handle::wait_for(millis timeout) const {
  if (!actor_)
    return true;
  return await_down(rt_->system(), actor_, timeout);
}

caf::expected<execution_record> execution_handle::status() const {
  return rt_->db()->execution(id_);
}

bool execution_handle::running() const {
  return actor_ && !actor_->getf(caf::abstract_actor::is_terminated_flag);
}

subscription execution_handle::subscribe(std::function<void(const event_record&)> f) const {
  return make_subscription(rt_->system(), rt_->writer_, rt_->db_, std::move(f), root_id_);
}

caf::expected<stop_ticket> execution_handle::stop(stop_mode mode) const {
  return rt_->stop(id_, mode, "library");
}

// -- runtime ---------------------------------------------------------------------------

caf::expected<std::unique_ptr<runtime>> runtime::open(runtime_options opts) {
  if (opts.start_permits == 0)
    return make_error(runtime_errc::invalid_input,
                      "runtime_options.start_permits is 0: no execution could ever start "
                      "(at least 1)");
  if (opts.home.empty())
    opts.home = default_home();
  // A step that closes its stdin must not kill us with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  raise_open_files_limit();
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
  if (opts.scheduler_threads > 0)
    rt->cfg_->set("scheduler.max-threads", opts.scheduler_threads);
  rt->cfg_->set("logger.console", caf::atom("none"));
  // CAF's idle workers poll and sleep; the default relaxed sleep (10 ms) puts
  // up to 10 ms on every hop between actors once the system idles, e.g. on each
  // commit acknowledgement. 1 ms keeps step latency low at negligible CPU.
  rt->cfg_->set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds{1}});
  if (opts.cluster) {
    auto& c = *opts.cluster;
    // CAF aborts the process when it cannot load the files on a connection.
    if (c.tls)
      if (auto problems = check_tls_files(*c.tls); !problems.empty())
        return make_error(runtime_errc::cluster_port,
                          "cluster.tls." + problems.front().field + ": "
                            + problems.front().message);
    add_cluster_types(*rt->cfg_);
    configure_middleman(*rt->cfg_, c.heartbeat, c.timeout, c.tls ? &*c.tls : nullptr);
  }
  rt->sys_ = std::make_unique<caf::actor_system>(*rt->cfg_);
  if (opts.on_commit)
    rt->db_->on_commit(opts.on_commit);
  rt->writer_ = spawn_store_writer(*rt->sys_, rt->db_);
  rt->slots_ = spawn_slot_pool(*rt->sys_, opts.max_parallel);
  auto svc = std::make_shared<execution_services>();
  svc->db = rt->db_;
  svc->writer = rt->writer_;
  svc->slots = rt->slots_;
  svc->gate = std::make_shared<start_gate>(opts.start_permits);
  rt->timer_ = spawn_timer(*rt->sys_);
  svc->timer = rt->timer_;
  if (opts.max_running > 0) {
    rt->admission_ = spawn_slot_pool(*rt->sys_, opts.max_running);
    svc->admission = rt->admission_;
  }
  svc->fns = rt->fns_;
  svc->pool = std::make_shared<fn_pool>(opts.fn_threads);
  svc->directory = std::make_shared<execution_directory>();
  svc->graves = std::make_shared<graveyard<execution_machine>>();
  rt->keeper_ = spawn_memory_keeper(*rt->sys_, [dir = svc->directory, dead = svc->graves] {
    dir->sweep_if_settled();
    dead->reap_if_settled();
  });
  svc->tools = std::make_shared<const tool_table>(opts.tools);
  svc->child_options = rt->graph_options();
  std::weak_ptr<store> weak_db = rt->db_;
  svc->find_graph = [weak_db](const std::string& owner, const std::string& name,
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
  for (auto& kv : opts.tools)
    if (kv.second.max_parallel > 0)
      svc->tool_slots[kv.first] = spawn_slot_pool(*rt->sys_, kv.second.max_parallel);
  auto raw = rt.get();
  svc->find_agent = [raw](const std::string& owner, const std::string& name) {
    return raw->agent_actor(owner, name);
  };
  svc->track_root = [raw](const caf::actor& root) { raw->track(root); };
  svc->owner_pid = ::getpid();
  svc->owner_start = process_start_time(::getpid());
  if (opts.cluster) {
    // Steps are placed through the cluster actor, on this node or a worker.
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
    svc->cluster_tools = co.tools;
    rt->cluster_ = spawn_cluster(*rt->sys_, std::move(co));
    svc->cluster = rt->cluster_;
    svc->cluster_timeout = c.timeout;
    svc->node_name = c.name;
  }
  svc->machine = make_machine_env(*svc);
  rt->svc_ = std::move(svc);
  rt->watcher_ = spawn_stop_watcher(*rt->sys_, rt->svc_);
  if (opts.cluster) {
    auto& c = *opts.cluster;
    auto port = c.tls ? caf::openssl::publish(rt->cluster_, c.port, c.host.c_str(), true)
                      : rt->sys_->middleman().publish(rt->cluster_, c.port, c.host.c_str(), true);
    if (!port)
      return make_error(runtime_errc::cluster_port,
                        "cannot open the cluster port " + c.host + ":" + std::to_string(c.port)
                          + ": " + rt->sys_->render(port.error()));
    rt->cluster_port_ = *port;
  }
  return rt;
}

runtime::~runtime() {
  if (!sys_)
    return;
  // Explicit shutdown sequence: agents start no more runs, every live root is
  // stopped (snapshotted with reason `shutdown`), their downs are awaited,
  // then the agents and the services stop.
  std::map<std::pair<std::string, std::string>, caf::actor> agents;
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
      self->send(r, stop_atom::value, std::string{"shutdown"}, false, std::string{});
    }
    for (size_t i = 0; i < roots.size(); ++i)
      self->receive([](caf::down_msg&) {});
    for (auto& kv : agents)
      self->send_exit(kv.second, caf::exit_reason::user_shutdown);
    self->send_exit(watcher_, caf::exit_reason::user_shutdown);
    if (cluster_)
      self->send_exit(cluster_, caf::exit_reason::user_shutdown);
    if (admission_)
      self->send_exit(admission_, caf::exit_reason::user_shutdown);
    self->send_exit(slots_, caf::exit_reason::user_shutdown);
    self->send_exit(timer_, caf::exit_reason::user_shutdown);
    self->send_exit(keeper_, caf::exit_reason::user_shutdown);
    for (auto& kv : svc_->tool_slots)
      self->send_exit(kv.second, caf::exit_reason::user_shutdown);
    self->send_exit(writer_, caf::exit_reason::user_shutdown);
  }
  watcher_ = nullptr;
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

// -- agents ----------------------------------------------------------------------------

caf::expected<caf::actor> runtime::agent_actor(const std::string& owner,
                                               const std::string& name) {
  auto rec = db_->agent(owner, name);
  if (!rec)
    return rec.error();
  std::lock_guard<std::mutex> guard{agents_mtx_};
  if (closing_)
    return make_error(runtime_errc::shutting_down, "the node is shutting down");
  auto& a = agents_[{owner, name}];
  if (!a)
    a = spawn_agent(*sys_, owner, name, svc_);
  return a;
}

caf::expected<std::pair<agent_record, bool>> runtime::create_agent(const std::string& owner,
                                                                   const std::string& name,
                                                                   const graph& g,
                                                                   busy_policy on_busy,
                                                                   const std::string& node) {
  // Creations of this process are serialised, so `created` is exact.
  std::lock_guard<std::mutex> guard{register_mtx_};
  agent_record x;
  x.owner = owner;
  x.name = name;
  x.graph = to_stored(g);
  x.on_busy = on_busy;
  x.node = node;
  x.created_at = x.updated_at = now_ms();
  auto old = db_->agent(owner, name);
  bool created = !old;
  if (old)
    x.created_at = old->created_at;
  else if (!is(old.error(), persistence_errc::not_found))
    return old.error();
  write_batch batch;
  batch.agents.push_back(x);
  if (auto err = blocking_request(*sys_, writer_, commit_bound(*db_), write_atom::value, std::move(batch)))
    return err;
  return std::make_pair(std::move(x), created);
}

caf::expected<agent_reply> runtime::send_to_agent(const std::string& owner,
                                                  const std::string& name, json message,
                                                  const std::string& who) {
  auto a = agent_actor(owner, name);
  if (!a)
    return a.error();
  return blocking_ask<agent_reply>(*sys_, *a, std::nullopt, message_atom::value, std::move(message), who);
}

caf::expected<std::string> runtime::cancel_agent(const std::string& owner,
                                                 const std::string& name,
                                                 const std::string& who, millis wait) {
  auto ag = db_->agent(owner, name);
  if (!ag)
    return ag.error();
  auto runs = db_->agent_runs(owner, name);
  if (!runs)
    return runs.error();
  // Stop the outermost runs only: a run inside another one's tree stops
  // with it (reason `parent_stopped`).
  std::set<std::string> ids;
  for (auto& r : *runs)
    ids.insert(r.first);
  std::vector<execution_record> targets;
  for (auto& r : *runs) {
    auto rec = db_->execution(r.first);
    if (!rec || !is_stoppable(rec->status))
      continue;
    bool inner = false;
    for (auto up = rec->parent_id; !up.empty() && !inner;) {
      inner = ids.count(up) != 0;
      auto parent = db_->execution(up);
      up = parent ? parent->parent_id : std::string{};
    }
    if (!inner)
      targets.push_back(std::move(*rec));
  }
  if (targets.empty())
    return std::string{"no_execution"};
  std::vector<stop_ticket> tickets;
  for (auto& rec : targets) {
    write_batch cancelled;
    cancelled.events.push_back(make_agent_event(rec, "agent.cancelled",
                                                {{"agent", name}, {"by", who}}));
    auto t = request_stop(*sys_, stop_ctx(), rec.id, stop_mode::graceful, who,
                          std::move(cancelled));
    if (!t)
      return t.error();
    tickets.push_back(std::move(*t));
  }
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (auto& t : tickets)
    canopy::await_stop(*sys_, stop_ctx(), t,
                       std::max(millis{0}, std::chrono::duration_cast<millis>(
                                             deadline - std::chrono::steady_clock::now())));
  return std::string{"cancelled"};
}

bool runtime::register_fn(const std::string& name, fn_function f) {
  return fns_->add(name, std::move(f));
}

parse_options runtime::graph_options() const {
  parse_options opts;
  opts.fns = fns_->names();
  for (auto& kv : opts_.tools)
    opts.tools.insert(kv.first);
  // With a cluster, a tool that a worker announces is known too.
  if (svc_ && svc_->cluster_tools)
    for (auto& name : svc_->cluster_tools->names())
      opts.tools.insert(name);
  opts.allow_inline = opts_.allow_inline_commands;
  if (!opts_.allow_graph_files)
    opts.load_file = [](const std::string&) -> caf::expected<json> {
      return make_error(persistence_errc::invalid_graph,
                        "graph files cannot be read on this node: name a registered graph "
                        "or give the graph inline");
    };
  return opts;
}

parse_result runtime::parse_document(const json& doc) const {
  return parse_graph(doc, db_->home(), graph_options());
}

caf::expected<registered_graph> runtime::register_graph(const std::string& owner,
                                                        const std::string& name, json doc,
                                                        size_t max_graphs) {
  // Registrations of this process are serialised, so the version read here
  // is the one committed (a server owns its home).
  std::lock_guard<std::mutex> guard{register_mtx_};
  registered_graph x;
  x.owner = owner;
  x.name = name;
  x.document = std::move(doc);
  x.created_at = now_ms();
  auto newest = db_->registered(owner, name);
  if (newest)
    x.version = newest->version + 1;
  else if (!is(newest.error(), persistence_errc::not_found))
    return newest.error();
  else if (max_graphs > 0) {
    auto count = db_->registered_count(owner);
    if (!count)
      return count.error();
    if (*count >= max_graphs)
      return make_error(runtime_errc::quota_exceeded,
                        "quota exceeded: user '" + owner + "' has " + std::to_string(*count)
                          + " graphs registered, the most quotas.graphs allows ("
                          + std::to_string(max_graphs) + "); register a new version of one "
                          "of them instead, or raise the quota");
    x.version = 1;
  } else {
    x.version = 1;
  }
  write_batch batch;
  batch.registered.push_back(x);
  if (auto err = blocking_request(*sys_, writer_, commit_bound(*db_), write_atom::value, std::move(batch)))
    return err;
  return x;
}

bool runtime::wait_settled(const std::string& id, millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto settled = [&] {
    auto rec = db_->execution(id);
    return !rec || !is_stoppable(rec->status);
  };
  if (auto a = svc_->directory->find(id)) {
    // Live here: its final record is committed before its actor is down.
    if (!await_down(*sys_, a, timeout))
      return settled();
  }
  // Elsewhere: poll the store.
  for (millis pause{2};; pause = std::min(pause * 2, millis{50})) {
    if (settled())
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(pause);
  }
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

size_t runtime::live_executions() const {
  return svc_->directory->size();
}

parse_result runtime::parse_file(const std::string& path) const {
  return parse_graph_file(path, graph_options());
}

caf::actor_system& runtime::system() {
  return *sys_;
}

caf::expected<execution_handle> runtime::start(std::shared_ptr<const graph> g, json inputs,
                                               const start_options& opts) {
  if (auto err = check_inputs(*g, inputs))
    return err;
  execution_init init;
  auto& r = init.record;
  r.id = make_execution_id();
  r.graph = g->name;
  r.root_id = r.id;
  r.inputs = std::move(inputs);
  r.created_at = now_ms();
  r.owner_pid = svc_->owner_pid;
  r.owner_start = svc_->owner_start;
  r.owner = opts.owner;
  r.graph_version = opts.graph_version;
  init.graph = std::move(g);
  // Durable before the id is handed out.
  auto batch = make_queued_batch(r, *init.graph);
  if (auto err = blocking_request(*sys_, writer_, commit_bound(*db_), write_atom::value, std::move(batch)))
    return err;
  execution_handle h;
  h.rt_ = this;
  h.id_ = r.id;
  h.root_id_ = r.id;
  h.actor_ = spawn_execution(*sys_, std::move(init), svc_);
  track(h.actor_);
  return h;
}

caf::expected<prune_result> runtime::prune(const retention_rules& rules, int64_t now) {
  return canopy::prune(*db_, rules, now, false, [this](write_batch batch) {
    return blocking_request(*sys_, writer_, commit_bound(*db_), write_atom::value,
                            std::move(batch));
  });
}

caf::error runtime::delete_tree(const std::string& id) {
  auto rec = db_->execution(id);
  if (!rec)
    return rec.error();
  if (rec->root_id != id)
    return make_error(runtime_errc::wrong_state, "execution " + id + " is a child of "
                                                   + rec->root_id + ": delete its root");
  auto live = [&] {
    return make_error(runtime_errc::wrong_state,
                      "the tree of execution " + id + " is live (its root is "
                        + to_string(rec->status) + "): stop it, or wait until it has settled");
  };
  if (!is_terminal(rec->status))
    return live();
  // The store deletes nothing of a tree with a live execution (a resume
  // racing this included): read the root back to know.
  write_batch batch;
  batch.deleted_trees.push_back(id);
  if (auto err = blocking_request(*sys_, writer_, commit_bound(*db_), write_atom::value,
                                  std::move(batch)))
    return err;
  auto again = db_->execution(id);
  if (again) {
    rec = std::move(*again);
    return live();
  }
  if (!is(again.error(), persistence_errc::not_found))
    return again.error();
  return caf::none;
}

caf::expected<execution_handle> runtime::resume(const std::string& id,
                                                std::optional<double> budget) {
  auto rec = db_->execution(id);
  if (!rec)
    return rec.error();
  if (!is_terminal(rec->status))
    return make_error(runtime_errc::wrong_state,
                      "execution " + id + " is " + to_string(rec->status));
  execution_handle h;
  h.rt_ = this;
  h.id_ = id;
  h.root_id_ = rec->root_id;
  if (rec->status == execution_status::completed)
    return h; // nothing to do: the document is final
  // The step records decode on a thread of their own meanwhile (reads may
  // run on any thread): at 100,000 steps each read takes ~100 ms. Without a
  // thread to spare, `get` below reads them.
  auto steps_read = std::async(std::launch::async | std::launch::deferred,
                               [db = db_, id] { return db->steps(id); });
  auto stored = db_->graph(id);
  if (!stored)
    return stored.error();
  // The store keeps only graphs that validated: load without validating
  // again. A tool or function gone from this node fails its step when it
  // starts; inline commands this node refuses are refused here.
  parse_options opts;
  opts.allow_inline = opts_.allow_inline_commands;
  auto parsed = load_stored_graph(std::move(stored->document), stored->base_dir, stored->files,
                                  opts);
  if (!parsed) {
    std::string msg = "stored graph cannot run here:";
    for (auto& e : parsed.errors)
      msg += "\n  " + to_string(e);
    return make_error(persistence_errc::invalid_graph, msg);
  }
  auto steps = steps_read.get();
  if (!steps)
    return steps.error();
  execution_init init;
  init.record = std::move(*rec);
  init.graph = parsed.value;
  init.steps = std::move(*steps);
  init.budget = budget;
  h.actor_ = spawn_execution(*sys_, std::move(init), svc_);
  track(h.actor_);
  return h;
}

caf::expected<stop_ticket> runtime::stop(const std::string& id, stop_mode mode,
                                         const std::string& who) {
  return request_stop(*sys_, stop_ctx(), id, mode, who);
}

stop_result runtime::await_stop(const stop_ticket& ticket, millis wait) {
  return canopy::await_stop(*sys_, stop_ctx(), ticket, wait);
}

stop_context runtime::stop_ctx() const {
  return {db_, writer_, svc_->directory};
}

subscription runtime::subscribe(std::function<void(const event_record&)> f) {
  return make_subscription(*sys_, writer_, db_, std::move(f), {});
}

} // namespace canopy
