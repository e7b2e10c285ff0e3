#pragma once

// In-process `fn` steps: the registry of C++ functions and the thread pool
// they run on, so a slow function never blocks CAF's scheduler threads.
// The built-ins `noop`, `sleep`, `echo` and `fail` are not in the registry:
// the execution actor runs them itself (a `sleep` is a timer, not a thread).

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace canopy::core {

/// What a running `fn` step sees.
class fn_context {
public:
  fn_context(nlohmann::json with, std::string execution_id, std::string step, int attempt,
             std::shared_ptr<std::atomic<bool>> stop)
    : with_(std::move(with)), execution_id_(std::move(execution_id)), step_(std::move(step)),
      attempt_(attempt), stop_(std::move(stop)) {
  }

  /// The step's `with` object, references resolved.
  const nlohmann::json& with() const { return with_; }
  const std::string& execution_id() const { return execution_id_; }
  const std::string& step() const { return step_; }
  /// The attempt number, from 1.
  int attempt() const { return attempt_; }

  /// The stop token: true once the execution stops or the attempt timed out.
  /// Thread-safe.
  bool stop_requested() const { return stop_->load(std::memory_order_acquire); }

  /// A cancellation point: @returns an error (`actors_errc::stop`) once a stop
  /// was requested, else nothing. Long-running functions call it often and
  /// return the error: `if (auto err = ctx.checkpoint()) return err;`.
  caf::error checkpoint() const;

private:
  nlohmann::json with_;
  std::string execution_id_;
  std::string step_;
  int attempt_;
  std::shared_ptr<std::atomic<bool>> stop_;
};

/// A registered function: returns the step's result object, or an error
/// (the step fails with its message).
using fn_function = std::function<caf::expected<nlohmann::json>(fn_context&)>;

/// Names the execution actor runs itself.
const std::set<std::string>& builtin_fns();

/// Registered functions. Register before starting executions; lookups are
/// thread-safe afterwards.
class fn_registry {
public:
  /// Registers `f` as `name`; @returns false when the name is taken or a built-in.
  bool add(const std::string& name, fn_function f);

  /// @returns the function or nullptr.
  const fn_function* find(const std::string& name) const;

  /// @returns the registered names plus the built-ins.
  std::set<std::string> names() const;

private:
  mutable std::mutex mtx_;
  std::map<std::string, std::shared_ptr<fn_function>> fns_;
};

/// A fixed pool of threads for `fn` jobs. The destructor waits for running jobs.
class fn_pool {
public:
  explicit fn_pool(size_t threads);
  ~fn_pool();

  /// Queues `job`. Threading: any thread.
  void submit(std::function<void()> job);

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

} // namespace canopy::core
