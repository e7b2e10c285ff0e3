#include "actors/execution/machine.hpp"

#include <algorithm>

namespace canopy::core {

// -- phases ---------------------------------------------------------------------------

step_status status_of(step_phase p) {
  switch (p) {
    case step_phase::idle:
    case step_phase::retry_wait:
      return step_status::pending;
    case step_phase::waiting_turn:
    case step_phase::waiting_slot:
      return step_status::queued;
    case step_phase::completed:
      return step_status::completed;
    case step_phase::failed:
      return step_status::failed;
    case step_phase::skipped:
      return step_status::skipped;
    case step_phase::waiting:
      return step_status::waiting;
    default:
      return step_status::running;
  }
}

bool is_active(step_phase p) {
  return is_active(status_of(p));
}

const char* to_string(exec_phase x) {
  constexpr const char* names[] = {"created", "admitting", "running",
                                   "halting", "finishing", "done"};
  return names[static_cast<size_t>(x)];
}

const char* to_string(step_phase x) {
  constexpr const char* names[] = {"idle",         "retry_wait",    "waiting_turn",
                                   "waiting_slot", "placing",       "running_fn",
                                   "running_sleep", "running_runner", "running_child",
                                   "halted",       "completed",     "failed",
                                   "skipped",      "waiting"};
  return names[static_cast<size_t>(x)];
}

// -- construction ---------------------------------------------------------------------

execution_machine::execution_machine(std::shared_ptr<const machine_env> env, machine_init init,
                                     step_resolver* resolver)
  : env_(std::move(env)),
    resolver_(resolver),
    rec_(std::move(init.record)),
    g_(std::move(init.graph)),
    token_(init.token ? std::move(init.token) : std::make_shared<halt_token>()),
    scope_(std::move(init.scope)),
    own_scope_(init.own_scope),
    scope_dirty_(init.scope_dirty),
    has_parent_(init.has_parent),
    acquire_lease_(init.acquire_lease),
    lease_epoch_(init.lease_epoch) {
  auto& g = *g_;
  auto n = g.steps.size();
  steps_.resize(n);
  // Dependents as one flat array: dep_targets_[dep_offsets_[i]..dep_offsets_[i+1]),
  // allocated only when some step has needs.
  bool any_needs = false;
  for (size_t i = 0; i < n; ++i) {
    steps_[i].remaining = static_cast<uint32_t>(g.steps[i].needs.size());
    any_needs = any_needs || !g.steps[i].needs.empty();
  }
  if (any_needs) {
    // Each `needs` entry looked up once: (needed step, dependent) pairs.
    std::vector<std::pair<uint32_t, uint32_t>> edges;
    for (size_t i = 0; i < n; ++i)
      for (auto& need : g.steps[i].needs)
        edges.emplace_back(static_cast<uint32_t>(g.index.at(need)), static_cast<uint32_t>(i));
    dep_offsets_.assign(n + 1, 0);
    for (auto& e : edges)
      ++dep_offsets_[e.first + 1];
    for (size_t i = 0; i < n; ++i)
      dep_offsets_[i + 1] += dep_offsets_[i];
    dep_targets_.resize(dep_offsets_[n]);
    auto fill = dep_offsets_;
    for (auto& e : edges)
      dep_targets_[fill[e.first]++] = e.second;
  }
  // Resume: completed steps keep their results and never run again;
  // skipped steps stay skipped.
  for (auto& r : init.steps) {
    auto i = g.index.find(r.step);
    if (i == g.index.end())
      continue;
    auto& s = steps_[i->second];
    s.attempt = r.attempt;
    s.child_id = r.child_id;
    s.node = r.node;
    s.started_at = r.started_at;
    s.ended_at = r.ended_at;
    if (r.status == step_status::pending || r.status == step_status::waiting)
      s.deadline = r.deadline; // a stopped wait keeps its deadline
    if (r.status == step_status::completed) {
      s.phase = step_phase::completed;
      s.result = std::move(r.result);
    } else if (r.status == step_status::skipped) {
      s.phase = step_phase::skipped; // final: never decided again
      s.reason = r.reason;
      ++skipped_;
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (is_settled(steps_[i].phase)) {
      ++durable_completed_;
      if (any_needs)
        for (auto k = dep_offsets_[i]; k < dep_offsets_[i + 1]; ++k)
          --steps_[dep_targets_[k]].remaining;
    }
  for (size_t i = n; i-- > 0;)
    if (!is_settled(steps_[i].phase) && steps_[i].remaining == 0)
      ready_.push_back(static_cast<uint32_t>(i));
}

// -- start ------------------------------------------------------------------------------

void execution_machine::start(int64_t now) {
  if (phase_ != exec_phase::created)
    return;
  if (!has_parent_ && env_->has_admission && !admitted_) {
    // A root waits `queued` for an admission slot; a stop meanwhile stops
    // it before it runs. The pool frees the slot when the actor quits.
    phase_ = exec_phase::admitting;
    effects_.emplace_back(fx::acquire_admission{});
    return;
  }
  if (token_->any())
    return; // an ancestor is stopping: its stop is on the way
  if (rec_.depth > scope_->max_depth()) {
    // Recursion that validation could not see (plans, agents).
    blocked_ = true;
    stop_owner(rec_.root_id, step_reason::max_depth, now);
    return;
  }
  phase_ = exec_phase::running;
  rec_.status = execution_status::running;
  rec_.reason = step_reason::none;
  rec_.error.clear();
  rec_.outputs = nullptr;
  rec_.ended_at = 0;
  bool resumed = rec_.started_at != 0;
  if (!resumed)
    rec_.started_at = now;
  run_started_ = now;
  if (own_scope_ && g_->limits.deadline) {
    auto left = g_->limits.deadline->count() - scope_->run_ms();
    effects_.emplace_back(fx::timer{timer_kind::deadline, 0, 0, std::max<int64_t>(0, left), 0});
  }
  emit(resumed ? event_type::execution_resumed : event_type::execution_started, now,
       execution_status::running);
  put_execution();
  pump(now);
  flush();
}

void execution_machine::admitted(int64_t now) {
  admitted_ = true;
  if (phase_ != exec_phase::admitting)
    return;
  phase_ = exec_phase::created;
  start(now);
}

// -- slots and placement ----------------------------------------------------------------

uint32_t execution_machine::step_of_ticket(uint32_t ticket) const {
  for (uint32_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].ticket == ticket && steps_[i].phase == step_phase::waiting_slot)
      return i;
  return static_cast<uint32_t>(steps_.size());
}

void execution_machine::slot_granted(uint32_t ticket, slot_from from, int64_t now) {
  auto i = step_of_ticket(ticket);
  if (i < steps_.size() && phase_ != exec_phase::done) {
    auto& s = steps_[i];
    if (from == slot_from::own && (s.held & held_own_pool) && !(s.held & held_own_slot)) {
      // The own pool's slot first; then a subprocess takes one of the node's.
      s.held |= held_own_slot;
      if (phase_ >= exec_phase::halting)
        try_complete_halt(now);
      else if (g_->steps[i].kind == step_kind::llm)
        start_queued_llm(i, now);
      else
        effects_.emplace_back(fx::acquire_slot{ticket, {}});
      flush();
      return;
    }
    if (from == slot_from::node && !(s.held & held_slot)) {
      s.held |= held_slot;
      if (phase_ >= exec_phase::halting) {
        try_complete_halt(now);
      } else {
        start_runner(i, now);
        pump(now);
      }
      flush();
      return;
    }
  }
  // A ticket nothing waits for: back to the pool that granted it.
  if (phase_ != exec_phase::done)
    effects_.emplace_back(fx::return_grant{ticket});
}

void execution_machine::placed(uint32_t idx, int32_t attempt, uint32_t ticket,
                               const std::string& node, bool remote, int64_t now) {
  if (phase_ == exec_phase::done)
    return;
  if (!current(idx, attempt) || steps_[idx].ticket != ticket
      || !(steps_[idx].held & held_place) || steps_[idx].phase != step_phase::waiting_slot
      || phase_ >= exec_phase::halting) {
    effects_.emplace_back(fx::release_place{node, ticket});
    return;
  }
  auto& s = steps_[idx];
  s.node = node;
  if (!remote) {
    effects_.emplace_back(
      fx::acquire_slot{ticket, (s.held & held_own_pool) ? own_pool(idx) : fx::pool_ref{}});
    return;
  }
  s.held |= held_remote | held_slot;
  start_runner(idx, now);
  pump(now);
  flush();
}

bool execution_machine::remote_started(uint32_t idx, int32_t attempt) {
  if (phase_ == exec_phase::done || !current(idx, attempt)
      || steps_[idx].phase != step_phase::placing)
    return false;
  steps_[idx].phase = step_phase::running_runner;
  if (phase_ >= exec_phase::halting)
    effects_.emplace_back(fx::send_exit{idx, child_reason(), mode_});
  return true;
}

void execution_machine::remote_failed(uint32_t idx, int32_t attempt, bool spawn_failed,
                                      const std::string& why, int64_t now) {
  if (phase_ == exec_phase::done || !current(idx, attempt)
      || steps_[idx].phase != step_phase::placing)
    return;
  steps_[idx].phase = step_phase::running_runner; // no worker: nothing to drop
  if (spawn_failed)
    // The worker cannot build or start the command: the attempt fails as it would here.
    fail_attempt(idx, why, nullptr, now);
  else
    // Not joined (yet), gone, or silent past the timeout: placed again.
    lose_step(idx, "the worker did not start the step: " + why, false, now);
  pump(now);
  flush();
}

// -- writes -----------------------------------------------------------------------------

void execution_machine::write_acknowledged(std::vector<uint32_t> completed, after_write then,
                                           int64_t now) {
  if (phase_ == exec_phase::done)
    return;
  if (!completed.empty())
    on_durable(completed, now);
  if (then == after_write::report)
    report_and_quit();
}

std::vector<effect> execution_machine::take_effects() {
  std::vector<effect> out;
  out.swap(effects_);
  return out;
}

std::vector<effect> execution_machine::flush_effects() {
  if (phase_ != exec_phase::done)
    flush();
  return take_effects();
}

} // namespace canopy::core
