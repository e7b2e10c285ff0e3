#pragma once

// The graveyard: deferred destruction of what ended actors leave behind.
//
// An execution's machine holds its records, its step states, its graph
// reference and their many small heap blocks, untouched since the execution
// started. Destroying it where the actor quits put those cache misses and
// frees on the path of every stop, and the stop cascade is faster without
// them (measured: runtime/docs/benchmarks.md#design-measurements).
// An ending execution buries its machine here instead, and the
// runtime's memory keeper reaps it once the burials have stopped: the frees
// come after the stop, not inside it.
//
// Bounds: a look that finds burials still going on twice in a row (a steady
// churn of ending executions, not one stop's burst) reaps all the same, so
// what waits is at most about two looks' worth of ended executions, which
// were all live a moment before; and each shard destroys at once beyond
// `max_per_shard`.
//
// Plain C++: no actors, no threads of its own. Objects are destroyed in the
// thread that calls `reap` (or `bury`, beyond the bound), never under a lock.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace canopy::core {

template <class T>
class graveyard {
public:
  /// Shards (by burying thread), so that burials of different threads do not
  /// contend for one lock.
  static constexpr size_t shard_count = 8;

  /// @param max_per_shard objects a shard holds before `bury` destroys at once
  explicit graveyard(size_t max_per_shard = size_t{1} << 16) : max_per_shard_(max_per_shard) {
  }

  graveyard(const graveyard&) = delete;
  graveyard& operator=(const graveyard&) = delete;

  /// Destroys what it still holds.
  ~graveyard() {
    reap();
  }

  /// Takes `x` (null: nothing) to destroy later; destroys it at once when
  /// this thread's shard is full. Threading: any thread.
  void bury(std::unique_ptr<T> x) {
    if (!x)
      return;
    auto& s = shards_[shard_index()];
    {
      std::lock_guard<std::mutex> guard{s.mtx};
      ++s.buried;
      if (s.held.size() < max_per_shard_) {
        s.held.push_back(std::move(x));
        return;
      }
    }
    // Full: `x` is destroyed here, outside the lock.
  }

  /// Destroys everything buried so far. @returns how many objects.
  /// Threading: any thread; the objects are destroyed in the caller's.
  size_t reap() {
    size_t n = 0;
    for (auto& s : shards_) {
      std::vector<std::unique_ptr<T>> dead;
      {
        std::lock_guard<std::mutex> guard{s.mtx};
        dead.swap(s.held);
      }
      n += dead.size();
    }
    return n;
  }

  /// Reaps when nothing was buried since the previous call (a stop's burst is
  /// over), or when burials went on through this and the previous call (a
  /// steady churn). @returns how many objects it destroyed.
  /// Threading: one caller at a time (the memory keeper).
  size_t reap_if_settled() {
    uint64_t buried = 0;
    size_t held = 0;
    for (auto& s : shards_) {
      std::lock_guard<std::mutex> guard{s.mtx};
      buried += s.buried;
      held += s.held.size();
    }
    bool settled = buried == buried_at_last_look_;
    bool churning = !settled && busy_at_last_look_;
    buried_at_last_look_ = buried;
    // After a reap, burials must go on through two looks again.
    busy_at_last_look_ = !settled && !churning;
    return held > 0 && (settled || churning) ? reap() : 0;
  }

  /// @returns how many objects wait. Threading: any thread.
  size_t held() const {
    size_t n = 0;
    for (auto& s : shards_) {
      std::lock_guard<std::mutex> guard{s.mtx};
      n += s.held.size();
    }
    return n;
  }

private:
  struct shard {
    mutable std::mutex mtx;
    std::vector<std::unique_ptr<T>> held;
    uint64_t buried = 0; ///< ever, for `reap_if_settled`
  };

  /// This thread's shard: threads take them in turn, once.
  static size_t shard_index() {
    static std::atomic<size_t> next{0};
    thread_local size_t index = next.fetch_add(1, std::memory_order_relaxed) % shard_count;
    return index;
  }

  const size_t max_per_shard_;
  std::array<shard, shard_count> shards_;
  uint64_t buried_at_last_look_ = 0;
  bool busy_at_last_look_ = false;
};

} // namespace canopy::core
