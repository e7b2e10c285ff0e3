#pragma once

// The per-user quota of live executions of a server (`quotas.live_executions`).

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace canopy::core {

/// Counts each user's live executions started (or resumed) over the API
/// against one limit. It remembers the ids it admitted and asks `is_live`
/// about them only when a user reaches the limit, so an admission costs
/// O(log n) until then.
/// Threading: every member may be called from any thread.
class live_quota {
public:
  /// `(owner, id)` of the live executions that exist before the first admission.
  using seed_fn = std::function<std::vector<std::pair<std::string, std::string>>()>;

  /// @param limit the most live executions per user; 0: unlimited.
  /// @param is_live whether execution `id` is queued, running or stopping.
  /// @param seed called once, at the first `reserve`.
  live_quota(size_t limit, std::function<bool(const std::string& id)> is_live, seed_fn seed);

  /// Reserves a place for one more live execution of `user`.
  /// @returns false when `user` has `limit` live executions already.
  bool reserve(const std::string& user);

  /// Ends a reservation: execution `id` now counts (empty `id`: the start
  /// failed and the place is free again).
  void commit(const std::string& user, const std::string& id);

  size_t limit() const {
    return limit_;
  }

private:
  struct user_state {
    std::set<std::string> ids; ///< admitted, live when last asked
    size_t pending = 0;        ///< reserved, not yet committed
  };

  const size_t limit_;
  std::function<bool(const std::string&)> is_live_;
  seed_fn seed_;
  std::mutex mtx_;
  bool seeded_ = false;
  std::map<std::string, user_state> users_;
};

} // namespace canopy::core
