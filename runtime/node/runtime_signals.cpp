// The runtime's signals: decided by the rule of persistence/signal_rules.hpp,
// committed with their `signal.received` event, handed to the signal desk.

#include "runtime/node/runtime.hpp"

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/messages.hpp"
#include "persistence/duration.hpp"
#include "runtime/node/runtime_detail.hpp"

namespace canopy::core {

caf::expected<signal_answer> execution_handle::signal(const std::string& name, json value,
                                                     const signal_options& opts) const {
  signal_request req;
  req.target = id_;
  req.name = name;
  req.value = std::move(value);
  req.failure = opts.failure;
  req.message = opts.message;
  req.step = opts.step;
  req.key = opts.key;
  req.who = "library";
  return rt_->signal(std::move(req), opts.wait);
}

caf::expected<signal_answer> runtime::signal(signal_request req, millis wait) {
  signal_answer out;
  {
    std::lock_guard<std::mutex> guard{signals_mtx_};
    req.now = now_ms();
    out.decision = decide_signal(*db_, req);
    auto& d = out.decision;
    if (d.outcome == signal_outcome::replay) {
      out.consumed = d.record.state == signal_state::consumed;
      out.consumed_execution = d.record.wait_execution;
      out.consumed_step = d.record.wait_step;
      return out;
    }
    if (d.outcome != signal_outcome::store)
      return out;
    write_batch batch;
    add_received(batch, d.target, d.record);
    if (auto err = commit_and_wait(writer_, runtime_detail::commit_bound(*db_), std::move(batch)))
      return err;
  }
  // Stored: a wait here may take it now (answered once its write committed).
  auto who = blocking_ask<std::vector<std::string>>(*sys_, desk_, wait, deliver_atom::value,
                                                    out.decision.record);
  if (who && who->size() == 2) {
    out.consumed = true;
    out.consumed_execution = (*who)[0];
    out.consumed_step = (*who)[1];
  }
  return out;
}

} // namespace canopy::core
