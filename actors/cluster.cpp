#include "actors/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <set>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/manager.hpp>

#include "actors/error.hpp"
#include "actors/messages.hpp"
#include "actors/step_runner.hpp"
#include "persistence/error.hpp"
#include "persistence/reference.hpp"

namespace canopy::core {

void add_cluster_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<node_info>("canopy_node_info");
  cfg.add_message_type<std::vector<node_info>>("canopy_node_infos");
  cfg.add_message_type<remote_job>("canopy_remote_job");
}

void configure_middleman(caf::actor_system_config& cfg, millis heartbeat, millis timeout,
                         const tls_files* tls) {
  cfg.load<caf::io::middleman>();
  // Both are off in CAF by default: a vanished peer would never be noticed.
  cfg.set("middleman.heartbeat-interval", caf::timespan{heartbeat});
  cfg.set("middleman.connection-timeout", caf::timespan{timeout});
  if (!tls)
    return;
  // CAF 0.17 reads these members on each connection (libcaf_openssl's
  // session.cpp): any of them set turns authentication on, i.e.
  // SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT against `cafile`.
  cfg.openssl_certificate = tls->certificate;
  cfg.openssl_key = tls->key;
  cfg.openssl_cafile = tls->ca;
  cfg.load<caf::openssl::manager>();
}

namespace {

using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>; ///< worker: connect and join

/// True when `a` equals `b`, in time independent of where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (b.empty())
    return false;
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// -- supervisor ----------------------------------------------------------------------

struct member {
  node_info info;
  caf::actor node; ///< null for the supervisor itself
};

/// A slot held by an execution actor's attempt.
struct holding {
  caf::actor_addr holder;
  uint64_t ticket = 0;
  std::string node;
};

struct placement_request {
  caf::actor_addr holder;
  uint64_t ticket = 0;
  std::string tool;
  std::string node; ///< the only member it may go to; empty: any
  caf::response_promise rp;
};

struct cluster_state {
  cluster_options opts;
  std::map<std::string, member> members; ///< by name, the supervisor included
  std::vector<holding> held;
  std::deque<placement_request> waiting;
  static inline const char* name = "cluster";
};

using cluster_actor = caf::stateful_actor<cluster_state>;

void log(cluster_actor* self, const std::string& event, const std::string& node,
         const std::string& detail) {
  if (self->state.opts.log)
    self->state.opts.log(event, node, detail);
}

/// The member a step needing `tool` (and pinned to `node`, when not empty)
/// goes to now, or null when none has a free slot.
member* pick(cluster_actor* self, const std::string& tool, const std::string& node) {
  member* best = nullptr;
  for (auto& kv : self->state.members) {
    auto& m = kv.second;
    if (!node.empty() && m.info.name != node)
      continue;
    if (m.info.running >= m.info.slots)
      continue;
    if (!tool.empty()
        && std::find(m.info.tools.begin(), m.info.tools.end(), tool) == m.info.tools.end())
      continue;
    auto load = [](const member& x) { return double(x.info.running) / x.info.slots; };
    if (!best || load(m) < load(*best) || (load(m) == load(*best) && m.info.supervisor))
      best = &m;
  }
  return best;
}

/// Answers waiting placements while some member can take them (in order,
/// skipping ones whose tool has no free slot now).
void dispatch(cluster_actor* self) {
  auto& st = self->state;
  for (auto i = st.waiting.begin(); i != st.waiting.end();) {
    auto m = pick(self, i->tool, i->node);
    if (!m) {
      ++i;
      continue;
    }
    ++m->info.running;
    st.held.push_back({i->holder, i->ticket, m->info.name});
    i->rp.deliver(m->info.name, m->node);
    i = st.waiting.erase(i);
  }
}

/// Publishes the members' tools.
void update_tools(cluster_actor* self) {
  auto& st = self->state;
  if (!st.opts.tools)
    return;
  std::set<std::string> names;
  for (auto& kv : st.members)
    names.insert(kv.second.info.tools.begin(), kv.second.info.tools.end());
  st.opts.tools->assign(std::move(names));
}

/// Forgets member `name`: the holders of its slots hear that it is lost.
void lose(cluster_actor* self, const std::string& name, const std::string& why) {
  auto& st = self->state;
  auto i = st.members.find(name);
  if (i == st.members.end() || i->second.info.supervisor)
    return;
  log(self, "lost", name, why);
  if (i->second.node)
    self->demonitor(i->second.node);
  st.members.erase(i);
  update_tools(self);
  std::set<caf::actor_addr> told;
  for (auto h = st.held.begin(); h != st.held.end();) {
    if (h->node != name) {
      ++h;
      continue;
    }
    if (told.insert(h->holder).second)
      if (auto a = caf::actor_cast<caf::actor>(h->holder))
        self->send(a, lost_atom::value, name);
    h = st.held.erase(h);
  }
}

// -- supervisor handlers -----------------------------------------------------------

/// A monitored actor went away: a member is lost, or an execution actor's
/// slots and waiting requests are dropped.
void member_or_holder_down(cluster_actor* self, caf::down_msg& msg) {
  auto& st = self->state;
  for (auto& kv : st.members)
    if (kv.second.node && kv.second.node.address() == msg.source) {
      lose(self, kv.first, "connection closed (" + caf::to_string(msg.reason) + ")");
      return;
    }
  // An execution actor went away: its slots and requests go with it.
  for (auto h = st.held.begin(); h != st.held.end();) {
    if (h->holder != msg.source) {
      ++h;
      continue;
    }
    if (auto m = st.members.find(h->node); m != st.members.end() && m->second.info.running > 0)
      --m->second.info.running;
    h = st.held.erase(h);
  }
  st.waiting.erase(std::remove_if(st.waiting.begin(), st.waiting.end(),
                                  [&](const placement_request& r) {
                                    return r.holder == msg.source;
                                  }),
                   st.waiting.end());
  dispatch(self);
}

/// Admits worker `node` as member `info` when its secret and name are
/// acceptable, answers it, then places waiting steps.
caf::result<bool> admit_member(cluster_actor* self, node_info& info, const std::string& secret,
                               caf::actor& node) {
  auto& st = self->state;
  if (!same_secret(secret, st.opts.secret)) {
    log(self, "refused", info.name, "wrong cluster secret");
    return make_error(actors_errc::refused, "wrong cluster secret");
  }
  if (info.name.empty() || info.slots == 0) {
    log(self, "refused", info.name, "a node needs a name and at least one slot");
    return make_error(actors_errc::refused, "a node needs a name and at least one slot");
  }
  auto old = st.members.find(info.name);
  if (old != st.members.end()) {
    if (old->second.info.supervisor || old->second.node != node) {
      if (old->second.info.supervisor) {
        log(self, "refused", info.name, "the name is the supervisor's");
        return make_error(actors_errc::refused,
                          "node name '" + info.name + "' is the supervisor's");
      }
      // The same name from a new connection: the old one is gone.
      lose(self, info.name, "replaced by a new connection");
    }
  }
  info.supervisor = false;
  info.running = 0;
  info.joined_at = info.last_seen = now_ms();
  self->monitor(node);
  st.members[info.name] = member{info, node};
  update_tools(self);
  log(self, "joined", info.name,
      std::to_string(info.slots) + " slots, " + std::to_string(info.tools.size()) + " tools");
  // The answer goes out before any step is placed on the new member:
  // a placed execution sends it (run_atom ...) through the same
  // connection, which must not overtake the answer (the worker refuses
  // steps before it knows it joined).
  auto rp = self->make_response_promise<bool>();
  rp.deliver(true);
  dispatch(self);
  return rp;
}

/// A member's heartbeat: true when the sender is still member `name`.
bool heartbeat_from(cluster_actor* self, const std::string& name) {
  auto& st = self->state;
  auto i = st.members.find(name);
  // Not a member (lost meanwhile, or its name taken over by a newer
  // connection): it must join again.
  if (i == st.members.end() || i->second.info.supervisor || !i->second.node
      || i->second.node.address() != caf::actor_cast<caf::actor_addr>(self->current_sender()))
    return false;
  i->second.info.last_seen = now_ms();
  return true;
}

/// The members' infos, the supervisor first.
std::vector<node_info> member_list(cluster_actor* self) {
  auto& st = self->state;
  st.members[st.opts.self.name].info.last_seen = now_ms();
  std::vector<node_info> out;
  for (auto& kv : st.members)
    if (kv.second.info.supervisor)
      out.insert(out.begin(), kv.second.info);
    else
      out.push_back(kv.second.info);
  return out;
}

/// Queues the sender's request for a slot; answered when a member takes it.
caf::result<std::string, caf::actor> queue_placement(cluster_actor* self, const std::string& tool,
                                                     const std::string& node, uint64_t ticket) {
  auto& st = self->state;
  auto holder = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (auto a = caf::actor_cast<caf::actor>(holder))
    self->monitor(a);
  auto rp = self->make_response_promise<std::string, caf::actor>();
  st.waiting.push_back({holder, ticket, tool, node, rp});
  dispatch(self);
  return rp;
}

/// Frees the sender's slot `ticket` on `node`, or withdraws its waiting request.
void release_slot(cluster_actor* self, const std::string& node, uint64_t ticket) {
  auto& st = self->state;
  auto holder = caf::actor_cast<caf::actor_addr>(self->current_sender());
  for (auto h = st.held.begin(); h != st.held.end(); ++h)
    if (h->holder == holder && h->ticket == ticket && h->node == node) {
      if (auto m = st.members.find(node); m != st.members.end() && m->second.info.running > 0)
        --m->second.info.running;
      st.held.erase(h);
      break;
    }
  // A request still waiting is withdrawn.
  st.waiting.erase(std::remove_if(st.waiting.begin(), st.waiting.end(),
                                  [&](const placement_request& r) {
                                    return r.holder == holder && r.ticket == ticket;
                                  }),
                   st.waiting.end());
  dispatch(self);
}

/// Schedules the next tick and loses the members silent for longer than the timeout.
void drop_silent_members(cluster_actor* self) {
  auto& st = self->state;
  self->delayed_send(self, st.opts.heartbeat, tick_atom::value);
  auto now = now_ms();
  std::vector<std::string> silent;
  for (auto& kv : st.members)
    if (!kv.second.info.supervisor && now - kv.second.info.last_seen > st.opts.timeout.count())
      silent.push_back(kv.first);
  for (auto& name : silent)
    lose(self, name, "no heartbeat for " + std::to_string(st.opts.timeout.count()) + " ms");
  if (!silent.empty())
    dispatch(self);
}

caf::behavior cluster(cluster_actor* self, cluster_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.opts.self.supervisor = true;
  st.members[st.opts.self.name] = member{st.opts.self, caf::actor{}};
  update_tools(self);
  self->set_down_handler([=](caf::down_msg& msg) { member_or_holder_down(self, msg); });
  self->send(self, tick_atom::value);
  return {
    [=](join_atom, node_info& info, const std::string& secret,
        caf::actor& node) -> caf::result<bool> { return admit_member(self, info, secret, node); },
    [=](alive_atom, const std::string& name) -> bool { return heartbeat_from(self, name); },
    [=](nodes_atom) { return member_list(self); },
    [=](place_atom, const std::string& tool, const std::string& node,
        uint64_t ticket) -> caf::result<std::string, caf::actor> {
      return queue_placement(self, tool, node, ticket);
    },
    [=](release_atom, const std::string& node, uint64_t ticket) {
      release_slot(self, node, ticket);
    },
    [=](tick_atom) { drop_silent_members(self); },
  };
}

// -- worker ------------------------------------------------------------------------------

struct worker_state {
  worker_options opts;
  caf::actor supervisor;        ///< null while not joined
  int64_t last_heard = 0;       ///< ms since the epoch
  std::set<caf::actor> runners; ///< steps running here
  bool connecting = false;
  bool ever_joined = false;
  static inline const char* name = "worker_node";
};

using worker_actor = caf::stateful_actor<worker_state>;

void connect(worker_actor* self);

/// Kills every running step at once (SIGKILL to their groups).
void kill_runners(worker_actor* self, stop_reason why) {
  for (auto& r : self->state.runners)
    self->send_exit(r, make_stop(why, stop_mode::force));
}

/// The supervisor is gone: no orphans, then join again.
void lost(worker_actor* self, const std::string& why) {
  auto& st = self->state;
  if (!st.supervisor)
    return;
  if (st.opts.log)
    st.opts.log("lost", why);
  self->demonitor(st.supervisor);
  st.supervisor = nullptr;
  kill_runners(self, stop_reason::node_lost);
  self->delayed_send(self, st.opts.heartbeat, rejoin_atom::value);
}

void join(worker_actor* self, caf::actor sup) {
  auto& st = self->state;
  auto timeout = std::chrono::milliseconds{st.opts.timeout};
  self->request(sup, timeout, join_atom::value, st.opts.self, st.opts.secret,
                caf::actor_cast<caf::actor>(self))
    .then(
      [=](bool) {
        auto& st = self->state;
        st.connecting = false;
        st.supervisor = sup;
        st.last_heard = now_ms();
        st.ever_joined = true;
        self->monitor(sup);
        if (st.opts.log)
          st.opts.log("joined", st.opts.host + ":" + std::to_string(st.opts.port));
      },
      [=](caf::error& err) {
        auto& st = self->state;
        st.connecting = false;
        if (err.category() == actors_category
            && err.code() == static_cast<uint8_t>(actors_errc::refused)) {
          auto why = message_of(err);
          if (st.opts.log)
            st.opts.log("refused", why);
          if (st.opts.on_refused)
            st.opts.on_refused(why);
          kill_runners(self, stop_reason::node_lost);
          self->quit();
          return;
        }
        if (st.opts.log)
          st.opts.log("retry", "join failed: " + self->system().render(err));
        self->delayed_send(self, st.opts.heartbeat, rejoin_atom::value);
      });
}

void connect(worker_actor* self) {
  auto& st = self->state;
  if (st.supervisor || st.connecting)
    return;
  st.connecting = true;
  // The openssl manager's middleman actor takes the same connect request and
  // runs the TLS handshake first.
  auto mm = st.opts.tls ? self->system().openssl_manager().actor_handle()
                        : self->system().middleman().actor_handle();
  self->request(mm, std::chrono::milliseconds{st.opts.timeout}, caf::connect_atom::value,
                st.opts.host, st.opts.port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& p, const std::set<std::string>&) {
        auto sup = caf::actor_cast<caf::actor>(p);
        if (!sup) {
          self->state.connecting = false;
          self->delayed_send(self, self->state.opts.heartbeat, rejoin_atom::value);
          return;
        }
        join(self, sup);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        st.connecting = false;
        if (st.opts.log)
          st.opts.log("retry", "cannot reach " + st.opts.host + ":" + std::to_string(st.opts.port)
                                 + ": " + self->system().render(err));
        self->delayed_send(self, st.opts.heartbeat, rejoin_atom::value);
      });
}

/// The supervisor or a runner is down: the first loses the cluster, the
/// second leaves the runners.
void on_worker_down(worker_actor* self, caf::down_msg& msg) {
  auto& st = self->state;
  if (st.supervisor && msg.source == st.supervisor.address()) {
    lost(self, "connection closed (" + caf::to_string(msg.reason) + ")");
    return;
  }
  for (auto i = st.runners.begin(); i != st.runners.end(); ++i)
    if (i->address() == msg.source) {
      st.runners.erase(i);
      break;
    }
}

/// The heartbeat: tells the supervisor this node is alive, and counts the
/// cluster lost after `opts.timeout` without an answer.
void worker_tick(worker_actor* self) {
  auto& st = self->state;
  self->delayed_send(self, st.opts.heartbeat, tick_atom::value);
  if (!st.supervisor)
    return;
  if (now_ms() - st.last_heard > st.opts.timeout.count()) {
    lost(self, "no answer for " + std::to_string(st.opts.timeout.count()) + " ms");
    return;
  }
  auto sup = st.supervisor;
  self->request(sup, std::chrono::milliseconds{st.opts.timeout}, alive_atom::value,
                st.opts.self.name)
    .then(
      [=](bool member) {
        auto& st = self->state;
        if (st.supervisor != sup)
          return;
        if (member)
          st.last_heard = now_ms();
        else
          lost(self, "the supervisor no longer lists this node");
      },
      [=](caf::error&) {
        // Timed out: the tick notices the silence.
      });
}

/// Fills `job`'s argv, timeout and grace from this worker's tools file when
/// it names a tool. @returns the refusal when it cannot.
caf::error apply_tool(const worker_options& opts, remote_job& job) {
  if (job.tool.empty())
    return caf::none;
  auto t = opts.tools.find(job.tool);
  if (t == opts.tools.end())
    return make_error(actors_errc::spawn_failed,
                      "tool '" + job.tool + "' is not registered on this worker");
  auto with = json::parse(job.with_json, nullptr, false);
  auto inputs = json::parse(job.inputs_json, nullptr, false);
  if (with.is_discarded() || inputs.is_discarded())
    return make_error(actors_errc::spawn_failed, "malformed step arguments");
  reference_scope scope{&inputs, nullptr, &with};
  for (auto& item : t->second.argv) {
    auto arg = resolve_text(item.get<std::string>(), scope);
    if (!arg)
      return make_error(actors_errc::spawn_failed,
                        "tool '" + job.tool + "': " + message_of(arg.error()));
    job.argv.push_back(std::move(*arg));
  }
  if (job.timeout_ms < 0 && t->second.timeout)
    job.timeout_ms = t->second.timeout->count();
  if (!job.grace_set && t->second.grace) {
    job.grace_interrupt_ms = t->second.grace->interrupt.count();
    job.grace_terminate_ms = t->second.grace->terminate.count();
  }
  return caf::none;
}

/// The runner of a placed attempt: `job` as this node runs it.
runner_spec spec_of(remote_job& job) {
  runner_spec spec;
  spec.step = job.step;
  spec.attempt = job.attempt;
  spec.process.argv = std::move(job.argv);
  spec.process.env = std::move(job.env);
  // The graph's folder on the supervisor may not exist here.
  if (!job.cwd.empty() && ::access(job.cwd.c_str(), F_OK) == 0)
    spec.process.cwd = job.cwd;
  if (job.has_stdin)
    spec.process.stdin_data = std::move(job.stdin_data);
  if (job.timeout_ms >= 0)
    spec.timeout = millis{job.timeout_ms};
  spec.grace.interrupt = millis{job.grace_interrupt_ms};
  spec.grace.terminate = millis{job.grace_terminate_ms};
  spec.max_output_events = job.max_output_events;
  return spec;
}

/// A step attempt placed on this node: its runner, reporting to `parent`.
caf::result<caf::actor> run_placed(worker_actor* self, remote_job& job, caf::actor& parent) {
  auto& st = self->state;
  if (!st.supervisor)
    return make_error(actors_errc::refused, "not joined");
  if (auto err = apply_tool(st.opts, job))
    return err;
  auto runner = spawn_remote_step_runner(self, parent, spec_of(job));
  st.runners.insert(runner);
  return runner;
}

caf::behavior worker_node(worker_actor* self, worker_options opts) {
  self->state.opts = std::move(opts);
  self->set_down_handler([=](caf::down_msg& msg) { on_worker_down(self, msg); });
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // The worker shuts down: its steps die with it.
    kill_runners(self, stop_reason::shutdown);
    self->quit(msg.reason);
  });
  self->send(self, rejoin_atom::value);
  self->send(self, tick_atom::value);
  return {
    [=](rejoin_atom) { connect(self); },
    [=](tick_atom) { worker_tick(self); },
    [=](run_atom, remote_job& job, caf::actor& parent) -> caf::result<caf::actor> {
      return run_placed(self, job, parent);
    },
  };
}

} // namespace

caf::actor spawn_cluster(caf::actor_system& sys, cluster_options opts) {
  return sys.spawn(cluster, std::move(opts));
}

caf::actor spawn_worker_node(caf::actor_system& sys, worker_options opts) {
  return sys.spawn(worker_node, std::move(opts));
}

} // namespace canopy::core
