// The execution machine: `wait` steps. A wait is armed (`waiting`, its
// deadline and prompt in the step record, a `step.waiting` event, one
// write), registered with the shell's signal desk, and ends in exactly one
// write: completed by a signal (the signal marked consumed in the same
// write), failed by a failure signal (`rejected`), or ended by its deadline
// (`on_timeout`). A stop sets it back to `pending` at once, deadline kept.

#include "actors/execution/machine.hpp"

#include <algorithm>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "persistence/reference.hpp"

namespace canopy::core {

// -- arming -----------------------------------------------------------------------------

void execution_machine::start_wait(uint32_t idx, int64_t now) {
  auto& def = g_->steps[idx];
  auto& w = *def.wait;
  auto& s = steps_[idx];
  std::string prompt;
  if (!w.prompt.empty()) {
    reference_scope scope{&rec_.inputs, this, nullptr};
    auto text = resolve_text(w.prompt, scope);
    if (!text)
      return fail_attempt(idx, "prompt: " + message_of(text.error()), nullptr, now);
    prompt = std::move(*text);
  }
  side().prompts[idx] = prompt;
  // The deadline is set once, when first armed: a stop keeps it, so a resume
  // waits for the rest of it, not for a new timeout.
  if (s.deadline == 0 && w.timeout)
    s.deadline = now + w.timeout->count();
  s.phase = step_phase::waiting;
  s.reason = step_reason::none;
  json data(json::value_t::object);
  auto& d = data.get_ref<json::object_t&>();
  d.emplace("attempt", s.attempt);
  d.emplace("signal", w.signal);
  d.emplace("deadline", s.deadline != 0 ? json(to_rfc3339(s.deadline)) : json(nullptr));
  d.emplace("prompt", prompt.empty() ? json(nullptr) : json(prompt));
  emit_step(event_type::step_waiting, now, def.id, step_status::waiting, step_reason::none,
            std::move(data));
  put_step(idx);
  effects_.emplace_back(fx::arm_wait{idx, s.attempt, w.signal});
}

void execution_machine::leave_waiting(uint32_t idx) {
  if (steps_[idx].phase == step_phase::waiting)
    effects_.emplace_back(fx::disarm_wait{idx});
}

// -- inputs -----------------------------------------------------------------------------

void execution_machine::wait_armed(uint32_t idx, int32_t attempt, int64_t now) {
  if (phase_ != exec_phase::running || !current(idx, attempt)
      || steps_[idx].phase != step_phase::waiting)
    return;
  auto deadline = steps_[idx].deadline;
  if (deadline != 0)
    effects_.emplace_back(fx::timer{timer_kind::wait_due, idx, attempt,
                                    std::max<int64_t>(0, deadline - now), 0});
}

bool execution_machine::signal_offered(uint32_t idx, int32_t attempt, const signal_record& sig,
                                       int64_t now) {
  if (phase_ != exec_phase::running || !current(idx, attempt)
      || steps_[idx].phase != step_phase::waiting)
    return false;
  auto& s = steps_[idx];
  auto& def = g_->steps[idx];
  if (sig.name != def.wait->signal)
    return false;
  // A signal received after the deadline is too late for this wait, even
  // when the deadline passed while the tree was stopped.
  if (s.deadline != 0 && sig.received_at > s.deadline)
    return false;
  auto taken = sig;
  taken.state = signal_state::consumed;
  taken.wait_execution = rec_.id;
  taken.wait_step = def.id;
  taken.consumed_at = now;
  json data(json::value_t::object);
  auto& d = data.get_ref<json::object_t&>();
  d.emplace("signal_id", sig.id);
  d.emplace("name", sig.name);
  d.emplace("by", sig.who);
  emit_note(event_type::signal_consumed, now, def.id, std::move(data));
  batch_or_new().signals.push_back(std::move(taken));
  // The write that consumes it answers the offer: it is the one that ends
  // the step (a failure's ends the execution too, whose actor then quits).
  reply_pending_ = true;
  if (sig.failure) {
    fail_attempt(idx, sig.message.empty() ? std::string{to_string(step_reason::rejected)}
                                          : std::string{to_string(step_reason::rejected)} + ": "
                                              + sig.message,
                 nullptr, now, step_reason::rejected);
  } else {
    json result(json::value_t::object);
    auto& r = result.get_ref<json::object_t&>();
    r.emplace("value", sig.value);
    r.emplace("timed_out", false);
    r.emplace("by", sig.who);
    r.emplace("at", to_rfc3339(sig.received_at));
    complete_step(idx, std::move(result), now);
  }
  pump(now);
  flush();
  return true;
}

void execution_machine::wait_due(uint32_t idx, int32_t attempt, int64_t now) {
  if (phase_ != exec_phase::running || !current(idx, attempt)
      || steps_[idx].phase != step_phase::waiting)
    return;
  auto& s = steps_[idx];
  if (s.deadline == 0)
    return;
  if (now < s.deadline) {
    // The timer fired early by the wall clock (it stepped back): wait for the rest.
    effects_.emplace_back(fx::timer{timer_kind::wait_due, idx, attempt, s.deadline - now, 0});
    return;
  }
  auto& w = *g_->steps[idx].wait;
  if (w.on_timeout == wait_timeout::use_default) {
    json result(json::value_t::object);
    auto& r = result.get_ref<json::object_t&>();
    r.emplace("value", w.default_value);
    r.emplace("timed_out", true);
    r.emplace("by", nullptr);
    r.emplace("at", to_rfc3339(now));
    complete_step(idx, std::move(result), now);
  } else {
    fail_attempt(idx, "no '" + w.signal + "' signal came before the deadline", nullptr, now,
                 step_reason::wait_timeout);
  }
  pump(now);
  flush();
}

} // namespace canopy::core
