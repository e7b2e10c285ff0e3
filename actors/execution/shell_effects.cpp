// The execution shell's effects: what the machine asks for, done with CAF
// (sends, spawns, requests to the store writer, the cluster and agents).

#include <algorithm>

#include <caf/all.hpp>

#include "actors/cluster.hpp"
#include "actors/error.hpp"
#include "actors/execution/shell.hpp"
#include "actors/messages.hpp"
#include "actors/step_runner.hpp"
#include "actors/stop_protocol.hpp"
#include "actors/timer.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

/// Sends `msg` to `self` after `delay` through the timer service, which does
/// not keep `self` alive (a `delayed_send` would, until it is due).
void later(execution_shell* self, millis delay, caf::message msg) {
  auto& timer = self->state.svc->timer;
  if (!timer) {
    // Without the service: anonymous, as the service's own deliveries are.
    caf::delayed_anon_send(caf::actor_cast<caf::actor>(self), delay, std::move(msg));
    return;
  }
  schedule(self, timer, delay, std::move(msg));
}

/// Sends `xs...` from `self` to `dest`, an untyped actor (a slot pool, the
/// cluster, the signal desk, a worker): a typed actor's `send` takes typed
/// receivers only.
template <class... Ts>
void tell(execution_shell* self, const caf::actor& dest, Ts&&... xs) {
  caf::unsafe_send_as(self, dest, std::forward<Ts>(xs)...);
}

/// The actor of slot pool `p` (the node's when it has no own pool).
caf::actor pool_of(const execution_services& svc, const fx::pool_ref& p) {
  auto& own = p.kind == fx::pool_ref::of::tool ? svc.tool_slots : svc.provider_slots;
  if (p.kind != fx::pool_ref::of::node)
    if (auto i = own.find(p.name); i != own.end())
      return i->second;
  return svc.slots;
}

void start_remote(execution_shell* self, fx::spawn_runner& e);

// -- effects ------------------------------------------------------------------------------

struct effect_runner {
  execution_shell* self;

  execution_shell_state& st() { return self->state; }
  const execution_services& svc() { return *self->state.svc; }

  void operator()(fx::acquire_admission&) {
    tell(self, svc().admission, acquire_atom::value, uint64_t{0});
  }
  void operator()(fx::acquire_slot& e) {
    tell(self, pool_of(svc(), e.pool), acquire_atom::value, uint64_t{e.ticket});
  }
  void operator()(fx::release_slot& e) {
    if (e.own.kind != fx::pool_ref::of::node)
      tell(self, pool_of(svc(), e.own), release_atom::value, uint64_t{e.ticket});
    if (e.node)
      tell(self, svc().slots, release_atom::value, uint64_t{e.ticket});
  }
  void operator()(fx::return_grant& e) {
    if (auto pool = caf::actor_cast<caf::actor>(self->current_sender()))
      tell(self, pool, release_atom::value, uint64_t{e.ticket});
  }
  void operator()(fx::place& e) {
    auto self = this->self; // the lambdas outlive this runner
    auto cluster = svc().cluster;
    auto idx = e.idx;
    auto attempt = e.attempt;
    auto ticket = e.ticket;
    self->request(cluster, caf::infinite, place_atom::value, e.tool, e.pin, uint64_t{ticket})
      .then(
        [=](const std::string& node, const caf::actor& node_actor) {
          auto& st = self->state;
          if (node_actor)
            st.nodes.set(idx, node_actor);
          st.m->placed(idx, attempt, ticket, node, node_actor != nullptr, now_ms());
          run_effects(self);
        },
        [=](caf::error&) {
          // The cluster actor is gone: the node is shutting down.
        });
  }
  void operator()(fx::release_place& e) {
    if (svc().cluster)
      tell(self, svc().cluster, release_atom::value, e.node, uint64_t{e.ticket});
  }
  void operator()(fx::spawn_runner& e) {
    if (e.remote)
      return start_remote(self, e);
    auto idx = e.idx;
    st().workers.set(idx, spawn_step_runner(self, std::move(e.spec)));
  }
  void operator()(fx::start_fn& e) {
    start_pooled_fn(self, e);
  }
  void operator()(fx::start_llm& e) {
    start_llm_call(self, e);
  }
  void operator()(fx::set_fn_stop& e) {
    if (auto call = st().calls.find(e.idx)) {
      call->stop();
      st().calls.erase(e.idx);
    }
  }
  void operator()(fx::timer& e) {
    auto idx = static_cast<uint64_t>(e.idx);
    millis delay{e.delay_ms};
    switch (e.kind) {
      case timer_kind::retry:
        return later(self, delay, caf::make_message(retry_atom::value, idx, e.attempt));
      case timer_kind::wake:
        return later(self, delay, caf::make_message(wake_atom::value, idx, e.attempt, e.ms));
      case timer_kind::timeout:
        return later(self, delay, caf::make_message(timeout_atom::value, idx, e.attempt));
      case timer_kind::deadline:
        return later(self, delay, caf::make_message(deadline_atom::value));
      case timer_kind::abandon:
        return later(self, delay, caf::make_message(abandon_atom::value, idx, e.attempt));
      case timer_kind::wait_due:
        return later(self, delay, caf::make_message(due_atom::value, idx, e.attempt));
    }
  }
  void operator()(fx::spawn_child& e) {
    auto& st = self->state;
    execution_init child;
    child.record = std::move(e.record);
    child.graph = std::move(e.graph);
    child.steps = std::move(e.steps);
    child.token = std::make_shared<halt_token>(st.m->token());
    child.parent_scope = st.m->scope();
    child.path = st.path + st.m->graph_def().steps[e.idx].id + "/";
    auto id = child.record.id;
    auto token = child.token;
    // A worker like a runner (linked, monitored, stopped by exit): untyped.
    auto worker = caf::actor_cast<caf::actor>(
      self->spawn<caf::linked + caf::monitored>(execution_behavior, std::move(child), st.svc,
                                                caf::actor_cast<execution_actor>(self)));
    st.svc->directory->add(id, worker, std::move(token));
    st.workers.set(e.idx, worker);
    if (e.turn != 0)
      if (auto agent = st.agents.find(e.idx))
        self->send(*agent, run_atom::value, e.turn, worker, id);
  }
  void operator()(fx::request_turn& e) {
    auto self = this->self; // the lambdas outlive this runner
    auto agent = st().agents.find(e.idx);
    if (!agent)
      return;
    auto idx = e.idx;
    auto attempt = e.attempt;
    self->request(*agent, caf::infinite, acquire_atom::value, st().m->record().root_id)
      .then(
        [=](turn_verdict verdict, uint64_t turn) {
          self->state.m->turn_answered(idx, attempt, verdict, turn, now_ms());
          run_effects(self);
        },
        [=](caf::error& err) {
          self->state.m->turn_failed(idx, attempt, message_of(err), now_ms());
          run_effects(self);
        });
  }
  void operator()(fx::release_turn& e) {
    if (auto agent = st().agents.find(e.idx))
      self->send(*agent, release_atom::value, e.turn);
  }
  void operator()(fx::send_exit& e) {
    if (auto w = st().workers.find(e.idx))
      self->send_exit(*w, make_stop(e.reason, e.mode));
  }
  void operator()(fx::drop_worker& e) {
    if (auto w = st().workers.find(e.idx)) {
      self->unlink_from(*w);
      self->demonitor(*w);
      st().workers.erase(e.idx);
    }
  }
  void operator()(fx::stop_owner& e) {
    if (auto a = svc().directory->find(e.owner))
      tell(self, a, make_stop_message(e.reason));
  }
  void operator()(fx::write& e) {
    auto self = this->self; // the lambdas outlive this runner
    auto completed = std::move(e.completed);
    auto then = e.then;
    std::vector<commit_waiter> replies;
    if (e.reply && st().replies) {
      replies = std::move(*st().replies);
      st().replies.reset();
    }
    self->request(svc().writer, caf::infinite, write_atom::value, std::move(e.batch))
      .then(
        [=](bool) mutable {
          self->state.leave_gate(); // its first write is committed: the next may start
          for (auto& w : replies)
            w.answer(caf::none);
          self->state.m->write_acknowledged(std::move(completed), then, now_ms());
          run_effects(self);
        },
        [=](caf::error& err) {
          // Nothing can be recorded any more: give up on this execution.
          self->quit(err);
        });
  }
  void operator()(fx::report& e) {
    if (!st().parent)
      return;
    if (e.status == execution_status::stopped && e.stopped_events > 0 && e.snapshot.empty()) {
      // Stopped compactly with nothing to hand up: the count rides in the
      // exit reason, which the parent reads from our down message.
      st().exit_reason = make_compact_stop(e.stopped_events);
      return;
    }
    self->send(st().parent, child_atom::value, e.parent_step, e.status, std::move(e.outputs),
               e.error, std::move(e.snapshot), e.stopped_events, std::move(e.steps));
  }
  template <class T>
  void operator()(boxed<T>& e) {
    (*this)(*e);
  }
  void operator()(fx::arm_wait& e) {
    auto& m = *st().m;
    if (!svc().desk) {
      // Nothing here can deliver a signal: the wait would never end.
      m.wait_armed(e.idx, e.attempt, now_ms());
      return;
    }
    tell(self, svc().desk, arm_atom::value, m.record().root_id, e.signal, m.record().id,
         st().path + m.graph_def().steps[e.idx].id, uint64_t{e.idx}, e.attempt);
  }
  void operator()(fx::disarm_wait& e) {
    if (svc().desk)
      tell(self, svc().desk, disarm_atom::value, st().m->record().id, uint64_t{e.idx});
  }
  void operator()(fx::quit&) {
    self->quit(std::move(st().exit_reason));
  }
  void operator()(fx::yield&) {
    self->send(self, pump_atom::value);
  }
};

/// Has the worker the step was placed on start its runner; the runner is
/// linked to and monitored by this execution like a local one.
void start_remote(execution_shell* self, fx::spawn_runner& e) {
  auto& st = self->state;
  auto node = st.nodes.find(e.idx);
  auto& spec = e.spec;
  remote_job job;
  job.tool = std::move(e.tool.tool);
  job.with_json = std::move(e.tool.with_json);
  job.inputs_json = std::move(e.tool.inputs_json);
  job.grace_set = e.tool.grace_set;
  job.step = spec.step;
  job.attempt = spec.attempt;
  job.argv = std::move(spec.process.argv);
  job.env = std::move(spec.process.env);
  job.cwd = spec.process.cwd;
  job.has_stdin = spec.process.stdin_data.has_value();
  if (job.has_stdin)
    job.stdin_data = *spec.process.stdin_data;
  job.timeout_ms = spec.timeout ? spec.timeout->count() : -1;
  job.grace_interrupt_ms = spec.grace.interrupt.count();
  job.grace_terminate_ms = spec.grace.terminate.count();
  job.max_output_events = spec.max_output_events;
  auto idx = e.idx;
  auto attempt = spec.attempt;
  caf::actor target = node ? *node : caf::actor{};
  self->request(target, st.svc->cluster_timeout, run_atom::value, std::move(job),
                caf::actor_cast<caf::actor>(self))
    .then(
      [=](caf::actor& runner) {
        auto& st = self->state;
        if (!st.m->remote_started(idx, attempt)) {
          self->send_exit(runner, make_stop(stop_reason::node_lost, stop_mode::force));
          return;
        }
        self->link_to(runner);
        self->monitor(runner);
        st.workers.set(idx, runner);
        run_effects(self);
      },
      [=](caf::error& err) {
        bool spawn_failed = err.category() == actors_category
                            && err.code() == static_cast<uint8_t>(actors_errc::spawn_failed);
        self->state.m->remote_failed(idx, attempt, spawn_failed,
                                     spawn_failed ? message_of(err) : caf::to_string(err),
                                     now_ms());
        run_effects(self);
      });
}

/// Forgets handles the machine no longer needs (workers that ended, flags
/// of functions that returned, nodes and agents of finished attempts).
void forget_stale(execution_shell_state& st) {
  auto& m = *st.m;
  auto prune = [&](auto& map, auto keep) {
    auto& items = map.items();
    items.erase(std::remove_if(items.begin(), items.end(),
                               [&](auto& kv) { return !keep(m.step(kv.first)); }),
                items.end());
  };
  using step = execution_machine::step_state;
  prune(st.workers, [](const step& s) {
    return s.phase == step_phase::running_runner || s.phase == step_phase::running_child;
  });
  prune(st.calls, [](const step& s) { return s.phase == step_phase::running_fn; });
  prune(st.nodes, [](const step& s) {
    return (s.held & execution_machine::held_place) || (s.held & execution_machine::held_remote);
  });
  prune(st.agents, [](const step& s) { return s.phase == step_phase::waiting_turn; });
}

} // namespace

void run_effects(execution_shell* self) {
  auto& st = self->state;
  if (!st.m)
    return;
  // Effects may feed inputs back (a write's acknowledgement comes later, by
  // message); carry out everything the machine has appended, in order.
  for (;;) {
    auto fx = st.m->flush_effects();
    if (fx.empty())
      return;
    effect_runner run{self};
    for (auto& e : fx)
      std::visit(run, e);
    if (st.m->phase() == exec_phase::done)
      return;
    forget_stale(st);
  }
}

} // namespace canopy::core
