// The execution machine's `llm` steps: the messages are resolved against the
// inputs and the needs' results, and the call runs on a thread of the shell
// (`fx::start_llm`) like a pooled function: `running` until its `done`, its
// text streaming in as output lines, a stop or a timeout cancelling it
// (`set_fn_stop`), which closes its connection to the provider at once.
//
// A provider with a `max_parallel` bounds its calls on this node: a call
// waits `queued` for a slot of the provider's own pool (never one of the
// node's subprocess slots).
//
// A provider with a `price` makes tokens cost: an attempt reserves what it
// may spend (estimated prompt tokens in, `max_tokens` out) with the step's
// charge, under the tree's `budget`, and settles to the reported `usage`
// when it completes. An attempt that ends without a usage (stopped, failed,
// timed out) keeps its reservation; one stopped while it still waited for
// its provider's slot gives it back.

#include "actors/execution/machine.hpp"

#include "persistence/conversation.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

execution_machine::llm_start execution_machine::prepare_llm(uint32_t idx) const {
  auto& llm = *g_->steps[idx].llm;
  llm_start out;
  if (!env_->providers || env_->providers->count(llm.provider) == 0) {
    std::string known;
    if (env_->providers)
      for (auto& kv : *env_->providers)
        known += (known.empty() ? "" : ", ") + kv.first;
    out.error = "provider '" + llm.provider + "' is not configured on this node ("
                + (known.empty() ? std::string{"it has no providers: see the node "
                                               "config's 'providers'"}
                                 : "configured: " + known)
                + ")";
    return out;
  }
  reference_scope scope{&rec_.inputs, this, nullptr};
  auto messages = resolve_messages(llm.messages, scope);
  if (!messages) {
    out.error = message_of(messages.error());
    return out;
  }
  auto& price = env_->providers->at(llm.provider).price;
  if (price) {
    if (!llm.max_tokens) {
      out.error = "provider '" + llm.provider
                  + "' has a price: the step needs 'max_tokens' (the most it may spend)";
      return out;
    }
    out.reserved = reservation(*price, estimate_prompt_tokens(*messages), *llm.max_tokens);
  }
  out.messages = std::move(*messages);
  return out;
}

void execution_machine::reserve(uint32_t idx, double reserved) {
  if (reserved <= 0)
    return;
  side().reserved[idx] = reserved;
}

void execution_machine::unreserve(uint32_t idx) {
  if (!side_)
    return;
  auto i = side_->reserved.find(idx);
  if (i == side_->reserved.end())
    return;
  scope_->settle(-i->second);
  scope_dirty_ = true;
  side_->reserved.erase(i);
}

void execution_machine::start_llm(uint32_t idx, json messages, int64_t now) {
  auto& def = g_->steps[idx];
  auto& s = steps_[idx];
  mark_running(idx, step_phase::running_fn, now);
  effects_.emplace_back(fx::start_llm{idx, s.attempt, std::move(messages)});
  if (def.timeout)
    effects_.emplace_back(fx::timer{timer_kind::timeout, idx, s.attempt, def.timeout->count(), 0});
}

void execution_machine::queue_llm(uint32_t idx, int64_t now) {
  auto& s = steps_[idx];
  s.phase = step_phase::waiting_slot;
  s.reason = step_reason::none;
  s.ticket = next_ticket_++;
  s.held |= held_own_pool;
  emit_step(event_type::step_queued, now, g_->steps[idx].id, step_status::queued);
  put_step(idx);
  effects_.emplace_back(fx::acquire_slot{s.ticket, own_pool(idx)});
}

void execution_machine::start_queued_llm(uint32_t idx, int64_t now) {
  // The messages are resolved again: they depend on nothing that changes
  // while the step waits; what it reserved stands.
  auto call = prepare_llm(idx);
  if (!call.error.empty())
    return fail_attempt(idx, call.error, nullptr, now);
  start_llm(idx, std::move(call.messages), now);
}

void execution_machine::settle_llm(uint32_t idx, json& result) {
  if (!side_)
    return;
  auto i = side_->reserved.find(idx);
  if (i == side_->reserved.end())
    return;
  auto reserved = i->second;
  side_->reserved.erase(i);
  auto& llm = *g_->steps[idx].llm;
  auto& price = env_->providers->at(llm.provider).price;
  auto spent = result.is_object() ? spend_of(*price, result.value("usage", json{}))
                                  : std::nullopt;
  if (!spent)
    return; // no usage: the reservation stands
  scope_->settle(*spent - reserved);
  scope_dirty_ = true;
  result["spend"] = *spent;
}

} // namespace canopy::core
