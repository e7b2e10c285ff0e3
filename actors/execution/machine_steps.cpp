// The execution machine: scheduling and the life of one step attempt.

#include "actors/execution/machine.hpp"

#include <algorithm>

#include "actors/fn_registry.hpp"
#include "persistence/error.hpp"
#include "persistence/reference.hpp"

namespace canopy::core {

namespace {

millis retry_delay(const step_def& def, int attempt) {
  auto d = def.retry_delay;
  for (int i = 1; i < attempt && d < millis{60'000}; ++i)
    d *= 2;
  return std::min(d, std::max(def.retry_delay, millis{60'000}));
}

} // namespace

// -- scheduling ---------------------------------------------------------------------------

void execution_machine::pump(int64_t now) {
  if (phase_ != exec_phase::running || blocked_ || yielded_)
    return;
  if (ready_.size() > 64) { // a wide layer: its batch does not grow step by step
    auto n = std::min(ready_.size(), pump_chunk);
    auto& b = batch_or_new();
    b.steps.reserve(b.steps.size() + n);
    b.events.reserve(b.events.size() + 2 * n);
  }
  for (size_t started = 0; !ready_.empty(); ++started) {
    if (started == pump_chunk) {
      yielded_ = true;
      effects_.emplace_back(fx::yield{});
      return;
    }
    auto idx = ready_.back();
    if (!start_step(idx, now))
      return; // stays ready: a stop or a limit decides what happens next
    ready_.pop_back();
    if (phase_ != exec_phase::running)
      return;
  }
  ready_.shrink_to_fit(); // empty: a live execution keeps no buffer for it
  // Every step completed, the last ones in the batch not yet written: the
  // final record joins that batch, so the last completions and the end are
  // one transaction (a step's completion is waited for only before its
  // dependents start; the end starts nothing).
  if (durable_completed_ + batch_completed_.size() == steps_.size()) {
    finish(now);
    return;
  }
  // Nothing runs and nothing can start: a child stopped on its own.
  if (child_stopped_ && batch_completed_.empty()
      && std::none_of(steps_.begin(), steps_.end(), [](const step_state& s) {
           return is_active(s.phase) || s.phase == step_phase::retry_wait;
         }))
    begin_halt(execution_status::stopped, step_reason::child_stopped,
               step_reason::child_stopped, stop_mode::graceful, now);
}

void execution_machine::resume_pump(int64_t now) {
  if (!yielded_)
    return;
  yielded_ = false;
  pump(now);
  flush();
}

void execution_machine::on_durable(const std::vector<uint32_t>& completed, int64_t now) {
  for (auto idx : completed) {
    ++durable_completed_;
    if (dep_offsets_.empty())
      continue; // no step has needs
    for (auto k = dep_offsets_[idx]; k < dep_offsets_[idx + 1]; ++k) {
      auto d = dep_targets_[k];
      if (--steps_[d].remaining == 0 && steps_[d].phase == step_phase::idle)
        ready_.push_back(d);
    }
  }
  pump(now);
  flush();
}

void execution_machine::stop_owner(const std::string& owner, step_reason reason, int64_t now) {
  if (owner == rec_.id) {
    begin_halt(execution_status::stopped, reason, reason, stop_mode::graceful, now);
    return;
  }
  effects_.emplace_back(fx::stop_owner{owner, reason});
}

bool execution_machine::start_step(uint32_t idx, int64_t now) {
  auto& def = g_->steps[idx];
  auto& s = steps_[idx];
  if (token_->any())
    return false;
  std::string error;
  auto why = skip_reason(idx, error);
  // A model call's messages and price come first: it reserves what it may cost.
  llm_start call;
  if (error.empty() && why == step_reason::none && def.kind == step_kind::llm
      && !is_loop(def)) {
    call = prepare_llm(idx);
    error = std::move(call.error);
  }
  if (!error.empty()) { // an attempt that fails before it starts
    ++s.attempt;
    s.started_at = now;
    fail_attempt(idx, error, nullptr, now);
    return true;
  }
  if (why != step_reason::none) {
    skip_step(idx, why, now);
    return true;
  }
  if (auto refused = scope_->charge(def.cost + call.reserved)) {
    blocked_ = true;
    stop_owner(refused->owner, refused->reason, now);
    return false;
  }
  scope_dirty_ = true;
  ++s.attempt;
  s.node = env_->node_name; // placement may name a worker instead
  s.started_at = now;
  s.ended_at = 0;
  s.error = nullptr;
  s.result = nullptr;
  switch (def.kind) {
    case step_kind::fn:
      start_fn(idx, now);
      break;
    case step_kind::run:
      enqueue(idx, nullptr, {}, now);
      break;
    case step_kind::tool: {
      std::string unknown;
      auto tool = tool_of(def, unknown);
      if (tool == nullptr && env_->has_cluster)
        enqueue(idx, nullptr, def.target, now); // a worker has it
      else if (tool == nullptr)
        fail_attempt(idx, unknown, nullptr, now);
      else
        enqueue(idx, tool, {}, now);
      break;
    }
    case step_kind::graph:
      spawn_child(idx, resolver_->graph_child(*this, idx, nullptr), 0, now);
      break;
    case step_kind::plan:
      start_plan(idx, now);
      break;
    case step_kind::wait:
      start_wait(idx, now);
      break;
    case step_kind::llm:
      if (is_loop(def)) { // a tool-calling loop: one child per turn
        spawn_child(idx, resolver_->graph_child(*this, idx, nullptr), 0, now);
        break;
      }
      reserve(idx, call.reserved);
      if (own_pool(idx).kind != fx::pool_ref::of::node)
        queue_llm(idx, now); // the provider's max_parallel
      else
        start_llm(idx, std::move(call.messages), now);
      break;
    case step_kind::agent: {
      auto c = resolver_->agent_step(*this, idx);
      if (!c.graph)
        s.child_id.clear(); // no run to resume
      if (c.graph || !c.error.empty()) {
        spawn_child(idx, std::move(c), 0, now);
        break;
      }
      // Ask the agent for a turn; the step waits `queued`.
      s.phase = step_phase::waiting_turn;
      s.reason = step_reason::none;
      emit_step(event_type::step_queued, now, def.id, step_status::queued);
      put_step(idx);
      effects_.emplace_back(fx::request_turn{idx, s.attempt});
      break;
    }
    default:
      fail_attempt(idx,
                   std::string{"step kind '"} + to_string(def.kind)
                     + "' is not available on this node",
                   nullptr, now);
  }
  return true;
}

// -- kinds --------------------------------------------------------------------------------

void execution_machine::start_fn(uint32_t idx, int64_t now) {
  auto& def = g_->steps[idx];
  auto& s = steps_[idx];
  reference_scope scope{&rec_.inputs, this, nullptr};
  auto with = resolve(def.with, scope);
  if (!with)
    return fail_attempt(idx, message_of(with.error()), nullptr, now);
  auto& name = def.target;
  if (name == "noop" || name == "echo" || name == "fail")
    // Instant: the record is written once, at the end; the event still says
    // that the step started.
    emit_step(event_type::step_started, now, def.id, step_status::running, step_reason::none,
              attempt_data(s.attempt));
  if (name == "noop")
    return complete_step(idx, json::object(), now);
  if (name == "echo")
    return complete_step(idx, std::move(*with), now);
  if (name == "fail") {
    auto msg = with->is_object() && with->contains("message") && (*with)["message"].is_string()
                 ? (*with)["message"].get<std::string>()
                 : std::string{"fail"};
    return fail_attempt(idx, msg, nullptr, now);
  }
  if (name == "sleep") {
    int64_t ms = 0;
    if (with->is_object() && with->contains("ms") && (*with)["ms"].is_number())
      ms = std::max<int64_t>(0, (*with)["ms"].get<int64_t>());
    mark_running(idx, step_phase::running_sleep, now);
    effects_.emplace_back(fx::timer{timer_kind::wake, idx, s.attempt, ms, ms});
    if (def.timeout)
      effects_.emplace_back(
        fx::timer{timer_kind::timeout, idx, s.attempt, def.timeout->count(), 0});
    return;
  }
  if (!env_->fns || !env_->fns->find(name))
    return fail_attempt(idx, "no function '" + name + "' is registered", nullptr, now);
  mark_running(idx, step_phase::running_fn, now);
  effects_.emplace_back(fx::start_fn{idx, s.attempt, name, std::move(*with)});
  if (def.timeout)
    effects_.emplace_back(
      fx::timer{timer_kind::timeout, idx, s.attempt, def.timeout->count(), 0});
}

const tool_def* execution_machine::tool_of(const step_def& def, std::string& error) const {
  bool named = def.kind == step_kind::tool || (def.kind == step_kind::plan && !def.target.empty());
  if (!named)
    return nullptr;
  if (env_->tools) {
    auto i = env_->tools->find(def.target);
    if (i != env_->tools->end())
      return &i->second;
  }
  error = "tool '" + def.target + "' is not registered on this node";
  return nullptr;
}

fx::pool_ref execution_machine::own_pool(uint32_t idx) const {
  auto& def = g_->steps[idx];
  auto in = [](const std::vector<std::string>& pools, const std::string& name) {
    return std::find(pools.begin(), pools.end(), name) != pools.end();
  };
  if (def.kind == step_kind::tool && in(env_->tool_pools, def.target))
    return {fx::pool_ref::of::tool, def.target};
  if (def.kind == step_kind::llm && in(env_->provider_pools, def.llm->provider))
    return {fx::pool_ref::of::provider, def.llm->provider};
  return {};
}

void execution_machine::enqueue(uint32_t idx, const tool_def* tool,
                                const std::string& tool_name, int64_t now) {
  auto& s = steps_[idx];
  release_slots(idx);
  if (!rec_.node.empty() && !env_->has_cluster && rec_.node != env_->node_name)
    return fail_attempt(idx,
                        "this step must run on node '" + rec_.node
                          + "' (where its agent lives), and this node runs no cluster",
                        nullptr, now);
  s.phase = step_phase::waiting_slot;
  s.reason = step_reason::none;
  s.ticket = next_ticket_++;
  if (own_pool(idx).kind != fx::pool_ref::of::node)
    s.held |= held_own_pool;
  emit_step(event_type::step_queued, now, g_->steps[idx].id, step_status::queued);
  put_step(idx);
  if (env_->has_cluster) {
    s.held |= held_place;
    effects_.emplace_back(
      fx::place{idx, s.attempt, s.ticket, tool ? tool->name : tool_name, rec_.node});
    return;
  }
  effects_.emplace_back(
    fx::acquire_slot{s.ticket, (s.held & held_own_pool) ? own_pool(idx) : fx::pool_ref{}});
}

void execution_machine::release_slots(uint32_t idx) {
  auto& s = steps_[idx];
  if (s.ticket != 0) // a model call holds no slot of the node's pool
    effects_.emplace_back(fx::release_slot{
      s.ticket, (s.held & held_own_pool) ? own_pool(idx) : fx::pool_ref{},
      g_->steps[idx].kind != step_kind::llm});
  if ((s.held & held_place) && env_->has_cluster)
    effects_.emplace_back(fx::release_place{s.node, s.ticket});
  s.ticket = 0;
  s.held = 0;
}

void execution_machine::start_plan(uint32_t idx, int64_t now) {
  auto& s = steps_[idx];
  if (!s.child_id.empty()) {
    auto c = resolver_->stored_plan(*this, idx);
    if (c.graph || !c.error.empty()) {
      spawn_child(idx, std::move(c), 0, now);
      return;
    }
    s.child_id.clear(); // the planned graph is gone: plan again
  }
  start_planner(idx, now);
}

void execution_machine::start_planner(uint32_t idx, int64_t now) {
  // The planner: a registered tool (by name) or an inline argv.
  std::string unknown;
  auto tool = tool_of(g_->steps[idx], unknown);
  if (!unknown.empty() && !env_->has_cluster)
    return fail_attempt(idx, unknown, nullptr, now);
  enqueue(idx, tool, tool ? std::string{} : g_->steps[idx].target, now);
}

void execution_machine::planned(uint32_t idx, json result, const std::string& error,
                                int64_t now) {
  if (!error.empty())
    return fail_attempt(idx, "planner: " + error, std::move(result), now);
  spawn_child(idx, resolver_->planned_child(*this, idx, std::move(result)), 0, now);
}

bool execution_machine::spawn_child(uint32_t idx, child_launch c, uint64_t turn, int64_t now) {
  if (!c.graph) {
    fail_attempt(idx, c.error, std::move(c.error_result), now);
    return false;
  }
  auto& s = steps_[idx];
  auto& def = g_->steps[idx];
  // A repeating step already running a child moves on to its next iteration.
  bool next = s.phase == step_phase::running_child;
  s.child_id = c.record.id;
  if (is_loop(def)) {
    side().iterations[idx] = std::max(c.record.iteration, 1);
  }
  if (!c.queued.empty())
    batch_or_new().append(std::move(c.queued));
  if (next) {
    emit_step(event_type::step_iteration, now, def.id, step_status::running, step_reason::none,
         {{"iteration", iteration(idx)}, {"child_id", s.child_id}});
    put_step(idx);
  } else {
    mark_running(idx, step_phase::running_child, now);
  }
  if (turn == 0 && c.queued.empty() && c.record.status == execution_status::completed) {
    // The child completed before this step took its result (we stopped or
    // died in between): its result is adopted, it does not run again.
    if (is_loop(def))
      iteration_done(idx, std::move(c.record.outputs), iteration_results(c.steps), now);
    else
      complete_step(idx, child_result(def, std::move(c.record.outputs)), now);
    return true;
  }
  effects_.emplace_back(std::make_unique<fx::spawn_child>(
    fx::spawn_child{idx, std::move(c.graph), std::move(c.record), std::move(c.steps), turn}));
  return true;
}

json execution_machine::child_result(const step_def& def, json outputs) {
  if (def.kind != step_kind::agent)
    return outputs;
  json reply = outputs.is_object() ? outputs.value("reply", json{}) : json{};
  return json{{"reply", std::move(reply)}};
}

// -- transitions --------------------------------------------------------------------------

void execution_machine::mark_running(uint32_t idx, step_phase phase, int64_t now) {
  auto& s = steps_[idx];
  if (status_of(s.phase) == step_status::queued)
    s.started_at = now; // waited for a slot: running starts now
  s.phase = phase;
  s.reason = step_reason::none;
  emit_step(event_type::step_started, now, g_->steps[idx].id, step_status::running,
            step_reason::none, attempt_data(s.attempt));
  put_step(idx);
}

void execution_machine::complete_step(uint32_t idx, json result, int64_t now) {
  leave_waiting(idx);
  release_slots(idx);
  auto& s = steps_[idx];
  auto& id = g_->steps[idx].id;
  s.phase = step_phase::completed;
  s.ended_at = now;
  s.error = nullptr;
  s.reason = step_reason::none;
  s.result = std::move(result); // what references to it resolve to from now on
  emit_step(event_type::step_completed, now, id, step_status::completed);
  put_step(idx);
  batch_completed_.push_back(idx);
}

void execution_machine::fail_attempt(uint32_t idx, const std::string& error, json result,
                                     int64_t now, step_reason why) {
  leave_waiting(idx);
  release_slots(idx);
  auto& s = steps_[idx];
  auto& def = g_->steps[idx];
  s.ended_at = now;
  s.error = error;
  s.result = std::move(result);
  // A loop that reached its `max` ends for good: a retry would decide the
  // same completed iterations again.
  if (phase_ < exec_phase::halting && s.attempt <= def.retries
      && why != step_reason::max_iterations) {
    auto delay = retry_delay(def, s.attempt);
    s.phase = step_phase::retry_wait;
    s.reason = step_reason::retry;
    emit_step(event_type::step_retry, now, def.id, step_status::pending, step_reason::retry,
         {{"attempt", s.attempt}, {"error", error}, {"delay_ms", delay.count()}});
    put_step(idx);
    effects_.emplace_back(fx::timer{timer_kind::retry, idx, s.attempt, delay.count(), 0});
    return;
  }
  s.phase = step_phase::failed;
  s.reason = why;
  s.deadline = 0; // a new attempt (a resume) waits afresh
  emit_step(event_type::step_failed, now, def.id, step_status::failed, why, {{"error", error}});
  put_step(idx);
  if (phase_ < exec_phase::halting) {
    error_ = "step '" + def.id + "' failed: " + error;
    begin_halt(execution_status::failed, step_reason::step_failed, step_reason::sibling_failed,
               stop_mode::graceful, now);
  }
}

void execution_machine::lose_step(uint32_t idx, const std::string& why, bool worker_alive,
                                  int64_t now) {
  auto& s = steps_[idx];
  if (worker_alive && s.phase == step_phase::running_runner)
    effects_.emplace_back(fx::drop_worker{idx});
  s.held &= static_cast<uint8_t>(~held_place); // the cluster dropped the node's slots
  release_slots(idx);
  if (phase_ >= exec_phase::halting) {
    if (is_active(s.phase))
      s.phase = step_phase::halted;
    try_complete_halt(now);
    return;
  }
  if (!is_active(s.phase))
    return;
  s.error = why;
  auto node = s.node;
  reset_to_pending(idx, step_reason::node_lost, now, {{"node", node}, {"error", why}});
  ready_.push_back(idx);
}

void execution_machine::finish(int64_t now) {
  phase_ = exec_phase::finishing;
  stop_clock(now);
  reference_scope scope{&rec_.inputs, this, nullptr};
  auto outputs = resolve(g_->outputs, scope);
  rec_.ended_at = now;
  if (outputs) {
    rec_.status = execution_status::completed;
    rec_.outputs = std::move(*outputs);
    emit(event_type::execution_completed, now, execution_status::completed);
    if (!rec_.agent.empty())
      append_history(now);
  } else {
    rec_.status = execution_status::failed;
    rec_.reason = step_reason::step_failed;
    rec_.error = "outputs: " + message_of(outputs.error());
    emit(event_type::execution_failed, now, execution_status::failed, step_reason::step_failed,
         {{"error", rec_.error}});
  }
  put_execution();
  flush(after_write::report);
}

} // namespace canopy::core
