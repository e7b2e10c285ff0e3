// The execution machine: conditional steps. A step whose needs are settled
// is skipped when its `after` rule or its `when` says so
// (persistence/condition.hpp); a skipped step is final and never starts.

#include "actors/execution/machine.hpp"

#include "persistence/condition.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

step_reason execution_machine::skip_reason(uint32_t idx, std::string& error) const {
  auto& def = g_->steps[idx];
  // Its needs matter only when one of them may have been skipped, or when
  // its rule asks for a completed one: most steps pass both tests at once.
  if (!def.needs.empty() && (skipped_ > 0 || def.after == after_rule::any_completed)) {
    size_t completed = 0;
    size_t skipped = 0;
    for (auto& need : def.needs) {
      auto p = steps_[g_->index.at(need)].phase;
      completed += p == step_phase::completed ? 1 : 0;
      skipped += p == step_phase::skipped ? 1 : 0;
    }
    if (def.after == after_rule::all_completed ? skipped > 0 : completed == 0)
      return step_reason::needs_skipped;
  }
  if (def.when.is_null())
    return step_reason::none;
  reference_scope scope{&rec_.inputs, this, nullptr};
  auto holds = evaluate_condition(def.when, scope);
  if (!holds) {
    error = message_of(holds.error());
    return step_reason::none;
  }
  return *holds ? step_reason::none : step_reason::condition_false;
}

void execution_machine::skip_step(uint32_t idx, step_reason reason, int64_t now) {
  auto& s = steps_[idx];
  s.phase = step_phase::skipped;
  s.reason = reason;
  s.started_at = 0;
  s.ended_at = now;
  s.error = nullptr;
  s.result = nullptr;
  ++skipped_;
  emit_step(event_type::step_skipped, now, g_->steps[idx].id, step_status::skipped, reason);
  put_step(idx);
  batch_completed_.push_back(idx); // its dependents are decided once it is durable
}

} // namespace canopy::core
