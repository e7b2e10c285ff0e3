#pragma once

// The server's retention: a thread that prunes settled trees past
// their age by the config's `retention` rules, at start and then every
// `retention.interval`, through the runtime's store writer in transactions
// of at most 16 trees (so a prune never holds the writer long).

#include <condition_variable>
#include <mutex>
#include <thread>

#include "persistence/retention.hpp"

namespace canopy::core {

class metrics;
class runtime;

/// Prunes `rt`'s store by `rules` on a thread of its own and counts what
/// went in `m` (`canopy_pruned_total`, and the deleted executions leave
/// `canopy_executions`). With empty rules it starts no thread. The
/// destructor stops the thread (waiting for a prune under way to end);
/// destroy it before `rt`. Not copyable.
class pruner {
public:
  pruner(runtime& rt, metrics& m, retention_rules rules);
  ~pruner();
  pruner(const pruner&) = delete;
  pruner& operator=(const pruner&) = delete;

private:
  void run();

  runtime& rt_;
  metrics& metrics_;
  retention_rules rules_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::thread thread_;
};

} // namespace canopy::core
