// The runtime's agents: their actors, created and messaged, and their runs cancelled.

#include "runtime/node/runtime.hpp"

#include <chrono>
#include <set>

#include <caf/all.hpp>

#include "actors/agent_runs.hpp"
#include "actors/blocking.hpp"
#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/stop_protocol.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"
#include "runtime/node/runtime_detail.hpp"

namespace canopy::core {

using runtime_detail::commit_bound;

// -- agents ----------------------------------------------------------------------------

caf::expected<agent_actor> runtime::agent_of(const std::string& owner,
                                             const std::string& name) {
  auto rec = db_->agent(owner, name);
  if (!rec)
    return rec.error();
  std::lock_guard<std::mutex> guard{agents_mtx_};
  if (closing_)
    return make_error(runtime_errc::shutting_down, "the node is shutting down");
  auto& a = agents_[{owner, name}];
  if (!a)
    a = spawn_agent(*sys_, owner, name, svc_);
  return a;
}

caf::expected<std::pair<agent_record, bool>> runtime::create_agent(const std::string& owner,
                                                                   const std::string& name,
                                                                   const graph& g,
                                                                   busy_policy on_busy,
                                                                   const std::string& node) {
  // Creations of this process are serialised, so `created` is exact.
  std::lock_guard<std::mutex> guard{register_mtx_};
  agent_record x;
  x.owner = owner;
  x.name = name;
  x.graph = to_stored(g);
  x.on_busy = on_busy;
  x.node = node;
  x.created_at = x.updated_at = now_ms();
  auto old = db_->agent(owner, name);
  bool created = !old;
  if (old)
    x.created_at = old->created_at;
  else if (!is(old.error(), persistence_errc::not_found))
    return old.error();
  write_batch batch;
  batch.agents.push_back(x);
  if (auto err = commit_and_wait(writer_, commit_bound(*db_), std::move(batch)))
    return err;
  return std::make_pair(std::move(x), created);
}

caf::expected<agent_reply> runtime::send_to_agent(const std::string& owner,
                                                  const std::string& name, json message,
                                                  const std::string& who) {
  auto a = agent_of(owner, name);
  if (!a)
    return a.error();
  return blocking_ask<agent_reply>(*sys_, *a, std::nullopt, message_atom::value, std::move(message), who);
}

caf::expected<cancel_result> runtime::cancel_agent(const std::string& owner,
                                                 const std::string& name,
                                                 const std::string& who, millis wait) {
  auto ag = db_->agent(owner, name);
  if (!ag)
    return ag.error();
  auto runs = db_->agent_runs(owner, name);
  if (!runs)
    return runs.error();
  // Stop the outermost runs only: a run inside another one's tree stops
  // with it (reason `parent_stopped`).
  std::set<std::string> ids;
  for (auto& r : *runs)
    ids.insert(r.first);
  std::vector<execution_record> targets;
  for (auto& r : *runs) {
    auto rec = db_->execution(r.first);
    if (!rec || !is_stoppable(rec->status))
      continue;
    bool inner = false;
    for (auto up = rec->parent_id; !up.empty() && !inner;) {
      inner = ids.count(up) != 0;
      auto parent = db_->execution(up);
      up = parent ? parent->parent_id : std::string{};
    }
    if (!inner)
      targets.push_back(std::move(*rec));
  }
  if (targets.empty())
    return cancel_result::no_execution;
  std::vector<stop_order> orders;
  for (auto& rec : targets) {
    stop_order o{rec.id, {}};
    o.extra.events.push_back(make_agent_event(rec, event_type::agent_cancelled,
                                              {{"agent", name}, {"by", who}}));
    orders.push_back(std::move(o));
  }
  auto outcomes = canopy::core::stop_all(stop_ctx(), std::move(orders),
                                         stop_mode::graceful, who, wait, true);
  if (!outcomes.empty() && outcomes.back().error)
    return std::move(outcomes.back().error);
  return cancel_result::cancelled;
}

} // namespace canopy::core
