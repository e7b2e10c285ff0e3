#include "actors/limit_scope.hpp"

#include <algorithm>

#include "persistence/graph.hpp"

namespace canopy::core {

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
      return refusal{step_reason::max_steps, s->owner_};
    if (s->budget_ && s->used_.spent + cost > *s->budget_ + 1e-9)
      return refusal{step_reason::budget_exceeded, s->owner_};
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
