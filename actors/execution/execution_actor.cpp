// The execution actor: each message becomes one machine input; the effects
// the input appends are carried out at once (shell_effects.cpp).

#include "actors/execution/execution_actor.hpp"

#include <caf/all.hpp>

#include "actors/cluster.hpp"
#include "actors/error.hpp"
#include "actors/execution/shell.hpp"
#include "actors/messages.hpp"
#include "actors/timer.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

const char* execution_shell_state::name = "execution";

std::shared_ptr<const machine_env> make_machine_env(const execution_services& svc) {
  auto env = std::make_shared<machine_env>();
  env->node_name = svc.node_name;
  env->has_admission = svc.admission != nullptr;
  env->has_cluster = svc.cluster != nullptr;
  env->tools = svc.tools;
  for (auto& kv : svc.tool_slots)
    env->tool_pools.push_back(kv.first);
  for (auto& kv : svc.provider_slots)
    env->provider_pools.push_back(kv.first);
  env->fns = svc.fns;
  env->providers = svc.providers;
  return env;
}

namespace {

/// The step whose worker is `addr`, if its worker is still current.
std::optional<uint32_t> step_of(execution_shell_state& st, const caf::actor_addr& addr) {
  for (auto& kv : st.workers.items())
    if (kv.second.address() == addr)
      return kv.first;
  return std::nullopt;
}

/// The machine's initial state from `init`: its limit scope (its own when it
/// is a root or its graph tightens the limits) and stored counters.
machine_init machine_init_of(execution_init& init, const execution_services& svc,
                             bool has_parent) {
  machine_init mi;
  mi.record = std::move(init.record);
  mi.graph = std::move(init.graph);
  mi.steps = std::move(init.steps);
  mi.token = init.token ? init.token : std::make_shared<halt_token>();
  mi.has_parent = has_parent;
  mi.acquire_lease = init.acquire_lease;
  mi.lease_epoch = init.lease_epoch;
  auto& lim = mi.graph->limits;
  if (!init.parent_scope || lim.max_steps || lim.budget || lim.max_depth || lim.deadline) {
    // A root, or a graph that tightens its subtree's limits: a scope of its own.
    tree_counters used;
    if (auto stored = svc.db->counters(mi.record.id))
      used = *stored;
    std::optional<uint64_t> max_steps = lim.max_steps;
    if (!init.parent_scope && !max_steps)
      max_steps = default_max_steps;
    mi.scope = std::make_shared<limit_scope>(mi.record.id, init.parent_scope, max_steps,
                                             lim.budget, lim.max_depth, used);
    mi.own_scope = true;
    if (init.budget) {
      mi.scope->raise_budget(*init.budget);
      mi.scope_dirty = true;
    }
  } else {
    mi.scope = init.parent_scope;
  }
  return mi;
}

// -- the start --------------------------------------------------------------------------

/// Starts the machine. A start that wrote nothing (a root that waits for
/// admission, or an ancestor already stopping) gives the gate's permit back.
void start_machine(execution_shell* self) {
  auto& st = self->state;
  st.m->start(now_ms());
  run_effects(self);
  if (st.m->phase() != exec_phase::running)
    st.leave_gate();
}

/// Starts the machine once the start gate lets this execution in: at once,
/// or on a `gate_atom` when a permit comes back (actors/start_gate.hpp).
void enter_gate(execution_shell* self) {
  auto& st = self->state;
  if (!st.svc->gate)
    return start_machine(self);
  if (st.gate_ticket)
    return; // at the gate already
  caf::actor_addr addr = self->address(); // weak: a waiting ticket keeps no actor alive
  st.gate_ticket = std::make_shared<start_gate::ticket>([addr] {
    if (auto a = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(a, gate_atom::value);
  });
  if (st.svc->gate->enter(st.gate_ticket))
    start_machine(self);
}

// -- handlers ---------------------------------------------------------------------------

/// The execution actor whose message the shared handlers handle (set by
/// `dispatch`, on the thread that runs that actor).
thread_local execution_shell* current_shell = nullptr;

/// Feeds the current actor's machine one input, `input(machine)`, and
/// carries out the effects it appended.
template <class Input>
void feed(Input&& input) {
  auto self = current_shell;
  input(*self->state.m);
  run_effects(self);
}

/// A step index as the handlers receive it (a plain number on the wire).
uint32_t step_of(uint64_t idx) {
  return static_cast<uint32_t>(idx);
}

/// A slot was granted: admission (ticket 0), the node's pool, or a tool's
/// or provider's own pool (told apart by the sender).
void on_grant(uint64_t ticket) {
  auto& st = current_shell->state;
  if (ticket == 0)
    return feed([](execution_machine& m) { m.admitted(now_ms()); });
  auto pool = caf::actor_cast<caf::actor>(current_shell->current_sender());
  auto from = pool == st.svc->slots ? slot_from::node : slot_from::elsewhere;
  if (from != slot_from::node) // the node's grants, the common case, look no further
    for (auto* own : {&st.svc->tool_slots, &st.svc->provider_slots})
      for (auto& kv : *own)
        if (kv.second == pool)
          from = slot_from::own;
  feed([&](execution_machine& m) { m.slot_granted(static_cast<uint32_t>(ticket), from, now_ms()); });
}

/// A runner on a worker reports its output in wire form (JSON text);
/// handled at once, not re-sent: the runner's down follows its result.
void on_wire_output(uint64_t idx, int attempt, const std::string& text) {
  auto lines = json::parse(text, nullptr, false);
  if (lines.is_discarded())
    return;
  feed([&](execution_machine& m) { m.output(step_of(idx), attempt, std::move(lines), now_ms()); });
}

/// A runner on a worker reports its result in wire form (JSON text).
void on_wire_done(uint64_t idx, int attempt, const std::string& result, const std::string& error) {
  auto parsed = json::parse(result, nullptr, false);
  feed([&](execution_machine& m) {
    m.step_done(step_of(idx), attempt, parsed.is_discarded() ? json{} : std::move(parsed), error,
                now_ms());
  });
}

/// A child execution settled; `step_id` names the step it ran for.
void on_child(const std::string& step_id, execution_status status, json& outputs,
              const std::string& error, write_batch& snapshot, uint64_t stopped_events,
              json& steps) {
  auto& g = current_shell->state.m->graph_def();
  auto i = g.index.find(step_id);
  if (i == g.index.end())
    return;
  feed([&](execution_machine& m) {
    m.child_settled(static_cast<uint32_t>(i->second), status, std::move(outputs), error,
                    std::move(snapshot), now_ms(), stopped_events, std::move(steps));
  });
}

/// The handlers every execution actor shares: built once, so an actor holds
/// no handler objects of its own (a behavior with its captures per actor
/// costs memory per execution, measured by `bench_stop`'s VmRSS per live
/// execution: runtime/docs/benchmarks.md#design-measurements). Each handler
/// finds its actor through `current_shell`. Typed: the compiler checks that
/// they are exactly `execution_handlers` (execution_actor.hpp), the
/// interface without `(request_atom ...)` and `(offer_atom ...)`, which
/// answer later and are matched in `dispatch`.
execution_handlers::behavior_type make_handlers() {
  using m_t = execution_machine;
  return {
    // Its own: the start, the start gate, more ready steps.
    [](start_atom) { enter_gate(current_shell); },
    [](gate_atom) { start_machine(current_shell); },
    [](stop_atom, const std::string& reason, bool force) {
      auto mode = force ? stop_mode::force : stop_mode::graceful;
      feed([&](m_t& m) { m.stop(stop_reason_of(reason), mode, false, now_ms()); });
    },
    [](abandon_atom, uint64_t idx, int attempt) {
      feed([&](m_t& m) { m.abandon_fn(step_of(idx), attempt, now_ms()); });
    },
    [](pump_atom) { feed([](m_t& m) { m.resume_pump(now_ms()); }); },
    [](deadline_atom) { feed([](m_t& m) { m.deadline(now_ms()); }); },
    [](done_atom, uint64_t idx, int attempt, step_outcome& out) {
      feed([&](m_t& m) {
        m.step_done(step_of(idx), attempt, std::move(out.result), out.error, now_ms());
      });
    },
    [](started_atom, uint64_t idx, int attempt, int64_t pid, uint64_t pid_start) {
      feed([&](m_t& m) { m.runner_started(step_of(idx), attempt, pid, pid_start); });
    },
    // From a runner here or on a worker (plain numbers: the same form).
    [](signalled_atom, uint64_t idx, int attempt, int signal, int next, int64_t next_in_ms) {
      feed([&](m_t& m) {
        m.signalled(step_of(idx), attempt, signal, next, next_in_ms, now_ms());
      });
    },
    [](output_atom, uint64_t idx, int attempt, const std::string& text) {
      on_wire_output(idx, attempt, text);
    },
    [](done_atom, uint64_t idx, int attempt, const std::string& result,
       const std::string& error) { on_wire_done(idx, attempt, result, error); },
    [](lost_atom, const std::string& node) {
      feed([&](m_t& m) { m.node_lost(node, now_ms()); });
    },
    [](output_atom, uint64_t idx, int attempt, json& lines) {
      feed([&](m_t& m) { m.output(step_of(idx), attempt, std::move(lines), now_ms()); });
    },
    [](grant_atom, uint64_t ticket) { on_grant(ticket); },
    [](wake_atom, uint64_t idx, int attempt, int64_t ms) {
      feed([&](m_t& m) { m.wake(step_of(idx), attempt, ms, now_ms()); });
    },
    [](timeout_atom, uint64_t idx, int attempt) {
      feed([&](m_t& m) { m.timeout(step_of(idx), attempt, now_ms()); });
    },
    [](armed_atom, uint64_t idx, int attempt) {
      feed([&](m_t& m) { m.wait_armed(step_of(idx), attempt, now_ms()); });
    },
    [](due_atom, uint64_t idx, int attempt) {
      feed([&](m_t& m) { m.wait_due(step_of(idx), attempt, now_ms()); });
    },
    [](retry_atom, uint64_t idx, int attempt) {
      feed([&](m_t& m) { m.retry_due(step_of(idx), attempt, now_ms()); });
    },
    // Child executions.
    [](child_atom, const std::string& step_id, execution_status status, json& outputs,
       const std::string& error, write_batch& snapshot, uint64_t stopped_events, json& steps) {
      on_child(step_id, status, outputs, error, snapshot, stopped_events, steps);
    },
  };
}

/// (request_atom, stop_record, write_batch) -> bool, or the same with a
/// thread's ticket (commit_ticket): an in-process stop request, answered
/// once stored (message `x`).
void on_stop_request(execution_shell* self, caf::type_erased_tuple& x) {
  auto& st = self->state;
  if (!st.replies)
    st.replies = std::make_unique<std::vector<commit_waiter>>();
  if (x.size() == 4)
    st.replies->push_back(commit_waiter{{}, x.get_as<commit_ticket>(3)});
  else
    st.replies->push_back(commit_waiter{self->make_response_promise(), {}});
  auto batch = x.shared() ? x.get_as<write_batch>(2)
                          : std::move(x.get_mutable_as<write_batch>(2));
  if (!st.m->stop_request(x.get_as<stop_record>(1), std::move(batch), now_ms())) {
    // Finishing or done: no write of its own will answer. The requester
    // stores the request through the writer now, not after its
    // acknowledgement bound.
    auto w = std::move(st.replies->back());
    st.replies->pop_back();
    w.answer(caf::make_error(caf::sec::request_receiver_down));
  }
  run_effects(self);
}

/// (offer_atom, idx, attempt, signal) -> bool: true once the write that
/// consumes it is committed; false at once when the wait does not take it.
void on_offer(execution_shell* self, caf::type_erased_tuple& x) {
  auto& st = self->state;
  auto rp = self->make_response_promise();
  auto idx = static_cast<uint32_t>(x.get_as<uint64_t>(1));
  if (!st.replies)
    st.replies = std::make_unique<std::vector<commit_waiter>>();
  st.replies->push_back(commit_waiter{rp, {}});
  if (!st.m->signal_offered(idx, x.get_as<int>(2), x.get_as<signal_record>(3), now_ms())) {
    st.replies->pop_back();
    rp.deliver(false);
  }
  run_effects(self);
}

/// Every message of an execution actor arrives here (its default handler:
/// its own behavior matches nothing) and goes to the shared handlers, or,
/// for the two answered later, to their functions.
caf::result<caf::message> dispatch(caf::scheduled_actor* ptr, caf::message_view& view) {
  static auto* handlers = new caf::behavior{make_handlers().unbox()}; // never destroyed
  auto self = static_cast<execution_shell*>(ptr);
  auto& x = view.content();
  if (x.match_elements<request_atom, stop_record, write_batch>()
      || x.match_elements<request_atom, stop_record, write_batch, commit_ticket>()) {
    on_stop_request(self, x);
    return caf::delegated<caf::message>{};
  }
  if (x.match_elements<offer_atom, uint64_t, int, signal_record>()) {
    on_offer(self, x);
    return caf::delegated<caf::message>{};
  }
  auto outer = current_shell;
  current_shell = self;
  auto handled = (*handlers)(x);
  current_shell = outer;
  if (!handled)
    return caf::print_and_drop(ptr, view);
  return caf::message{};
}

} // namespace

void execution_shell_state::leave_gate() {
  if (!gate_ticket)
    return;
  svc->gate->leave(gate_ticket);
  gate_ticket.reset();
}

execution_shell_state::~execution_shell_state() {
  // Ending at the gate, or before its first write was committed: the permit
  // (or place) goes to the next execution.
  leave_gate();
  if (!m || !svc)
    return;
  // Neither its pending timers nor its directory entry are removed here: the
  // timer service and the directory sweep what ended receivers leave
  // (actors/timer.hpp, actors/tree_context.hpp).
  svc->directory->depart();
  // Its records and step states are destroyed after the stop (or burst of
  // endings) it is part of, not on that stop's path.
  if (svc->graves)
    svc->graves->bury(std::move(m));
}

execution_actor::behavior_type execution_behavior(execution_shell* self, execution_init init,
                                                  std::shared_ptr<const execution_services> svc,
                                                  execution_actor parent) {
  // What every execution actor returns as its behavior: it matches nothing
  // (the message is never sent), so each message goes to `dispatch`; shared,
  // so it costs an actor nothing. Typed without a check (`unsafe_init`):
  // `dispatch` takes the interface's messages, and `make_handlers` is
  // checked against `execution_handlers`.
  static auto* keep_alive = new caf::behavior{[](start_atom, start_atom) {}};
  auto& st = self->state;
  st.svc = std::move(svc);
  st.parent = std::move(parent);
  st.path = init.path;
  auto env = st.svc->machine ? st.svc->machine : make_machine_env(*st.svc);
  st.resolver.bind(self);
  st.m = std::make_unique<execution_machine>(
    std::move(env), machine_init_of(init, *st.svc, static_cast<bool>(st.parent)), &st.resolver);
  // The directory entry is counted out with the state (~execution_shell_state).
  self->set_exit_handler([self](caf::exit_msg& msg) {
    // Workers report by message (or, stopped compactly, in the exit reason
    // their down carries); a stop exit reason only ever comes from above
    // (the parent, or the runtime for a root).
    auto& st = self->state;
    stop_reason reason = stop_reason::requested;
    stop_mode mode = stop_mode::graceful;
    bool from_parent = st.parent && msg.source == st.parent.address();
    if (is_stop(msg.reason, reason, mode))
      st.m->stop(reason, mode, from_parent, now_ms());
    else if (from_parent && is(msg.reason, persistence_errc::fenced))
      // Its tree was taken over by another process: end every step now and
      // write nothing (stopped from above, it hands its state to its parent,
      // which is gone).
      st.m->stop(step_reason::parent_stopped, stop_mode::force, true, now_ms());
    else if (from_parent && msg.reason)
      // The parent died without stopping us: halt all the same.
      st.m->parent_lost(now_ms());
    run_effects(self);
  });
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    auto idx = step_of(st, msg.source);
    if (!idx)
      return; // it reported before it went down
    st.workers.erase(*idx);
    uint64_t events = 0;
    if (is_compact_stop(msg.reason, events))
      // A child stopped with us, compactly: its report is its exit reason.
      st.m->child_settled(*idx, execution_status::stopped, nullptr, {}, {}, now_ms(), events);
    else
      st.m->down(*idx, caf::to_string(msg.reason), now_ms());
    run_effects(self);
  });
  self->set_default_handler(dispatch);
  // Start on a message of its own: a stop that races with the creation of
  // this execution is handled before any step starts.
  self->send(self, start_atom::value);
  return {execution_actor::behavior_type::unsafe_init{}, *keep_alive};
}

execution_actor spawn_execution(caf::actor_system& sys, execution_init init,
                                std::shared_ptr<const execution_services> services) {
  if (!init.token)
    init.token = std::make_shared<halt_token>();
  auto id = init.record.id;
  auto token = init.token;
  auto dir = services->directory;
  auto a = sys.spawn(execution_behavior, std::move(init), std::move(services),
                     execution_actor{});
  dir->add(id, caf::actor_cast<caf::actor>(a), std::move(token));
  return a;
}

} // namespace canopy::core
