#include "runtime/node/quota.hpp"

namespace canopy::core {

live_quota::live_quota(size_t limit, std::function<bool(const std::string&)> is_live,
                       seed_fn seed)
  : limit_(limit), is_live_(std::move(is_live)), seed_(std::move(seed)) {
  // nop
}

bool live_quota::reserve(const std::string& user) {
  if (limit_ == 0)
    return true;
  std::lock_guard<std::mutex> guard{mtx_};
  if (!seeded_) {
    seeded_ = true;
    if (seed_)
      for (auto& [owner, id] : seed_())
        users_[owner].ids.insert(id);
  }
  auto& u = users_[user];
  if (u.ids.size() + u.pending >= limit_) {
    // Forget the executions that ended since.
    for (auto i = u.ids.begin(); i != u.ids.end();)
      i = is_live_(*i) ? std::next(i) : u.ids.erase(i);
    if (u.ids.size() + u.pending >= limit_)
      return false;
  }
  ++u.pending;
  return true;
}

void live_quota::commit(const std::string& user, const std::string& id) {
  if (limit_ == 0)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  auto& u = users_[user];
  if (u.pending > 0)
    --u.pending;
  if (!id.empty())
    u.ids.insert(id);
}

} // namespace canopy::core
