// The execution machine's `llm` steps: the messages are resolved against the
// inputs and the needs' results, and the call runs on a thread of the shell
// (`fx::start_llm`) like a pooled function: `running` until its `done`, its
// text streaming in as output lines, a stop or a timeout cancelling it
// (`set_fn_stop`), which closes its connection to the provider at once.

#include "actors/execution/machine.hpp"

#include "persistence/error.hpp"

namespace canopy {

void execution_machine::start_llm(uint32_t idx, int64_t now) {
  auto& def = g_->steps[idx];
  auto& s = steps_[idx];
  auto& llm = *def.llm;
  if (!env_->providers || env_->providers->count(llm.provider) == 0) {
    std::string known;
    if (env_->providers)
      for (auto& kv : *env_->providers)
        known += (known.empty() ? "" : ", ") + kv.first;
    return fail_attempt(idx,
                        "provider '" + llm.provider + "' is not configured on this node ("
                          + (known.empty() ? std::string{"it has no providers: see the node "
                                                         "config's 'providers'"}
                                           : "configured: " + known)
                          + ")",
                        nullptr, now);
  }
  reference_scope scope{&rec_.inputs, this, nullptr};
  auto messages = resolve(llm.messages, scope);
  if (!messages)
    return fail_attempt(idx, message_of(messages.error()), nullptr, now);
  // A content that was one reference to a non-string value goes as its JSON text.
  for (auto& m : *messages)
    if (auto c = m.find("content"); c != m.end() && !c->is_string())
      *c = c->dump();
  mark_running(idx, step_phase::running_fn, now);
  effects_.emplace_back(fx::start_llm{idx, s.attempt, std::move(*messages)});
  if (def.timeout)
    effects_.emplace_back(fx::timer{timer_kind::timeout, idx, s.attempt, def.timeout->count(), 0});
}

} // namespace canopy
