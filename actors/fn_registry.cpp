#include "actors/fn_registry.hpp"

#include "actors/error.hpp"

namespace canopy::core {

caf::error fn_context::checkpoint() const {
  if (stop_requested())
    return make_stop(stop_reason::requested, stop_mode::graceful);
  return caf::none;
}

const std::set<std::string>& builtin_fns() {
  static const std::set<std::string> names{"noop", "sleep", "echo", "fail"};
  return names;
}

bool fn_registry::add(const std::string& name, fn_function f) {
  if (name.empty() || builtin_fns().count(name) > 0 || !f)
    return false;
  std::lock_guard<std::mutex> guard{mtx_};
  return fns_.emplace(name, std::make_shared<fn_function>(std::move(f))).second;
}

const fn_function* fn_registry::find(const std::string& name) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = fns_.find(name);
  return i == fns_.end() ? nullptr : i->second.get();
}

std::set<std::string> fn_registry::names() const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto out = builtin_fns();
  for (auto& kv : fns_)
    out.insert(kv.first);
  return out;
}

fn_pool::fn_pool(size_t threads) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> guard{mtx_};
          cv_.wait(guard, [this] { return closing_ || !jobs_.empty(); });
          if (jobs_.empty())
            return;
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        job();
      }
    });
}

fn_pool::~fn_pool() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    closing_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void fn_pool::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

} // namespace canopy::core
