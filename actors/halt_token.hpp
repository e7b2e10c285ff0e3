#pragma once

// The halt token of an execution: set when it begins to halt, and seen at
// once by every descendant, before the exit messages arrive. Plain data,
// shared by the execution machine and the stop protocol; no CAF header here.

#include <atomic>
#include <memory>
#include <utility>

namespace canopy::core {

/// Set when an execution begins to halt. An execution starts no step while
/// its token or any ancestor's is set: a child created while its parent is
/// being stopped is stopped before its first step.
class halt_token {
public:
  explicit halt_token(std::shared_ptr<const halt_token> parent = nullptr)
    : parent_(std::move(parent)) {
  }
  void set() { halted_.store(true, std::memory_order_release); }
  /// True when this token or an ancestor's is set.
  bool any() const {
    for (auto t = this; t != nullptr; t = t->parent_.get())
      if (t->halted_.load(std::memory_order_acquire))
        return true;
    return false;
  }

private:
  std::atomic<bool> halted_{false};
  std::shared_ptr<const halt_token> parent_;
};

} // namespace canopy::core
