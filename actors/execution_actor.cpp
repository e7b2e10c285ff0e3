#include "actors/execution_actor.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "actors/agent_actor.hpp"
#include "actors/cluster.hpp"
#include "actors/error.hpp"
#include "actors/messages.hpp"
#include "actors/step_runner.hpp"
#include "actors/timer.hpp"
#include "persistence/error.hpp"
#include "persistence/reference.hpp"

namespace canopy {

namespace {

// -- state -----------------------------------------------------------------------

/// Runtime state of one step.
struct step_rt {
  step_status status = step_status::pending;
  int attempt = 0;
  json error;        ///< null or message
  json result;       ///< kept for failed steps; completed results live in `results`
  std::string reason;
  std::string node = "local";
  std::string child_id;
  int64_t pid = 0;
  uint64_t pid_start = 0;
  int64_t started_at = 0;
  int64_t ended_at = 0;
  size_t remaining = 0;   ///< `needs` not yet durably completed
  caf::actor worker;      ///< step runner or child execution
  uint64_t ticket = 0;    ///< slot ticket while queued or running a subprocess
  bool has_slot = false;  ///< holds a slot of the node's pool (`svc->slots`)
  caf::actor tool_pool;   ///< the tool's own slot pool, when the tool has one
  bool has_tool_slot = false; ///< holds a slot of `tool_pool`
  bool in_fn = false;     ///< a pooled fn attempt is running
  bool planning = false;  ///< a `plan` step's planner runs (its runner is `worker`)
  bool awaiting_turn = false; ///< an `agent` step waits for the agent's turn
  // -- cluster placement --
  uint64_t place_ticket = 0;  ///< holds (or waits for) a cluster slot
  caf::actor node_actor;      ///< the worker it was placed on (null: this node)
  bool placing = false;       ///< the worker is asked to start the runner
  std::shared_ptr<std::atomic<bool>> stop_flag;
};

struct execution_state {
  execution_record rec;
  std::shared_ptr<const graph> g;
  std::shared_ptr<const execution_services> svc;
  caf::actor parent;
  std::vector<step_rt> steps;
  std::vector<std::vector<size_t>> dependents;
  json results = json::object(); ///< step id → result, completed steps only
  std::vector<size_t> ready;
  size_t durable_completed = 0;
  uint64_t next_ticket = 1;
  // -- writes --
  write_batch batch;
  std::vector<size_t> batch_completed; ///< steps whose completion rides on `batch`
  // -- halt --
  bool halting = false;
  bool finished = false;   ///< the final record is written or being written
  execution_status final_status = execution_status::stopped;
  std::string final_reason;
  std::string step_reason; ///< what running steps record when reset
  std::string error;
  bool force = false;
  bool child_stopped = false;
  // -- tree --
  std::shared_ptr<halt_token> token;
  std::shared_ptr<limit_scope> scope;
  bool own_scope = false;      ///< this execution's graph set limits
  bool scope_dirty = false;    ///< counters changed since the last flush
  bool blocked = false;        ///< a limit refused a step: wait for the stop
  bool started = false;        ///< the start message was handled
  bool admitted = false;       ///< a root holds an admission slot (or needs none)
  int64_t run_started = 0;     ///< when running time last started counting
  bool from_above = false;     ///< stopped by its parent: report, don't commit
  write_batch snapshot;        ///< final batches of children stopped with us
  static const char* name;
};

const char* execution_state::name = "execution";

using exec_actor = caf::stateful_actor<execution_state>;

/// Sends `xs...` to `self` after `delay` through the timer service, which
/// does not keep `self` alive (a `delayed_send` would, until it is due).
template <class... Ts>
void later(exec_actor* self, millis delay, Ts&&... xs) {
  auto& timer = self->state.svc->timer;
  if (!timer) {
    self->delayed_send(self, delay, std::forward<Ts>(xs)...);
    return;
  }
  schedule(self, timer, delay, caf::make_message(std::forward<Ts>(xs)...));
}

// -- records and events ----------------------------------------------------------

void emit(exec_actor* self, const char* type, const std::string& step = {},
          const std::string& status = {}, const std::string& reason = {},
          json data = nullptr) {
  auto& st = self->state;
  event_record e;
  e.time = now_ms();
  e.type = type;
  e.execution_id = st.rec.id;
  e.root_id = st.rec.root_id;
  e.parent_id = st.rec.parent_id;
  e.step = step;
  e.status = status;
  e.reason = reason;
  e.data = std::move(data);
  st.batch.events.push_back(std::move(e));
}

void put_step(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  auto& def = st.g->steps[idx];
  step_record r;
  r.execution_id = st.rec.id;
  r.step = def.id;
  r.status = s.status;
  r.attempt = s.attempt;
  if (s.status == step_status::completed)
    r.result = st.results[def.id];
  else
    r.result = s.result;
  r.error = s.error;
  r.reason = s.reason;
  r.node = s.node;
  r.child_id = s.child_id;
  r.pid = s.pid;
  r.pid_start = s.pid_start;
  r.started_at = s.started_at;
  r.ended_at = s.ended_at;
  st.batch.steps.push_back(std::move(r));
}

void put_execution(exec_actor* self) {
  self->state.batch.executions.push_back(self->state.rec);
}

void on_durable(exec_actor* self, std::vector<size_t> completed);
void pump(exec_actor* self);
bool current(execution_state& st, uint64_t idx, int attempt);

/// Sends the buffered mutations to the store writer. Steps completed in this
/// batch release their dependents only when the commit is acknowledged.
void flush(exec_actor* self, std::function<void()> after = {}) {
  auto& st = self->state;
  if (st.scope_dirty) {
    st.scope_dirty = false;
    for (auto& c : st.scope->snapshot())
      st.batch.counters.push_back(std::move(c));
  }
  if (st.batch.empty() && !after)
    return;
  auto batch = std::move(st.batch);
  st.batch = write_batch{};
  auto completed = std::move(st.batch_completed);
  st.batch_completed.clear();
  self->request(st.svc->writer, caf::infinite, write_atom::value, std::move(batch))
    .then(
      [=](bool) mutable {
        if (!completed.empty())
          on_durable(self, std::move(completed));
        if (after)
          after();
      },
      [=](caf::error& err) {
        // Nothing can be recorded any more: give up on this execution.
        self->quit(err);
      });
}

// -- slots and tools -------------------------------------------------------------

/// Gives back every slot step `idx` holds or waits for (its tool's pool and the
/// node's pool); idempotent.
void release_slots(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  if (s.ticket != 0) {
    if (s.tool_pool)
      self->send(s.tool_pool, release_atom::value, s.ticket);
    self->send(st.svc->slots, release_atom::value, s.ticket);
  }
  if (s.place_ticket != 0 && st.svc->cluster)
    self->send(st.svc->cluster, release_atom::value, s.node, s.place_ticket);
  s.place_ticket = 0;
  s.node_actor = nullptr;
  s.ticket = 0;
  s.has_slot = false;
  s.has_tool_slot = false;
  s.tool_pool = nullptr;
}

/// The tool a `tool` step (or a `plan` step naming a tool) runs; nullptr for
/// other steps. Sets `error` when the tool is not registered on this node.
const tool_def* tool_of(const execution_state& st, const step_def& def, std::string& error) {
  bool named = def.kind == step_kind::tool || (def.kind == step_kind::plan && !def.target.empty());
  if (!named)
    return nullptr;
  if (st.svc->tools) {
    auto i = st.svc->tools->find(def.target);
    if (i != st.svc->tools->end())
      return &i->second;
  }
  error = "tool '" + def.target + "' is not registered on this node";
  return nullptr;
}

bool current(execution_state& st, uint64_t idx, int attempt);
void start_runner(exec_actor* self, size_t idx);

/// Asks the cluster for a node for step `idx` (SPEC §10), the execution's
/// pinned node when it has one: on this node the step then takes the local
/// slots as usual; on a worker it runs there.
void place(exec_actor* self, size_t idx, const std::string& tool) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  s.place_ticket = s.ticket;
  auto ticket = s.ticket;
  auto attempt = s.attempt;
  auto cluster = st.svc->cluster;
  self->request(cluster, caf::infinite, place_atom::value, tool, st.rec.node, ticket)
    .then(
      [=](const std::string& node, const caf::actor& node_actor) {
        auto& st = self->state;
        if (!current(st, idx, attempt) || st.steps[idx].place_ticket != ticket
            || st.steps[idx].status != step_status::queued || st.halting) {
          self->send(cluster, release_atom::value, node, ticket);
          return;
        }
        auto& s = st.steps[idx];
        s.node = node;
        if (!node_actor) {
          self->send(s.tool_pool ? s.tool_pool : st.svc->slots, acquire_atom::value, s.ticket);
          return;
        }
        s.node_actor = node_actor;
        s.has_slot = true;
        start_runner(self, idx);
        pump(self);
        flush(self);
      },
      [=](caf::error&) {
        // The cluster actor is gone: the node is shutting down.
      });
}

void fail_attempt(exec_actor* self, size_t idx, const std::string& error,
                  json result = nullptr);

/// Queues step `idx` for a subprocess slot: first one of its tool's pool (when
/// `tool` has one), then one of the node's pool; the grants arrive as
/// (grant_atom, ticket).
void enqueue(exec_actor* self, size_t idx, const tool_def* tool,
             const std::string& tool_name = {}) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  release_slots(self, idx);
  if (!st.rec.node.empty() && !st.svc->cluster && st.rec.node != st.svc->node_name)
    return fail_attempt(self, idx,
                        "this step must run on node '" + st.rec.node
                          + "' (where its agent lives), and this node runs no cluster");
  s.status = step_status::queued;
  s.reason.clear();
  s.ticket = st.next_ticket++;
  if (tool != nullptr)
    if (auto i = st.svc->tool_slots.find(tool->name); i != st.svc->tool_slots.end())
      s.tool_pool = i->second;
  emit(self, "step.queued", st.g->steps[idx].id, "queued");
  put_step(self, idx);
  if (st.svc->cluster) {
    place(self, idx, tool ? tool->name : tool_name);
    return;
  }
  self->send(s.tool_pool ? s.tool_pool : st.svc->slots, acquire_atom::value, s.ticket);
}

// -- step transitions ------------------------------------------------------------

void begin_halt(exec_actor* self, execution_status final_status, std::string reason,
                std::string step_reason, bool force);

void complete_step(exec_actor* self, size_t idx, json result) {
  auto& st = self->state;
  release_slots(self, idx);
  auto& s = st.steps[idx];
  auto& id = st.g->steps[idx].id;
  s.status = step_status::completed;
  s.ended_at = now_ms();
  s.error = nullptr;
  s.reason.clear();
  s.result = nullptr;
  st.results[id] = std::move(result);
  emit(self, "step.completed", id, "completed");
  put_step(self, idx);
  st.batch_completed.push_back(idx);
}

millis retry_delay(const step_def& def, int attempt) {
  auto d = def.retry_delay;
  for (int i = 1; i < attempt && d < millis{60'000}; ++i)
    d *= 2;
  return std::min(d, std::max(def.retry_delay, millis{60'000}));
}

void fail_attempt(exec_actor* self, size_t idx, const std::string& error, json result) {
  auto& st = self->state;
  release_slots(self, idx);
  auto& s = st.steps[idx];
  auto& def = st.g->steps[idx];
  s.ended_at = now_ms();
  s.error = error;
  s.result = std::move(result);
  if (!st.halting && s.attempt <= def.retries) {
    auto delay = retry_delay(def, s.attempt);
    s.status = step_status::pending;
    s.reason = "retry";
    emit(self, "step.retry", def.id, "pending", "retry",
         {{"attempt", s.attempt}, {"error", error}, {"delay_ms", delay.count()}});
    put_step(self, idx);
    later(self, delay, retry_atom::value, static_cast<uint64_t>(idx), s.attempt);
    return;
  }
  s.status = step_status::failed;
  s.reason.clear();
  emit(self, "step.failed", def.id, "failed", {}, {{"error", error}});
  put_step(self, idx);
  if (!st.halting) {
    st.error = "step '" + def.id + "' failed: " + error;
    begin_halt(self, execution_status::failed, "step_failed", "sibling_failed", false);
  }
}

void mark_running(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  if (s.status == step_status::queued)
    s.started_at = now_ms(); // waited for a slot: running starts now
  s.status = step_status::running;
  s.reason.clear();
  emit(self, "step.started", st.g->steps[idx].id, "running", {},
       {{"attempt", s.attempt}});
  put_step(self, idx);
}

void node_lost(exec_actor* self, size_t idx, const std::string& why);

/// Has the worker the step was placed on start its runner; the runner is
/// linked to and monitored by this execution like a local one.
void start_remote(exec_actor* self, size_t idx, runner_spec spec, remote_job job) {
  auto& st = self->state;
  auto& s = st.steps[idx];
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
  s.placing = true;
  auto attempt = s.attempt;
  self->request(s.node_actor, st.svc->cluster_timeout, run_atom::value, std::move(job),
                caf::actor_cast<caf::actor>(self))
    .then(
      [=](caf::actor& runner) {
        auto& st = self->state;
        if (!current(st, idx, attempt) || !st.steps[idx].placing) {
          self->send_exit(runner, make_stop("node_lost", true));
          return;
        }
        auto& s = st.steps[idx];
        s.placing = false;
        self->link_to(runner);
        self->monitor(runner);
        s.worker = runner;
        if (st.halting)
          self->send_exit(runner, make_stop(st.final_status == execution_status::failed
                                              ? "sibling_failed"
                                              : "parent_stopped",
                                            st.force));
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (!current(st, idx, attempt) || !st.steps[idx].placing)
          return;
        st.steps[idx].placing = false;
        if (err.category() == actors_category
            && err.code() == static_cast<uint8_t>(actors_errc::spawn_failed)) {
          // The worker cannot build or start the command (its tool's argv
          // template, the program): the attempt fails as it would here.
          fail_attempt(self, idx, message_of(err));
        } else {
          // Not joined (yet), gone, or silent past the timeout: placed again.
          node_lost(self, idx, "the worker did not start the step: " + caf::to_string(err));
        }
        pump(self);
        flush(self);
      });
}

/// Starts the subprocess of a `run` or `tool` step (or a `plan` step's
/// planner) once its slots are granted.
void start_runner(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& def = st.g->steps[idx];
  auto& s = st.steps[idx];
  reference_scope scope{&st.rec.inputs, &st.results, nullptr};
  runner_spec spec;
  spec.step = idx;
  spec.attempt = s.attempt;
  spec.timeout = def.timeout;
  spec.grace = def.grace;
  auto fail = [&](const caf::error& err) { fail_attempt(self, idx, message_of(err)); };
  std::string unknown;
  bool named_tool = def.kind == step_kind::tool || (def.kind == step_kind::plan && !def.target.empty());
  remote_job tool_job; // a tool step on a worker: its argv is the worker's
  if (s.node_actor && named_tool) {
    auto with = resolve(def.with, scope);
    if (!with)
      return fail(with.error());
    tool_job.tool = def.target;
    tool_job.with_json = dump_json(*with);
    tool_job.inputs_json = dump_json(st.rec.inputs);
    tool_job.grace_set = def.grace_set;
  } else if (auto tool = tool_of(st, def, unknown)) {
    // The tool's argv template, with `${with.KEY}` from the step's resolved
    // `with` and `${inputs.KEY}` from the execution's inputs; its limits
    // apply where the step sets none.
    auto with = resolve(def.with, scope);
    if (!with)
      return fail(with.error());
    reference_scope tool_scope{&st.rec.inputs, nullptr, &*with};
    for (auto& item : tool->argv) {
      auto arg = resolve_text(item.get<std::string>(), tool_scope);
      if (!arg)
        return fail_attempt(self, idx, "tool '" + tool->name + "': " + message_of(arg.error()));
      spec.process.argv.push_back(std::move(*arg));
    }
    if (!def.timeout)
      spec.timeout = tool->timeout;
    if (!def.grace_set && tool->grace)
      spec.grace = *tool->grace;
  } else if (!unknown.empty()) {
    return fail_attempt(self, idx, unknown);
  } else {
    for (auto& item : def.argv) {
      auto arg = resolve_text(item.get<std::string>(), scope);
      if (!arg)
        return fail(arg.error());
      spec.process.argv.push_back(std::move(*arg));
    }
  }
  for (auto& kv : def.env) {
    auto val = resolve_text(kv.second, scope);
    if (!val)
      return fail(val.error());
    spec.process.env[kv.first] = std::move(*val);
  }
  if (def.stdin_data) {
    auto val = resolve_text(*def.stdin_data, scope);
    if (!val)
      return fail(val.error());
    spec.process.stdin_data = std::move(*val);
  }
  std::string cwd = st.g->base_dir;
  if (def.cwd) {
    auto val = resolve_text(*def.cwd, scope);
    if (!val)
      return fail(val.error());
    cwd = !val->empty() && (*val)[0] == '/' ? *val : st.g->base_dir + "/" + *val;
  }
  spec.process.cwd = cwd;
  s.pid = 0;
  mark_running(self, idx);
  if (s.node_actor)
    return start_remote(self, idx, std::move(spec), std::move(tool_job));
  s.worker = spawn_step_runner(self, std::move(spec));
}

/// Starts a child execution for a `graph` step.
void start_child(exec_actor* self, size_t idx, std::shared_ptr<const graph> child_graph);
void start_plan(exec_actor* self, size_t idx);
void start_agent(exec_actor* self, size_t idx);

/// Runs one in-process function attempt.
void start_fn(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& def = st.g->steps[idx];
  auto& s = st.steps[idx];
  reference_scope scope{&st.rec.inputs, &st.results, nullptr};
  auto with = resolve(def.with, scope);
  if (!with)
    return fail_attempt(self, idx, message_of(with.error()));
  auto& name = def.target;
  if (name == "noop" || name == "echo" || name == "fail")
    // Instant: the record is written once, at the end; the event still says
    // that the step started.
    emit(self, "step.started", def.id, "running", {}, {{"attempt", s.attempt}});
  if (name == "noop")
    return complete_step(self, idx, json::object());
  if (name == "echo")
    return complete_step(self, idx, std::move(*with));
  if (name == "fail") {
    auto msg = with->is_object() && with->contains("message") && (*with)["message"].is_string()
                 ? (*with)["message"].get<std::string>()
                 : std::string{"fail"};
    return fail_attempt(self, idx, msg);
  }
  if (name == "sleep") {
    int64_t ms = 0;
    if (with->is_object() && with->contains("ms") && (*with)["ms"].is_number())
      ms = std::max<int64_t>(0, (*with)["ms"].get<int64_t>());
    mark_running(self, idx);
    later(self, millis{ms}, wake_atom::value, static_cast<uint64_t>(idx),
                       s.attempt, ms);
    if (def.timeout)
      later(self, *def.timeout, timeout_atom::value, static_cast<uint64_t>(idx),
                         s.attempt);
    return;
  }
  auto fn = st.svc->fns ? st.svc->fns->find(name) : nullptr;
  if (!fn)
    return fail_attempt(self, idx, "no function '" + name + "' is registered");
  mark_running(self, idx);
  s.in_fn = true;
  s.stop_flag = std::make_shared<std::atomic<bool>>(false);
  auto me = caf::actor_cast<caf::actor>(self);
  auto ctx = std::make_shared<fn_context>(std::move(*with), st.rec.id, def.id, s.attempt,
                                          s.stop_flag);
  auto attempt = s.attempt;
  st.svc->pool->submit([me, ctx, fn, idx, attempt] {
    step_outcome out;
    try {
      auto r = (*fn)(*ctx);
      if (r)
        out.result = std::move(*r);
      else
        out.error = message_of(r.error());
    } catch (const std::exception& e) {
      out.error = std::string{"exception: "} + e.what();
    } catch (...) {
      out.error = "unknown exception";
    }
    caf::anon_send(me, done_atom::value, static_cast<uint64_t>(idx), attempt, std::move(out));
  });
  if (def.timeout)
    later(self, *def.timeout, timeout_atom::value, static_cast<uint64_t>(idx),
                       s.attempt);
}

/// Asks the execution that owns a refusing scope (or the root) to stop.
void stop_owner(exec_actor* self, const std::string& owner, const std::string& reason) {
  auto& st = self->state;
  if (owner == st.rec.id) {
    begin_halt(self, execution_status::stopped, reason, reason, false);
    return;
  }
  if (auto a = st.svc->directory->find(owner))
    self->send(a, stop_atom::value, reason, false, std::string{});
}

/// Starts an attempt of step `idx`. @returns false when nothing may start now
/// (a stop is under way or a limit refused): the step stays ready.
bool start_step(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& def = st.g->steps[idx];
  auto& s = st.steps[idx];
  if (st.token->any())
    return false;
  if (auto refused = st.scope->charge(def.cost)) {
    st.blocked = true;
    stop_owner(self, refused->owner, refused->reason);
    return false;
  }
  st.scope_dirty = true;
  ++s.attempt;
  s.node = st.svc->node_name; // placement may name a worker instead
  s.started_at = now_ms();
  s.ended_at = 0;
  s.error = nullptr;
  s.result = nullptr;
  switch (def.kind) {
    case step_kind::fn:
      start_fn(self, idx);
      break;
    case step_kind::run:
      enqueue(self, idx, nullptr);
      break;
    case step_kind::tool: {
      std::string unknown;
      auto tool = tool_of(st, def, unknown);
      if (tool == nullptr && st.svc->cluster)
        enqueue(self, idx, nullptr, def.target); // a worker has it
      else if (tool == nullptr)
        fail_attempt(self, idx, unknown);
      else
        enqueue(self, idx, tool);
      break;
    }
    case step_kind::graph:
      start_child(self, idx, def.child);
      break;
    case step_kind::plan:
      start_plan(self, idx);
      break;
    case step_kind::agent:
      start_agent(self, idx);
      break;
    default:
      fail_attempt(self, idx,
                   std::string{"step kind '"} + to_string(def.kind)
                     + "' is not available on this node");
  }
  return true;
}

// -- scheduling ------------------------------------------------------------------

bool is_active(const step_rt& s) {
  return s.status == step_status::running || s.status == step_status::queued;
}

void finish(exec_actor* self);

/// Starts every ready step, then ends the execution when nothing is left.
void pump(exec_actor* self) {
  auto& st = self->state;
  if (st.halting || st.finished || !st.started || st.blocked)
    return;
  while (!st.ready.empty()) {
    auto idx = st.ready.back();
    if (!start_step(self, idx))
      return; // stays ready: a stop or a limit decides what happens next
    st.ready.pop_back();
    if (st.halting)
      return;
  }
  if (st.durable_completed == st.steps.size()) {
    finish(self);
    return;
  }
  // Nothing runs and nothing can start: a child stopped on its own.
  if (st.child_stopped && st.batch_completed.empty()
      && std::none_of(st.steps.begin(), st.steps.end(), [](const step_rt& s) {
           return is_active(s) || (s.status == step_status::pending && s.reason == "retry");
         }))
    begin_halt(self, execution_status::stopped, "child_stopped", "child_stopped", false);
}

void on_durable(exec_actor* self, std::vector<size_t> completed) {
  auto& st = self->state;
  for (auto idx : completed) {
    ++st.durable_completed;
    for (auto d : st.dependents[idx])
      if (--st.steps[d].remaining == 0 && st.steps[d].status == step_status::pending)
        st.ready.push_back(d);
  }
  pump(self);
  flush(self);
}

/// Tells the parent execution how this one ended, then quits normally (the
/// status is in the store and in the report, not in the exit reason).
void report_and_quit(exec_actor* self, write_batch snapshot = {}) {
  auto& st = self->state;
  if (st.parent)
    self->send(st.parent, child_atom::value, st.rec.parent_step,
               std::string{to_string(st.rec.status)}, st.rec.outputs, st.rec.error,
               std::move(snapshot));
  self->quit();
}

/// Adds this run's running time to an own limit scope (the deadline clock).
void stop_clock(exec_actor* self) {
  auto& st = self->state;
  if (st.own_scope && st.run_started != 0) {
    st.scope->add_run_ms(now_ms() - st.run_started);
    st.run_started = 0;
    st.scope_dirty = true;
  }
}

/// An agent's run completed: its message and reply join the agent's history
/// in the run's final commit.
void append_history(exec_actor* self) {
  auto& st = self->state;
  auto reply = st.rec.outputs.is_object() ? st.rec.outputs.value("reply", json{}) : json{};
  history_entry in;
  in.owner = st.rec.owner;
  in.agent = st.rec.agent;
  in.role = "user";
  in.content = st.rec.inputs.is_object() ? st.rec.inputs.value("message", json{}) : json{};
  in.execution_id = st.rec.id;
  in.time = st.rec.created_at; // when the message arrived
  history_entry out = in;
  out.role = "agent";
  out.content = reply;
  out.time = now_ms();
  st.batch.history.push_back(std::move(in));
  st.batch.history.push_back(std::move(out));
  st.batch.events.push_back(
    make_agent_event(st.rec, "agent.reply", {{"agent", st.rec.agent}, {"reply", reply}}));
}

/// All steps completed: resolve outputs and commit the final record.
void finish(exec_actor* self) {
  auto& st = self->state;
  st.finished = true;
  stop_clock(self);
  reference_scope scope{&st.rec.inputs, &st.results, nullptr};
  auto outputs = resolve(st.g->outputs, scope);
  st.rec.ended_at = now_ms();
  if (outputs) {
    st.rec.status = execution_status::completed;
    st.rec.outputs = std::move(*outputs);
    emit(self, "execution.completed", {}, "completed");
    if (!st.rec.agent.empty())
      append_history(self);
  } else {
    st.rec.status = execution_status::failed;
    st.rec.reason = "step_failed";
    st.rec.error = "outputs: " + message_of(outputs.error());
    emit(self, "execution.failed", {}, "failed", "step_failed", {{"error", st.rec.error}});
  }
  put_execution(self);
  flush(self, [=] { report_and_quit(self); });
}

// -- halt sequence ------------------------------------------------------------------

bool halt_waiting(const execution_state& st) {
  return std::any_of(st.steps.begin(), st.steps.end(),
                     [](const step_rt& s) { return s.worker || s.in_fn || s.placing; });
}

void try_complete_halt(exec_actor* self);

/// Step `idx` ran on a worker that was lost: its attempt is over without a
/// result. The step goes back to `pending` (reason `node_lost`) and is
/// placed again; a halting execution just stops waiting for it.
void node_lost(exec_actor* self, size_t idx, const std::string& why) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  if (s.worker) {
    self->unlink_from(s.worker);
    self->demonitor(s.worker);
    s.worker = nullptr;
  }
  s.placing = false;
  s.place_ticket = 0; // the cluster dropped the node's slots
  s.node_actor = nullptr;
  release_slots(self, idx);
  if (st.halting) {
    try_complete_halt(self);
    return;
  }
  if (s.status != step_status::running && s.status != step_status::queued)
    return;
  s.status = step_status::pending;
  s.reason = "node_lost";
  s.ended_at = now_ms();
  s.error = why;
  emit(self, "step.pending", st.g->steps[idx].id, "pending", "node_lost", {{"node", s.node},
                                                                           {"error", why}});
  put_step(self, idx);
  st.ready.push_back(idx);
}

/// Once no runner, child or function is left: one snapshot, then quit.
void try_complete_halt(exec_actor* self) {
  auto& st = self->state;
  if (!st.halting || st.finished || halt_waiting(st))
    return;
  st.finished = true;
  for (size_t i = 0; i < st.steps.size(); ++i) {
    auto& s = st.steps[i];
    if (is_active(s)) {
      release_slots(self, i);
      s.status = step_status::pending;
      s.reason = st.step_reason;
      s.ended_at = now_ms();
      emit(self, "step.pending", st.g->steps[i].id, "pending", s.reason);
      put_step(self, i);
    }
  }
  st.rec.status = st.final_status;
  st.rec.reason = st.final_reason;
  st.rec.error = st.error;
  st.rec.ended_at = now_ms();
  st.rec.outputs = nullptr;
  stop_clock(self);
  auto type = st.final_status == execution_status::failed ? "execution.failed"
                                                          : "execution.stopped";
  emit(self, type, {}, to_string(st.final_status), st.final_reason,
       st.error.empty() ? json(nullptr) : json{{"error", st.error}});
  // The store answers the stop requests of every execution this snapshot
  // ends (`stop.handled`), in the same transaction.
  put_execution(self);
  // Children stopped with us handed us their final batches: one transaction.
  st.batch.append(std::move(st.snapshot));
  if (st.from_above && st.parent) {
    if (st.scope_dirty) {
      st.scope_dirty = false;
      for (auto& c : st.scope->snapshot())
        st.batch.counters.push_back(std::move(c));
    }
    auto batch = std::move(st.batch);
    st.batch = write_batch{};
    report_and_quit(self, std::move(batch));
    return;
  }
  flush(self, [=] { report_and_quit(self); });
}

/// The reason children of a halting execution stop with.
std::string child_reason(const execution_state& st) {
  return st.final_status == execution_status::failed ? "sibling_failed" : "parent_stopped";
}

void begin_halt(exec_actor* self, execution_status final_status, std::string reason,
                std::string step_reason, bool force) {
  auto& st = self->state;
  if (st.finished)
    return;
  if (st.halting) {
    // A forced stop may overtake a graceful one.
    if (force && !st.force) {
      st.force = true;
      for (auto& s : st.steps)
        if (s.worker)
          self->send_exit(s.worker, make_stop(child_reason(st), true));
    }
    return;
  }
  st.halting = true;
  st.token->set();
  st.final_status = final_status;
  st.final_reason = std::move(reason);
  st.step_reason = std::move(step_reason);
  st.force = force;
  st.ready.clear();
  // The execution a stop reaches says so durably; its descendants go straight
  // to `stopped` in the one snapshot.
  if (final_status == execution_status::stopped && !st.from_above) {
    st.rec.status = execution_status::stopping;
    st.rec.reason = st.final_reason;
    emit(self, "execution.stopping", {}, "stopping", st.final_reason);
    put_execution(self);
  }
  for (size_t i = 0; i < st.steps.size(); ++i) {
    auto& s = st.steps[i];
    if (s.worker)
      self->send_exit(s.worker, make_stop(child_reason(st), force));
    if (s.in_fn && s.stop_flag) {
      s.stop_flag->store(true, std::memory_order_release);
      // A function that ignores its stop token cannot hold the stop forever.
      auto& grace = st.g->steps[i].grace;
      auto wait = force ? millis{0} : grace.interrupt + grace.terminate;
      later(self, wait, abandon_atom::value, static_cast<uint64_t>(i), s.attempt);
    }
  }
  try_complete_halt(self);
  flush(self);
}

// -- children ------------------------------------------------------------------------

caf::behavior execution(exec_actor* self, execution_init init,
                        std::shared_ptr<const execution_services> svc, caf::actor parent);

parse_options child_parse_options(const execution_state& st);
parse_options stored_parse_options(const execution_state& st);

void spawn_child(exec_actor* self, size_t idx, std::shared_ptr<const graph> child_graph,
                 json inputs, const std::string& agent, const std::string& node);

void start_child(exec_actor* self, size_t idx, std::shared_ptr<const graph> child_graph) {
  auto& st = self->state;
  auto& def = st.g->steps[idx];
  auto& s = st.steps[idx];
  if (!child_graph) {
    // A registered graph named by the step: on resume the child's stored
    // graph (what it ran), else the owner's newest version.
    parse_result found;
    if (!s.child_id.empty())
      if (auto stored = st.svc->db->graph(s.child_id))
        found = parse_graph_bundle(stored->document, stored->base_dir, stored->files,
                                   stored_parse_options(st));
    if (!found && st.svc->find_graph)
      found = st.svc->find_graph(st.rec.owner, def.target, child_parse_options(st));
    if (!found) {
      std::string msg = "graph '" + def.target + "' is not registered on this node";
      if (!found.errors.empty()) {
        msg = "graph '" + def.target + "':";
        for (auto& e : found.errors)
          msg += " " + to_string(e) + ";";
      }
      return fail_attempt(self, idx, msg);
    }
    child_graph = found.value;
  }
  reference_scope scope{&st.rec.inputs, &st.results, nullptr};
  auto with = resolve(def.with, scope);
  if (!with)
    return fail_attempt(self, idx, message_of(with.error()));
  for (auto& name : child_graph->inputs)
    if (!with->contains(name))
      return fail_attempt(self, idx, "child graph input '" + name + "' is missing");
  for (auto& kv : with->items())
    if (std::find(child_graph->inputs.begin(), child_graph->inputs.end(), kv.key())
        == child_graph->inputs.end())
      return fail_attempt(self, idx, "child graph does not declare input '" + kv.key() + "'");
  spawn_child(self, idx, std::move(child_graph), std::move(*with), {}, st.rec.node);
}

/// Spawns the child execution of step `idx`, linked and monitored: the
/// existing child (`child_id`, resumed under its id) or a new one with
/// `inputs` (a run of `agent` when not empty) pinned to `node` (empty: any).
void spawn_child(exec_actor* self, size_t idx, std::shared_ptr<const graph> child_graph,
                 json inputs, const std::string& agent, const std::string& node) {
  auto& st = self->state;
  auto& def = st.g->steps[idx];
  auto& s = st.steps[idx];
  execution_init child;
  child.graph = child_graph;
  // Resume an existing child under its id; create a new one otherwise.
  auto existing = s.child_id.empty() ? caf::expected<execution_record>{make_error(
                                          persistence_errc::not_found, "new child")}
                                      : st.svc->db->execution(s.child_id);
  if (existing) {
    child.record = std::move(*existing);
    if (auto steps = st.svc->db->steps(s.child_id))
      child.steps = std::move(*steps);
  } else {
    auto& r = child.record;
    r.id = make_execution_id();
    r.graph = child_graph->name;
    r.parent_id = st.rec.id;
    r.root_id = st.rec.root_id;
    r.depth = st.rec.depth + 1;
    r.parent_step = def.id;
    r.inputs = std::move(inputs);
    r.created_at = now_ms();
    r.owner_pid = st.svc->owner_pid;
    r.owner_start = st.svc->owner_start;
    r.owner = st.rec.owner;
    r.agent = agent;
    r.node = node;
    st.batch.append(make_queued_batch(r, *child_graph));
    if (!agent.empty())
      st.batch.events.push_back(make_agent_event(
        r, "agent.message",
        {{"agent", agent}, {"message", r.inputs.value("message", json{})},
         {"who", "execution:" + st.rec.id + "/" + def.id}}));
    s.child_id = r.id;
  }
  child.token = std::make_shared<halt_token>(st.token);
  child.parent_scope = st.scope;
  auto id = child.record.id;
  auto token = child.token;
  mark_running(self, idx);
  s.worker = self->spawn<caf::linked + caf::monitored>(execution, std::move(child), st.svc,
                                                         caf::actor_cast<caf::actor>(self));
  st.svc->directory->add(id, s.worker, std::move(token));
}

/// Parse options for a graph created at run time below this execution.
parse_options child_parse_options(const execution_state& st) {
  return run_time_parse_options(*st.svc, st.rec.depth + 1, st.scope->max_depth());
}

/// Parse options for a child's stored graph (resume): on a cluster node any
/// tool is accepted, since the workers that have it may not have joined yet.
parse_options stored_parse_options(const execution_state& st) {
  auto opts = child_parse_options(st);
  opts.any_tool = st.svc->cluster != nullptr;
  return opts;
}

// -- agent steps -----------------------------------------------------------------------

/// The agent's answer to an `agent` step's request for a turn.
void on_turn(exec_actor* self, size_t idx, int attempt, const caf::actor& agent,
             const std::string& verdict, uint64_t turn, const json& message) {
  auto& st = self->state;
  bool mine = current(st, idx, attempt) && st.steps[idx].awaiting_turn;
  if (mine)
    st.steps[idx].awaiting_turn = false;
  if (!mine || st.halting || st.finished
      || st.steps[idx].status != step_status::queued) {
    // No longer wanted (a stop came first): give the turn back.
    if (verdict == "granted")
      self->send(agent, release_atom::value, turn);
    return;
  }
  auto& def = st.g->steps[idx];
  auto give_back = [&] {
    if (verdict == "granted")
      self->send(agent, release_atom::value, turn);
  };
  if (verdict == "busy") {
    fail_attempt(self, idx, "agent '" + def.target + "' is busy (on_busy: reject)");
  } else if (verdict == "cancelled") {
    fail_attempt(self, idx,
                 "the message to agent '" + def.target
                   + "' was superseded by a newer one (on_busy: cancel_previous)");
  } else if (auto ag = st.svc->db->agent(st.rec.owner, def.target); !ag) {
    give_back();
    fail_attempt(self, idx, message_of(ag.error()));
  } else {
    auto parsed = parse_agent_graph(*ag, *st.svc, st.rec.depth + 1, st.scope->max_depth());
    auto inputs = parsed ? make_agent_inputs(*parsed.value, message, *st.svc->db,
                                             st.rec.owner, def.target)
                         : caf::expected<json>{json{}};
    if (!parsed) {
      give_back();
      std::string msg = "the graph of agent '" + def.target + "' does not validate:";
      for (auto& e : parsed.errors)
        msg += " " + to_string(e) + ";";
      fail_attempt(self, idx, msg);
    } else if (!inputs) {
      give_back();
      fail_attempt(self, idx, message_of(inputs.error()));
    } else {
      spawn_child(self, idx, parsed.value, std::move(*inputs), def.target, ag->node);
      if (verdict == "granted")
        self->send(agent, run_atom::value, turn, st.steps[idx].worker, st.steps[idx].child_id);
    }
  }
  pump(self);
  flush(self);
}

/// An `agent` step: resume the run it started, or ask the agent for a turn
/// (the step waits `queued`), then run the agent's graph as a child.
void start_agent(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& def = st.g->steps[idx];
  auto& s = st.steps[idx];
  if (!s.child_id.empty()) {
    // Resume the run this step started, under its id, with its stored graph.
    if (auto stored = st.svc->db->graph(s.child_id)) {
      auto parsed = parse_graph_bundle(stored->document, stored->base_dir, stored->files,
                                       stored_parse_options(st));
      if (parsed)
        return spawn_child(self, idx, parsed.value, json::object(), def.target, {});
    }
    s.child_id.clear();
  }
  if (!st.svc->find_agent)
    return fail_attempt(self, idx, "agents are not available on this node");
  auto agent = st.svc->find_agent(st.rec.owner, def.target);
  if (!agent)
    return fail_attempt(self, idx, message_of(agent.error()));
  reference_scope scope{&st.rec.inputs, &st.results, nullptr};
  auto message = resolve(def.message, scope);
  if (!message)
    return fail_attempt(self, idx, message_of(message.error()));
  s.status = step_status::queued;
  s.reason.clear();
  s.awaiting_turn = true;
  emit(self, "step.queued", def.id, "queued");
  put_step(self, idx);
  auto attempt = s.attempt;
  auto target = *agent;
  auto msg = std::move(*message);
  self->request(target, caf::infinite, acquire_atom::value, st.rec.root_id)
    .then(
      [=](const std::string& verdict, uint64_t turn) {
        on_turn(self, idx, attempt, target, verdict, turn, msg);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (!current(st, idx, attempt) || !st.steps[idx].awaiting_turn)
          return;
        st.steps[idx].awaiting_turn = false;
        if (st.halting || st.finished)
          return;
        fail_attempt(self, idx, "agent '" + st.g->steps[idx].target + "': " + message_of(err));
        pump(self);
        flush(self);
      });
}

/// A `plan` step: run the planner (a subprocess, like `run`), or resume the
/// child execution it already created.
void start_plan(exec_actor* self, size_t idx) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  if (!s.child_id.empty()) {
    auto stored = st.svc->db->graph(s.child_id);
    if (stored) {
      auto parsed = parse_graph_bundle(stored->document, stored->base_dir, stored->files,
                                       stored_parse_options(st));
      if (parsed)
        return start_child(self, idx, parsed.value);
    }
    s.child_id.clear(); // the planned graph is gone: plan again
  }
  // The planner: a registered tool (by name) or an inline argv.
  std::string unknown;
  auto tool = tool_of(st, st.g->steps[idx], unknown);
  if (!unknown.empty() && !st.svc->cluster)
    return fail_attempt(self, idx, unknown);
  s.planning = true;
  enqueue(self, idx, tool, tool ? std::string{} : st.g->steps[idx].target);
}

/// The planner printed a graph: validate it, then run it as a child.
void planned(exec_actor* self, size_t idx, step_outcome& out) {
  auto& st = self->state;
  auto& s = st.steps[idx];
  s.planning = false;
  if (!out.error.empty())
    return fail_attempt(self, idx, "planner: " + out.error, std::move(out.result));
  auto doc = parse_json_text(out.result.value("stdout", std::string{}));
  if (!doc)
    return fail_attempt(self, idx, "planner output is not a graph: " + message_of(doc.error()),
                        std::move(out.result));
  auto parsed = parse_graph(*doc, st.g->base_dir, child_parse_options(st));
  if (!parsed) {
    std::string msg = "planner output is not a valid graph:";
    for (auto& e : parsed.errors)
      msg += " " + to_string(e) + ";";
    return fail_attempt(self, idx, msg, std::move(out.result));
  }
  start_child(self, idx, parsed.value);
}

// -- behavior --------------------------------------------------------------------------

/// Finds the step whose runner or child is `addr`.
std::optional<size_t> step_of(execution_state& st, const caf::actor_addr& addr) {
  for (size_t i = 0; i < st.steps.size(); ++i)
    if (st.steps[i].worker && st.steps[i].worker.address() == addr)
      return i;
  return std::nullopt;
}

/// True when a message about (idx, attempt) is still current.
bool current(execution_state& st, uint64_t idx, int attempt) {
  return idx < st.steps.size() && st.steps[idx].attempt == attempt;
}

void init_steps(exec_actor* self, std::vector<step_record>& stored) {
  auto& st = self->state;
  auto& g = *st.g;
  st.steps.resize(g.steps.size());
  st.dependents.resize(g.steps.size());
  for (size_t i = 0; i < g.steps.size(); ++i) {
    st.steps[i].remaining = g.steps[i].needs.size();
    for (auto& n : g.steps[i].needs)
      st.dependents[g.index.at(n)].push_back(i);
  }
  // Resume: completed steps keep their results and never run again.
  for (auto& r : stored) {
    auto i = g.index.find(r.step);
    if (i == g.index.end())
      continue;
    auto& s = st.steps[i->second];
    s.attempt = r.attempt;
    s.child_id = r.child_id;
    s.node = r.node;
    s.started_at = r.started_at;
    s.ended_at = r.ended_at;
    if (r.status == step_status::completed) {
      s.status = step_status::completed;
      st.results[r.step] = std::move(r.result);
    }
  }
  for (size_t i = 0; i < g.steps.size(); ++i)
    if (st.steps[i].status == step_status::completed) {
      ++st.durable_completed;
      for (auto d : st.dependents[i])
        --st.steps[d].remaining;
    }
  for (size_t i = g.steps.size(); i-- > 0;)
    if (st.steps[i].status != step_status::completed && st.steps[i].remaining == 0)
      st.ready.push_back(i);
}

/// A runner's or function's attempt finished with `out`.
void on_done(exec_actor* self, uint64_t idx, int attempt, step_outcome& out) {
  auto& st = self->state;
  if (!current(st, idx, attempt))
    return;
  auto& s = st.steps[idx];
  s.in_fn = false;
  s.worker = nullptr;
  release_slots(self, idx);
  if (st.halting) {
    try_complete_halt(self);
  } else if (s.status == step_status::running && s.planning) {
    planned(self, idx, out);
    pump(self);
  } else if (s.status == step_status::running) {
    if (out.error.empty())
      complete_step(self, idx, std::move(out.result));
    else
      fail_attempt(self, idx, out.error, std::move(out.result));
    pump(self);
  }
  flush(self);
}

/// A runner's output lines, logged as `step.output` events.
void on_output(exec_actor* self, uint64_t idx, int attempt, json& lines) {
  auto& st = self->state;
  if (!current(st, idx, attempt))
    return;
  for (auto& l : lines)
    emit(self, "step.output", st.g->steps[idx].id, {}, {}, std::move(l));
  flush(self);
}

caf::behavior execution(exec_actor* self, execution_init init,
                        std::shared_ptr<const execution_services> svc, caf::actor parent) {
  auto& st = self->state;
  st.rec = std::move(init.record);
  st.g = std::move(init.graph);
  st.svc = std::move(svc);
  st.parent = std::move(parent);
  st.token = init.token ? init.token : std::make_shared<halt_token>();
  auto& lim = st.g->limits;
  if (!init.parent_scope || lim.max_steps || lim.budget || lim.max_depth || lim.deadline) {
    // A root, or a graph that tightens its subtree's limits: a scope of its own.
    tree_counters used;
    if (auto stored = st.svc->db->counters(st.rec.id))
      used = *stored;
    std::optional<uint64_t> max_steps = lim.max_steps;
    if (!init.parent_scope && !max_steps)
      max_steps = default_max_steps;
    st.scope = std::make_shared<limit_scope>(st.rec.id, init.parent_scope, max_steps,
                                             lim.budget, lim.max_depth, used);
    st.own_scope = true;
    if (init.budget) {
      st.scope->raise_budget(*init.budget);
      st.scope_dirty = true;
    }
  } else {
    st.scope = init.parent_scope;
  }
  self->attach_functor(
    [dir = st.svc->directory, id = st.rec.id, timer = st.svc->timer, addr = self->address()] {
      dir->remove(id);
      if (timer)
        caf::anon_send(timer, cancel_atom::value, addr);
    });
  init_steps(self, init.steps);
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // Workers always quit normally and report by message; a stop exit reason
    // only ever comes from above (the parent, or the runtime for a root).
    auto& st = self->state;
    std::string reason;
    bool force = false;
    if (is_stop(msg.reason, reason, force)) {
      // From the parent: hand the snapshot up instead of committing it.
      if (st.parent && msg.source == st.parent.address() && !st.halting)
        st.from_above = true;
      begin_halt(self, execution_status::stopped, reason, reason, force);
    } else if (st.parent && msg.source == st.parent.address() && msg.reason) {
      // The parent died without stopping us: halt all the same.
      begin_halt(self, execution_status::stopped, "parent_stopped", "parent_stopped", false);
    }
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    auto idx = step_of(st, msg.source);
    if (!idx)
      return; // it reported before it went down
    auto& s = st.steps[*idx];
    if (s.node_actor) {
      // A remote runner gone without a result: its worker stopped or lost
      // the connection. The step runs again elsewhere (at-least-once).
      s.worker = nullptr;
      node_lost(self, *idx, "the step's runner on node '" + s.node + "' ended without a result ("
                              + caf::to_string(msg.reason) + ")");
      pump(self);
      flush(self);
      return;
    }
    s.worker = nullptr;
    if (st.halting)
      try_complete_halt(self);
    else
      fail_attempt(self, *idx, "worker terminated: " + caf::to_string(msg.reason));
    pump(self);
    flush(self);
  });
  // Start on a message of its own: a stop that races with the creation of
  // this execution is handled before any step starts.
  self->send(self, start_atom::value);
  return {
    [=](start_atom) {
      auto& st = self->state;
      if (st.halting || st.finished || st.started)
        return;
      if (!st.admitted && !st.parent && st.svc->admission) {
        // A root waits `queued` for an admission slot; a stop meanwhile
        // stops it before it runs. The pool frees the slot when we quit.
        self->send(st.svc->admission, acquire_atom::value, uint64_t{0});
        return;
      }
      if (st.token->any())
        return; // an ancestor is stopping: its exit signal is on the way
      if (st.rec.depth > st.scope->max_depth()) {
        // Recursion that validation could not see (plans, agents).
        st.blocked = true;
        stop_owner(self, st.rec.root_id, "max_depth");
        return;
      }
      st.started = true;
      st.rec.status = execution_status::running;
      st.rec.reason.clear();
      st.rec.error.clear();
      st.rec.outputs = nullptr;
      st.rec.ended_at = 0;
      bool resumed = st.rec.started_at != 0;
      if (!resumed)
        st.rec.started_at = now_ms();
      st.rec.owner_pid = st.svc->owner_pid;
      st.rec.owner_start = st.svc->owner_start;
      st.run_started = now_ms();
      if (st.own_scope && st.g->limits.deadline) {
        auto left = st.g->limits.deadline->count() - st.scope->run_ms();
        later(self, millis{std::max<int64_t>(0, left)}, deadline_atom::value);
      }
      emit(self, resumed ? "execution.resumed" : "execution.started", {}, "running");
      put_execution(self);
      pump(self);
      flush(self);
    },
    [=](stop_atom, const std::string& reason, bool force, const std::string&) {
      // Too late when finished: the store answers the request once the
      // final record is committed.
      begin_halt(self, execution_status::stopped, reason, reason, force);
      flush(self);
    },
    [=](request_atom, const stop_record& req, write_batch& batch) -> caf::result<bool> {
      auto& st = self->state;
      // Our earlier records reach the writer first: the log shows every step
      // started before the request, and none after it. Finished already:
      // the store answers it (`no_execution`) when the final record lands.
      auto rp = self->make_response_promise();
      st.batch.append(std::move(batch));
      flush(self, [rp]() mutable { rp.deliver(true); });
      begin_halt(self, execution_status::stopped, "requested", "requested", req.force);
      flush(self);
      return caf::delegated<bool>{};
    },
    [=](abandon_atom, uint64_t idx, int attempt) {
      auto& st = self->state;
      if (!current(st, idx, attempt) || !st.steps[idx].in_fn)
        return;
      // Its thread runs on; its late result is ignored.
      st.steps[idx].in_fn = false;
      try_complete_halt(self);
      flush(self);
    },
    [=](deadline_atom) {
      auto& st = self->state;
      if (st.halting || st.finished)
        return;
      begin_halt(self, execution_status::stopped, "deadline", "deadline", false);
      flush(self);
    },
    [=](done_atom, uint64_t idx, int attempt, step_outcome& out) {
      on_done(self, idx, attempt, out);
    },
    [=](started_atom, uint64_t idx, int attempt, int64_t pid, uint64_t pid_start) {
      auto& st = self->state;
      if (!current(st, idx, attempt))
        return;
      if (st.steps[idx].node_actor)
        return; // a pid on another host: recovery here must never signal it
      st.steps[idx].pid = pid;
      st.steps[idx].pid_start = pid_start;
      put_step(self, idx);
      flush(self);
    },
    // A runner on a worker reports in wire form (JSON text).
    // Handled at once, not re-sent: the runner's down follows its result.
    [=](output_atom, uint64_t idx, int attempt, const std::string& text) {
      auto lines = json::parse(text, nullptr, false);
      if (!lines.is_discarded())
        on_output(self, idx, attempt, lines);
    },
    [=](done_atom, uint64_t idx, int attempt, const std::string& result,
        const std::string& error) {
      auto parsed = json::parse(result, nullptr, false);
      step_outcome out{parsed.is_discarded() ? json{} : std::move(parsed), error};
      on_done(self, idx, attempt, out);
    },
    [=](lost_atom, const std::string& node) {
      auto& st = self->state;
      for (size_t i = 0; i < st.steps.size(); ++i) {
        auto& s = st.steps[i];
        if (s.node == node && (s.node_actor || s.placing)
            && (s.status == step_status::running || s.status == step_status::queued))
          node_lost(self, i, "node '" + node + "' lost");
      }
      pump(self);
      flush(self);
    },
    [=](output_atom, uint64_t idx, int attempt, json& lines) {
      on_output(self, idx, attempt, lines);
    },
    [=](grant_atom, uint64_t ticket) {
      auto& st = self->state;
      if (ticket == 0) { // admission
        st.admitted = true;
        if (st.halting || st.finished)
          return;
        self->send(self, start_atom::value);
        return;
      }
      auto pool = caf::actor_cast<caf::actor>(self->current_sender());
      for (size_t i = 0; i < st.steps.size(); ++i) {
        auto& s = st.steps[i];
        if (s.ticket == ticket && s.status == step_status::queued) {
          if (s.tool_pool && pool == s.tool_pool && !s.has_tool_slot) {
            // The tool's slot first; then one of the node's pool.
            s.has_tool_slot = true;
            if (st.halting)
              try_complete_halt(self);
            else
              self->send(st.svc->slots, acquire_atom::value, ticket);
            flush(self);
            return;
          }
          if (pool != st.svc->slots || s.has_slot)
            break; // not the grant this step waits for
          s.has_slot = true;
          if (st.halting) {
            try_complete_halt(self);
          } else {
            start_runner(self, i);
            pump(self);
          }
          flush(self);
          return;
        }
      }
      // A ticket we no longer want: back to the pool that granted it.
      if (pool)
        self->send(pool, release_atom::value, ticket);
    },
    [=](wake_atom, uint64_t idx, int attempt, int64_t ms) {
      auto& st = self->state;
      if (!current(st, idx, attempt) || st.steps[idx].status != step_status::running
          || st.halting)
        return;
      complete_step(self, idx, json{{"slept_ms", ms}});
      pump(self);
      flush(self);
    },
    [=](timeout_atom, uint64_t idx, int attempt) {
      auto& st = self->state;
      if (!current(st, idx, attempt) || st.steps[idx].status != step_status::running
          || st.halting)
        return;
      auto& s = st.steps[idx];
      if (s.in_fn && s.stop_flag) {
        // The function sees its stop token; its late result is ignored.
        s.stop_flag->store(true, std::memory_order_release);
        s.in_fn = false;
      }
      fail_attempt(self, idx, "timeout");
      pump(self);
      flush(self);
    },
    [=](retry_atom, uint64_t idx, int attempt) {
      auto& st = self->state;
      if (!current(st, idx, attempt) || st.halting
          || st.steps[idx].status != step_status::pending)
        return;
      st.ready.push_back(idx);
      pump(self);
      flush(self);
    },
    [=](child_atom, const std::string& step, const std::string& status, json& outputs,
        const std::string& error, write_batch& snapshot) {
      auto& st = self->state;
      auto i = st.g->index.find(step);
      if (i == st.g->index.end())
        return;
      auto idx = i->second;
      auto& s = st.steps[idx];
      // A planned graph stopped before it ran its first step was still being
      // created: delete it, nothing of it remains; the step plans again.
      auto& def = st.g->steps[idx];
      bool never_started = std::any_of(
        snapshot.executions.begin(), snapshot.executions.end(),
        [&](const execution_record& r) { return r.id == s.child_id && r.started_at == 0; });
      if (st.halting && def.kind == step_kind::plan && never_started) {
        st.snapshot.deleted_executions.push_back(s.child_id);
        s.child_id.clear();
      } else {
        // A child stopped with us: its final records join our snapshot.
        st.snapshot.append(std::move(snapshot));
      }
      if (!s.worker || s.status != step_status::running)
        return;
      s.worker = nullptr;
      if (st.halting) {
        // Stopped with us: try_complete_halt resets the step.
      } else if (status == "completed" && def.kind == step_kind::agent) {
        json reply = outputs.is_object() ? outputs.value("reply", json{}) : json{};
        complete_step(self, idx, json{{"reply", std::move(reply)}});
      } else if (status == "completed") {
        complete_step(self, idx, std::move(outputs));
      } else if (status == "failed") {
        fail_attempt(self, idx, error.empty() ? "child execution failed" : error);
      } else {
        // A child stopped on its own: its step waits for a resume.
        s.status = step_status::pending;
        s.reason = "child_stopped";
        s.ended_at = now_ms();
        emit(self, "step.pending", st.g->steps[idx].id, "pending", "child_stopped");
        put_step(self, idx);
        st.child_stopped = true;
      }
      if (st.halting)
        try_complete_halt(self);
      else
        pump(self);
      flush(self);
    },
  };
}

} // namespace

parse_options run_time_parse_options(const execution_services& svc, int depth, int max_depth) {
  parse_options opts = svc.child_options;
  if (svc.fns)
    opts.fns = svc.fns->names();
  if (svc.tools)
    for (auto& kv : *svc.tools)
      opts.tools.insert(kv.first);
  if (svc.cluster_tools)
    for (auto& name : svc.cluster_tools->names())
      opts.tools.insert(name);
  opts.depth = depth;
  opts.max_depth = max_depth;
  return opts;
}

stored_graph to_stored(const graph& g) {
  stored_graph out;
  out.document = g.document;
  out.base_dir = g.base_dir;
  out.files = json::object();
  for (auto& kv : g.files)
    out.files[kv.first] = kv.second;
  return out;
}

write_batch make_queued_batch(const execution_record& rec, const graph& g) {
  write_batch b;
  b.executions.push_back(rec);
  b.encoded_graphs.emplace_back(rec.id, encode_graph(g.document, g.base_dir, g.files));
  event_record e;
  e.time = now_ms();
  e.type = "execution.queued";
  e.execution_id = rec.id;
  e.root_id = rec.root_id;
  e.parent_id = rec.parent_id;
  e.status = "queued";
  b.events.push_back(std::move(e));
  return b;
}

caf::actor spawn_execution(caf::actor_system& sys, execution_init init,
                           std::shared_ptr<const execution_services> services) {
  if (!init.token)
    init.token = std::make_shared<halt_token>();
  auto id = init.record.id;
  auto token = init.token;
  auto dir = services->directory;
  auto a = sys.spawn(execution, std::move(init), std::move(services), caf::actor{});
  dir->add(id, a, std::move(token));
  return a;
}

} // namespace canopy
