#include "actors/tree_context.hpp"

#include <algorithm>
#include <vector>

#include <caf/actor_cast.hpp>

#include "persistence/graph.hpp"

namespace canopy::core {

// -- directory -------------------------------------------------------------------

execution_directory::stripe& execution_directory::stripe_of(const std::string& id) const {
  return stripes_[std::hash<std::string>{}(id) % stripes];
}

void execution_directory::add(const std::string& id, const caf::actor& a,
                              std::shared_ptr<halt_token> token) {
  auto& s = stripe_of(id);
  {
    entry replaced; // released after the lock
    std::lock_guard<std::mutex> guard{s.mtx};
    auto [i, fresh] = s.actors.try_emplace(id);
    if (fresh)
      entries_.fetch_add(1, std::memory_order_relaxed);
    else
      replaced = std::move(i->second);
    i->second = entry{a.address(), std::move(token)};
  }
  // None was live when every earlier add had departed. Sequentially
  // consistent, so that a watcher that saw none live and went to sleep is
  // woken by the add that follows.
  if (added_.fetch_add(1) == departed_.load() && on_first_)
    on_first_();
  auto live = size();
  auto held = entries_.load(std::memory_order_relaxed);
  if (held > live && held - live > std::max<size_t>(1024, live))
    sweep();
}

void execution_directory::depart() noexcept {
  departed_.fetch_add(1);
}

size_t execution_directory::sweep() {
  // One sweep at a time; a caller that finds one running leaves it the work.
  if (sweeping_.exchange(true, std::memory_order_acquire))
    return 0;
  size_t erased = 0;
  for (auto& s : stripes_) {
    std::vector<decltype(s.actors)::node_type> gone; // released after the lock
    std::lock_guard<std::mutex> guard{s.mtx};
    for (auto i = s.actors.begin(); i != s.actors.end();) {
      auto next = std::next(i);
      if (!caf::actor_cast<caf::strong_actor_ptr>(i->second.actor))
        gone.push_back(s.actors.extract(i));
      i = next;
    }
    erased += gone.size();
  }
  entries_.fetch_sub(erased, std::memory_order_relaxed);
  sweeping_.store(false, std::memory_order_release);
  return erased;
}

size_t execution_directory::sweep_if_settled() {
  auto departed = departed_.load(std::memory_order_relaxed);
  bool settled = departed == departed_at_last_look_;
  departed_at_last_look_ = departed;
  return settled && held() > size() ? sweep() : 0;
}

std::shared_ptr<halt_token> execution_directory::token(const std::string& id) const {
  auto& s = stripe_of(id);
  std::lock_guard<std::mutex> guard{s.mtx};
  auto i = s.actors.find(id);
  return i == s.actors.end() ? nullptr : i->second.token.lock();
}

caf::actor execution_directory::find(const std::string& id) const {
  auto& s = stripe_of(id);
  std::lock_guard<std::mutex> guard{s.mtx};
  auto i = s.actors.find(id);
  if (i == s.actors.end())
    return caf::actor{};
  // An ended actor still referenced somewhere (its parent has not processed
  // its down yet) is no more found than a destroyed one: CAF sets the flag
  // before it sends the down and exit messages.
  auto ptr = caf::actor_cast<caf::strong_actor_ptr>(i->second.actor);
  if (!ptr || ptr->get()->getf(caf::abstract_actor::is_cleaned_up_flag))
    return caf::actor{};
  return caf::actor_cast<caf::actor>(std::move(ptr));
}

size_t execution_directory::size() const {
  auto added = added_.load();
  auto departed = departed_.load();
  return added > departed ? added - departed : 0;
}

// -- limits ------------------------------------------------------------------------

limit_scope::limit_scope(std::string owner, std::shared_ptr<limit_scope> parent,
                         std::optional<uint64_t> max_steps, std::optional<double> budget,
                         std::optional<int> max_depth, tree_counters used)
  : mtx_(parent ? parent->mtx_ : std::make_shared<std::mutex>()),
    owner_(std::move(owner)),
    parent_(std::move(parent)),
    max_steps_(max_steps),
    budget_(budget),
    max_depth_(max_depth),
    used_(used) {
  if (used_.budget > 0 && (!budget_ || *budget_ < used_.budget))
    budget_ = used_.budget;
}

void limit_scope::add_run_ms(int64_t ms) {
  std::lock_guard<std::mutex> guard{*mtx_};
  used_.run_ms += ms;
}

int64_t limit_scope::run_ms() const {
  std::lock_guard<std::mutex> guard{*mtx_};
  return used_.run_ms;
}

std::optional<limit_scope::refusal> limit_scope::charge(double cost) {
  std::lock_guard<std::mutex> guard{*mtx_};
  for (auto s = this; s != nullptr; s = s->parent_.get()) {
    if (s->max_steps_ && s->used_.steps + 1 > *s->max_steps_)
      return refusal{"max_steps", s->owner_};
    if (s->budget_ && s->used_.spent + cost > *s->budget_ + 1e-9)
      return refusal{"budget_exceeded", s->owner_};
  }
  for (auto s = this; s != nullptr; s = s->parent_.get()) {
    s->used_.steps += 1;
    s->used_.spent += cost;
  }
  return std::nullopt;
}

void limit_scope::settle(double delta) {
  std::lock_guard<std::mutex> guard{*mtx_};
  for (auto s = this; s != nullptr; s = s->parent_.get())
    s->used_.spent = std::max(0.0, s->used_.spent + delta);
}

int limit_scope::max_depth() const {
  int out = default_max_depth;
  for (auto s = this; s != nullptr; s = s->parent_.get())
    if (s->max_depth_)
      out = std::min(out, *s->max_depth_);
  return out;
}

void limit_scope::raise_budget(double budget) {
  std::lock_guard<std::mutex> guard{*mtx_};
  if (!budget_ || *budget_ < budget)
    budget_ = budget;
  used_.budget = std::max(used_.budget, budget);
}

std::optional<double> limit_scope::budget() const {
  std::lock_guard<std::mutex> guard{*mtx_};
  return budget_;
}

std::vector<std::pair<std::string, tree_counters>> limit_scope::snapshot() const {
  std::lock_guard<std::mutex> guard{*mtx_};
  std::vector<std::pair<std::string, tree_counters>> out;
  for (auto s = this; s != nullptr; s = s->parent_.get())
    out.emplace_back(s->owner_, s->used_);
  return out;
}

} // namespace canopy::core
