// The execution machine's bounded loops: a `graph` step with `repeat` runs
// its child graph as iteration 1, 2, ... Each iteration is a child execution
// of its own; when one completes, `until` (over its step results) says
// whether the step completes, and `carry` gives the next one's inputs.
// The step's `child_id` names the current iteration, so a resume finds it:
// a completed iteration is adopted (`spawn_child`) and decided again, never
// run again. An `llm` step's tool-calling loop runs the same way, one
// turn per iteration (persistence/conversation.hpp): it ends when the
// model answers without asking for tools.

#include "actors/execution/machine.hpp"

#include "persistence/condition.hpp"
#include "persistence/conversation.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

json iteration_results(const std::vector<step_record>& steps) {
  json out(json::value_t::object);
  auto& o = out.get_ref<json::object_t&>();
  for (auto& s : steps)
    if (s.status == step_status::completed)
      o.emplace(s.step, s.result);
    else if (s.status == step_status::skipped)
      o.emplace(s.step, nullptr);
  return out;
}

int32_t execution_machine::iteration(uint32_t idx) const {
  if (!side_)
    return 0;
  auto i = side_->iterations.find(idx);
  return i == side_->iterations.end() ? 0 : i->second;
}

void execution_machine::iteration_done(uint32_t idx, json outputs, const json& steps,
                                       int64_t now) {
  auto& def = g_->steps[idx];
  if (!def.repeat)
    return turn_done(idx, std::move(outputs), now);
  auto& rep = *def.repeat;
  auto n = std::max(iteration(idx), 1);
  static const json no_inputs = json::object();
  json_step_results results{steps};
  reference_scope scope{&no_inputs, &results, nullptr};
  if (!rep.until.is_null()) {
    auto holds = evaluate_condition(rep.until, scope);
    if (!holds)
      return fail_attempt(idx, "repeat.until: " + message_of(holds.error()), nullptr, now);
    if (*holds)
      return complete_step(idx, std::move(outputs), now);
  }
  if (n >= rep.max) {
    if (rep.on_max == on_max_rule::complete)
      return complete_step(idx, std::move(outputs), now);
    return fail_attempt(idx,
                        "repeat.until did not hold after " + std::to_string(n) + " iteration"
                          + (n == 1 ? "" : "s") + " (max " + std::to_string(rep.max) + ")",
                        nullptr, now, step_reason::max_iterations);
  }
  auto carry = resolve(rep.carry, scope);
  if (!carry)
    return fail_attempt(idx, "repeat.carry: " + message_of(carry.error()), nullptr, now);
  next_iteration next{n + 1, std::move(*carry)};
  spawn_child(idx, resolver_->graph_child(*this, idx, &next), 0, now);
}

void execution_machine::turn_done(uint32_t idx, json outputs, int64_t now) {
  auto& def = g_->steps[idx];
  auto n = std::max(iteration(idx), 1);
  auto reply = outputs.is_object() ? outputs.value("reply", json::object()) : json::object();
  auto calls = reply.is_object() ? reply.value("tool_calls", json::array()) : json::array();
  if (!calls.is_array() || calls.empty())
    return complete_step(idx, loop_result(outputs, n), now);
  if (n >= def.llm->max_turns)
    return fail_attempt(idx,
                        "the model still asked for tools after " + std::to_string(n)
                          + " turns (max_turns " + std::to_string(def.llm->max_turns) + ")",
                        loop_result(outputs, n), now, step_reason::max_iterations);
  next_iteration next{n + 1, {{"messages", next_history(outputs)}}};
  spawn_child(idx, resolver_->graph_child(*this, idx, &next), 0, now);
}

} // namespace canopy::core
