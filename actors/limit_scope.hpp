#pragma once

// The limits of a tree: how many attempts, how much
// budget, how deep, how long. Plain data, charged by the execution machine
// from any worker thread; no CAF header here. Thread-safe.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "persistence/records.hpp"

namespace canopy::core {

/// The limits of a tree, or of a subtree whose graph tightens them. Charging
/// checks this scope and every enclosing one.
class limit_scope {
public:
  /// Why a charge was refused and which scope refused it.
  struct refusal {
    step_reason reason = step_reason::max_steps; ///< `max_steps` or `budget_exceeded`
    std::string owner;  ///< execution id that owns the scope
  };

  /// @param owner the execution whose graph set the limits
  /// @param used  counters stored for `owner` (resume) or zeros
  limit_scope(std::string owner, std::shared_ptr<limit_scope> parent,
              std::optional<uint64_t> max_steps, std::optional<double> budget,
              std::optional<int> max_depth, tree_counters used);

  /// Charges one attempt of `cost`, in this scope and all enclosing ones, or
  /// nothing when any of them would pass its limit.
  std::optional<refusal> charge(double cost);

  /// Corrects what a charge spent by `delta` (a model call settling its
  /// reservation to what it cost; negative gives back), in this scope and
  /// all enclosing ones. Never refused: the call already happened.
  void settle(double delta);

  /// @returns the deepest depth allowed by this scope and enclosing ones.
  int max_depth() const;

  /// Raises the budget (resume --budget). Only ever raises.
  void raise_budget(double budget);

  /// Adds running time (for the deadline clock, which counts running time only).
  void add_run_ms(int64_t ms);

  /// Running time used so far by this scope.
  int64_t run_ms() const;

  const std::string& owner() const { return owner_; }
  std::optional<double> budget() const;

  /// Counters of this scope and of every enclosing one, to persist.
  std::vector<std::pair<std::string, tree_counters>> snapshot() const;

private:
  std::shared_ptr<std::mutex> mtx_; ///< one per tree
  std::string owner_;
  std::shared_ptr<limit_scope> parent_;
  std::optional<uint64_t> max_steps_;
  std::optional<double> budget_;
  std::optional<int> max_depth_;
  tree_counters used_;
};

} // namespace canopy::core
