#pragma once

// What the executions of one process share beyond messages: the directory of
// live executions (so a stop request or a limit finds its actor by id), halt
// tokens (actors/halt_token.hpp: a stop is visible to every descendant at
// once, before the exit messages arrive), and limit scopes
// (actors/limit_scope.hpp). Thread-safe.

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "actors/halt_token.hpp"
#include "actors/limit_scope.hpp"

namespace canopy::core {

// -- directory -------------------------------------------------------------------

/// Live execution actors of this process by id, with their halt tokens.
/// The spawner registers an execution before it runs, so a stop finds it at
/// once. Holds weak references only.
///
/// An ending execution only counts itself out (`depart`): its entry stays
/// until a sweep erases the entries whose actors are gone. A stopped tree
/// would otherwise take one locked hash removal per execution inside its
/// cascade (measured: runtime/docs/benchmarks.md#design-measurements).
/// A sweep runs when `add` finds more
/// departed entries than max(1,024, live ones), and when `sweep_if_settled`
/// finds nothing departed since its previous call (the runtime's memory
/// keeper, every second: a sweep never competes with a running stop
/// cascade for the CPU). Until then a departed
/// entry is invisible: `find` answers an invalid handle for it, and its
/// token is gone with its tree. `add` replaces the entry of a resumed
/// execution's earlier actor.
class execution_directory {
public:
  /// Sets what `add` calls when it registers an execution while none was
  /// live (the stop watcher wakes up then and sleeps while none is). Call
  /// once, before the first `add`; `f` runs in the thread of that `add`.
  void on_first(std::function<void()> f) { on_first_ = std::move(f); }
  /// Registers `a` as execution `id`. Threading: any thread.
  void add(const std::string& id, const caf::actor& a, std::shared_ptr<halt_token> token);
  /// An execution registered here has ended (once per `add`). Lock-free.
  void depart() noexcept;
  /// Erases the entries whose actors are gone. @returns how many.
  size_t sweep();
  /// Sweeps when it holds departed entries and no execution departed since
  /// the previous call. Threading: one caller at a time. @returns how many.
  size_t sweep_if_settled();
  /// @returns the live actor, or an invalid handle (also for an actor that
  /// has ended and is still referenced).
  caf::actor find(const std::string& id) const;
  /// @returns the execution's halt token, or null.
  std::shared_ptr<halt_token> token(const std::string& id) const;
  /// @returns how many registered executions have not ended (exact once
  /// every `add` has returned).
  size_t size() const;
  /// @returns how many entries it holds, live or departed and not swept.
  size_t held() const { return entries_.load(std::memory_order_relaxed); }

private:
  struct entry {
    caf::actor_addr actor;
    std::weak_ptr<halt_token> token;
  };
  /// Hashed, and split into stripes with a lock each.
  struct stripe {
    mutable std::mutex mtx;
    std::unordered_map<std::string, entry> actors;
  };
  static constexpr size_t stripes = 64;
  stripe& stripe_of(const std::string& id) const;
  mutable std::array<stripe, stripes> stripes_;
  std::atomic<size_t> added_{0};
  std::atomic<size_t> departed_{0};
  std::atomic<size_t> entries_{0}; ///< entries held, live or departed
  std::atomic<bool> sweeping_{false};
  size_t departed_at_last_look_ = 0; ///< for `sweep_if_settled`
  std::function<void()> on_first_;
};

} // namespace canopy::core
