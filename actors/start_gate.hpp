#pragma once

// The start gate: flow control between starting executions and the store
// writer. An execution's start writes its record, its first events and the
// `queued` records of the children it spawns at once; a tree of 100,000
// executions starts far faster than one writer commits, and every start
// batch then waits in the writer's mailbox. Without the gate that backlog
// is the heap's peak, well above what the live tree holds
// (measured: runtime/docs/benchmarks.md#design-measurements), and a heap
// allocator keeps most of a peak resident after it is freed.
//
// The gate lets at most `permits` executions of a process hold a start: an
// execution takes a permit before its machine starts and gives it back once
// its first write is committed (or when it ends first). The others wait in
// arrival order, already spawned (a stop reaches them), and are woken one by
// one as permits come back. Nothing waits on anything but the writer's
// acknowledgements, so the gate cannot deadlock: a permit's holder needs no
// other execution to get its write committed.
//
// Plain C++, no actors: a ticket carries the function that wakes its owner.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace canopy::core {

class start_gate {
public:
  /// One execution's place at the gate (owned by its actor).
  class ticket {
  public:
    /// `wake` is called once a permit waited for is this ticket's: from the
    /// thread of the `leave` that handed it over, outside the gate's lock.
    explicit ticket(std::function<void()> wake) : wake_(std::move(wake)) {
    }

  private:
    friend class start_gate;
    enum class where : uint8_t { outside, waiting, holding, left };
    where where_ = where::outside;
    std::function<void()> wake_;
  };

  /// A gate with `permits` (at least 1) permits.
  explicit start_gate(size_t permits);

  /// Takes a permit for `t`, or queues it behind the earlier waiters.
  /// @returns true when `t` holds a permit now; false when it waits (its
  ///          wake function runs once it holds one). A ticket enters once;
  ///          again, it answers whether it holds a permit.
  /// Threading: any thread.
  bool enter(const std::shared_ptr<ticket>& t);

  /// `t` is done with the gate: a permit it holds goes to the first waiter
  /// (or back to the gate); a waiting `t` gives up its place. Later calls do
  /// nothing. Threading: any thread.
  void leave(const std::shared_ptr<ticket>& t);

  /// @returns how many permits are held.
  size_t held() const;

  /// @returns how many tickets wait.
  size_t waiting() const;

private:
  /// Drops the tickets that left while waiting once they are half the queue,
  /// so a stop of a waiting tree costs O(1) per execution. Lock held.
  void compact();

  mutable std::mutex mtx_;
  size_t permits_;
  size_t held_ = 0;
  size_t waiting_ = 0;                       ///< tickets in `queue_` still waiting
  std::deque<std::shared_ptr<ticket>> queue_; ///< arrival order; may hold left tickets
};

} // namespace canopy::core
