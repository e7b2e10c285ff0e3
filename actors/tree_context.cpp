#include "actors/tree_context.hpp"

#include <algorithm>
#include <vector>

#include <caf/actor_cast.hpp>

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

} // namespace canopy::core
