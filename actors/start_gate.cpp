#include "actors/start_gate.hpp"

#include <algorithm>

namespace canopy::core {

start_gate::start_gate(size_t permits) : permits_(std::max<size_t>(1, permits)) {
}

bool start_gate::enter(const std::shared_ptr<ticket>& t) {
  std::lock_guard<std::mutex> guard{mtx_};
  switch (t->where_) {
    case ticket::where::holding:
      return true;
    case ticket::where::waiting:
    case ticket::where::left:
      return false;
    default:
      break;
  }
  if (held_ < permits_) {
    ++held_;
    t->where_ = ticket::where::holding;
    return true;
  }
  t->where_ = ticket::where::waiting;
  ++waiting_;
  queue_.push_back(t);
  return false;
}

void start_gate::leave(const std::shared_ptr<ticket>& t) {
  std::shared_ptr<ticket> next;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto was = t->where_;
    t->where_ = ticket::where::left;
    if (was == ticket::where::waiting) {
      --waiting_;
      compact();
      return;
    }
    if (was != ticket::where::holding)
      return;
    // The permit goes to the first ticket still waiting.
    while (!queue_.empty() && !next) {
      auto front = std::move(queue_.front());
      queue_.pop_front();
      if (front->where_ == ticket::where::waiting)
        next = std::move(front);
    }
    if (next) {
      --waiting_;
      next->where_ = ticket::where::holding;
    } else {
      --held_;
    }
  }
  if (next && next->wake_)
    next->wake_();
}

size_t start_gate::held() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return held_;
}

size_t start_gate::waiting() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return waiting_;
}

void start_gate::compact() {
  if (queue_.size() < 64 || waiting_ * 2 > queue_.size())
    return;
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                              [](const std::shared_ptr<ticket>& x) {
                                return x->where_ != ticket::where::waiting;
                              }),
               queue_.end());
}

} // namespace canopy::core
