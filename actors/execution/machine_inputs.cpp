// The execution machine: what its workers report (attempts ending, runners'
// pids and output, timers, downs, lost nodes, children settling, agents'
// answers).

#include "actors/execution/machine.hpp"

#include <algorithm>

namespace canopy::core {

// -- attempts ---------------------------------------------------------------------------

void execution_machine::step_done(uint32_t idx, int32_t attempt, json result,
                                  const std::string& error, int64_t now) {
  if (phase_ == exec_phase::done || !current(idx, attempt))
    return;
  auto p = steps_[idx].phase;
  if (p != step_phase::running_fn && p != step_phase::running_runner)
    return; // timed out or abandoned: its late result is ignored
  if (g_->steps[idx].kind == step_kind::llm && error.empty())
    settle_llm(idx, result);
  release_slots(idx);
  if (phase_ >= exec_phase::halting) {
    steps_[idx].phase = step_phase::halted;
    try_complete_halt(now);
  } else if (p == step_phase::running_runner && g_->steps[idx].kind == step_kind::plan) {
    planned(idx, std::move(result), error, now);
    pump(now);
  } else {
    if (error.empty())
      complete_step(idx, std::move(result), now);
    else
      fail_attempt(idx, error, std::move(result), now);
    pump(now);
  }
  flush();
}

void execution_machine::runner_started(uint32_t idx, int32_t attempt, int64_t pid,
                                       uint64_t pid_start) {
  if (phase_ == exec_phase::done || !current(idx, attempt))
    return;
  auto& s = steps_[idx];
  if (s.held & held_remote)
    return; // a pid on another host: recovery here must never signal it
  s.pid = pid;
  s.pid_start = pid_start;
  put_step(idx);
  flush();
}

void execution_machine::output(uint32_t idx, int32_t attempt, json lines, int64_t now) {
  if (phase_ == exec_phase::done || !current(idx, attempt))
    return;
  for (auto& l : lines)
    emit_note(event_type::step_output, now, g_->steps[idx].id, std::move(l));
  flush();
}

void execution_machine::signalled(uint32_t idx, int32_t attempt, int signal, int next,
                                  int64_t next_in_ms, int64_t now) {
  // While halting too (a stop's escalation is when it matters), never once
  // the final record is on its way. An ordinary event in a write of its own:
  // the snapshot that settles the halt comes later, in one piece.
  if (phase_ >= exec_phase::finishing || !current(idx, attempt)
      || steps_[idx].phase != step_phase::running_runner)
    return;
  json data(json::value_t::object);
  auto& d = data.get_ref<json::object_t&>();
  d.emplace("attempt", attempt);
  d.emplace("signal", signal_name(signal));
  d.emplace("next", next != 0 ? json(signal_name(next)) : json(nullptr));
  d.emplace("next_in_ms", next != 0 ? json(next_in_ms) : json(nullptr));
  emit_note(event_type::step_signalled, now, g_->steps[idx].id, std::move(data));
  flush();
}

void execution_machine::wake(uint32_t idx, int32_t attempt, int64_t ms, int64_t now) {
  if (phase_ >= exec_phase::halting || !current(idx, attempt)
      || steps_[idx].phase != step_phase::running_sleep)
    return;
  complete_step(idx, json{{"slept_ms", ms}}, now);
  pump(now);
  flush();
}

void execution_machine::timeout(uint32_t idx, int32_t attempt, int64_t now) {
  if (phase_ >= exec_phase::halting || !current(idx, attempt))
    return;
  auto p = steps_[idx].phase;
  if (p != step_phase::running_fn && p != step_phase::running_sleep)
    return;
  if (p == step_phase::running_fn)
    // The function sees its stop token; its late result is ignored.
    effects_.emplace_back(fx::set_fn_stop{idx});
  fail_attempt(idx, "timeout", nullptr, now);
  pump(now);
  flush();
}

void execution_machine::retry_due(uint32_t idx, int32_t attempt, int64_t now) {
  if (phase_ >= exec_phase::halting || !current(idx, attempt)
      || steps_[idx].phase != step_phase::retry_wait)
    return;
  ready_.push_back(idx);
  pump(now);
  flush();
}

void execution_machine::deadline(int64_t now) {
  if (phase_ >= exec_phase::halting)
    return;
  begin_halt(execution_status::stopped, step_reason::deadline, step_reason::deadline,
             stop_mode::graceful, now);
  flush();
}

void execution_machine::abandon_fn(uint32_t idx, int32_t attempt, int64_t now) {
  if (phase_ == exec_phase::done || !current(idx, attempt)
      || steps_[idx].phase != step_phase::running_fn)
    return;
  // Its thread runs on; its late result is ignored.
  steps_[idx].phase = step_phase::halted;
  try_complete_halt(now);
  flush();
}

void execution_machine::down(uint32_t idx, const std::string& why, int64_t now) {
  if (phase_ == exec_phase::done || idx >= steps_.size())
    return;
  auto& s = steps_[idx];
  if (s.phase != step_phase::running_runner && s.phase != step_phase::running_child)
    return; // it reported before it went down
  if (s.held & held_remote) {
    // A remote runner gone without a result: its worker stopped or lost the
    // connection. The step runs again elsewhere (at-least-once).
    lose_step(idx,
              "the step's runner on node '" + s.node + "' ended without a result (" + why + ")",
              false, now);
  } else if (phase_ >= exec_phase::halting) {
    s.phase = step_phase::halted;
    try_complete_halt(now);
  } else {
    fail_attempt(idx, "worker terminated: " + why, nullptr, now);
  }
  pump(now);
  flush();
}

void execution_machine::node_lost(const std::string& node, int64_t now) {
  if (phase_ == exec_phase::done)
    return;
  for (uint32_t i = 0; i < steps_.size(); ++i) {
    auto& s = steps_[i];
    if (s.node == node && (s.held & held_remote) && is_active(s.phase))
      lose_step(i, "node '" + node + "' lost", true, now);
  }
  pump(now);
  flush();
}

void execution_machine::child_settled(uint32_t idx, execution_status status, json outputs,
                                      const std::string& error, write_batch snapshot,
                                      int64_t now, uint64_t stopped_events, json steps) {
  if (phase_ == exec_phase::done || idx >= steps_.size())
    return;
  stopped_below_ += stopped_events;
  auto& s = steps_[idx];
  auto& def = g_->steps[idx];
  // A planned graph stopped before it ran its first step was still being
  // created: delete it, nothing of it remains; the step plans again.
  bool never_started = std::any_of(
    snapshot.executions.begin(), snapshot.executions.end(),
    [&](const execution_record& r) { return r.id == s.child_id && r.started_at == 0; });
  if (phase_ >= exec_phase::halting && def.kind == step_kind::plan && never_started) {
    if (!snapshot_)
      snapshot_ = std::make_unique<write_batch>();
    snapshot_->deleted_executions.push_back(s.child_id);
    s.child_id.clear();
  } else if (!snapshot.empty()) {
    // A child stopped with us: its final records join our snapshot.
    if (!snapshot_)
      snapshot_ = std::make_unique<write_batch>();
    snapshot_->append(std::move(snapshot));
  }
  if (s.phase != step_phase::running_child)
    return;
  if (phase_ >= exec_phase::halting) {
    s.phase = step_phase::halted; // stopped with us: the snapshot resets it
  } else if (status == execution_status::completed && is_loop(def)) {
    iteration_done(idx, std::move(outputs), steps, now);
  } else if (status == execution_status::completed) {
    complete_step(idx, child_result(def, std::move(outputs)), now);
  } else if (status == execution_status::failed) {
    fail_attempt(idx, error.empty() ? "child execution failed" : error, nullptr, now);
  } else {
    // A child stopped on its own: its step waits for a resume.
    reset_to_pending(idx, step_reason::child_stopped, now);
    child_stopped_ = true;
  }
  if (phase_ >= exec_phase::halting)
    try_complete_halt(now);
  else
    pump(now);
  flush();
}

// -- agents -----------------------------------------------------------------------------

void execution_machine::turn_answered(uint32_t idx, int32_t attempt, turn_verdict verdict,
                                      uint64_t turn, int64_t now) {
  bool granted = verdict == turn_verdict::granted;
  if (phase_ == exec_phase::done)
    return;
  if (!current(idx, attempt) || steps_[idx].phase != step_phase::waiting_turn
      || phase_ >= exec_phase::halting) {
    // No longer wanted (a stop came first): give the turn back.
    if (granted)
      effects_.emplace_back(fx::release_turn{idx, turn});
    return;
  }
  auto& def = g_->steps[idx];
  if (verdict == turn_verdict::busy) {
    fail_attempt(idx, "agent '" + def.target + "' is busy (on_busy: reject)", nullptr, now);
  } else if (verdict == turn_verdict::cancelled) {
    fail_attempt(idx,
                 "the message to agent '" + def.target
                   + "' was superseded by a newer one (on_busy: cancel_previous)",
                 nullptr, now);
  } else {
    auto c = resolver_->agent_run(*this, idx);
    if (!c.graph && granted)
      effects_.emplace_back(fx::release_turn{idx, turn});
    spawn_child(idx, std::move(c), granted ? turn : 0, now);
  }
  pump(now);
  flush();
}

void execution_machine::turn_failed(uint32_t idx, int32_t attempt, const std::string& why,
                                    int64_t now) {
  if (phase_ >= exec_phase::halting || !current(idx, attempt)
      || steps_[idx].phase != step_phase::waiting_turn)
    return;
  fail_attempt(idx, "agent '" + g_->steps[idx].target + "': " + why, nullptr, now);
  pump(now);
  flush();
}

} // namespace canopy::core
