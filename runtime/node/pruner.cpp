#include "runtime/node/pruner.hpp"

#include <spdlog/spdlog.h>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "runtime/server/metrics.hpp"
#include "runtime/node/runtime.hpp"

namespace canopy::core {

pruner::pruner(runtime& rt, metrics& m, retention_rules rules)
  : rt_(rt), metrics_(m), rules_(std::move(rules)) {
  if (!rules_.empty())
    thread_ = std::thread{[this] { run(); }};
}

pruner::~pruner() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void pruner::run() {
  std::unique_lock<std::mutex> lock{mtx_};
  while (!closing_) {
    lock.unlock();
    auto result = rt_.prune(rules_, now_ms());
    if (!result) {
      spdlog::warn("event=retention.prune error=\"{}\"", message_of(result.error()));
    } else {
      metrics_.count_pruned(result->trees);
      if (result->trees > 0)
        spdlog::info("event=retention.pruned trees={} executions={} commits={}", result->trees,
                     result->executions, result->commits);
    }
    lock.lock();
    cv_.wait_for(lock, rules_.interval, [this] { return closing_; });
  }
}

} // namespace canopy::core
