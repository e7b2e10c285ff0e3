#include "runtime/node/logging.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/spdlog.h>

#include "runtime/node/log_sink.hpp"

namespace canopy::core {

namespace {

constexpr auto log_name = "canopy";
constexpr auto log_pattern = "%Y-%m-%dT%H:%M:%S.%eZ %l %v";

/// What the installed log is made of, for current_log_status().
struct log_state {
  std::mutex mtx;
  std::shared_ptr<fd_sink> sink;
  std::shared_ptr<spdlog::details::thread_pool> pool;
  /// Kept after its pool ended: a thread may still hold spdlog's raw pointer
  /// to the default logger it replaced; its lines then count as refused.
  std::shared_ptr<spdlog::async_logger> logger;
  /// Lines the ended pool overwrote.
  uint64_t overruns = 0;
  /// Lines spdlog refused (its error handler, which must not write).
  std::atomic<uint64_t> refused{0};
};

/// The process's one log_state. Never destroyed: a thread that logs during
/// the process's exit still finds it.
log_state& state() {
  static auto* s = new log_state;
  return *s;
}

/// spdlog's default handler writes the error to stderr, which may be the
/// stalled descriptor itself: count it instead.
void count_refused(const std::string&) {
  state().refused.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

process_log::process_log() {
  auto& s = state();
  auto sink = std::make_shared<fd_sink>(STDERR_FILENO);
  // The pool's thread inherits this thread's signal mask.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  auto pool = std::make_shared<spdlog::details::thread_pool>(log_queue_lines, 1);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  auto logger = std::make_shared<spdlog::async_logger>(
    log_name, sink, pool, spdlog::async_overflow_policy::overrun_oldest);
  logger->set_pattern(log_pattern, spdlog::pattern_time_type::utc);
  logger->set_error_handler(count_refused);
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    s.sink = sink;
    s.pool = pool;
    s.logger = logger;
    s.overruns = 0;
    s.refused = 0;
  }
  spdlog::set_default_logger(logger);
}

process_log::~process_log() {
  auto& s = state();
  std::shared_ptr<spdlog::details::thread_pool> pool;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    auto sync = std::make_shared<spdlog::logger>(log_name, s.sink);
    sync->set_pattern(log_pattern, spdlog::pattern_time_type::utc);
    sync->set_error_handler(count_refused);
    spdlog::set_default_logger(sync);
    s.overruns = s.pool->overrun_counter();
    pool = std::move(s.pool);
  }
  // The only owner: its destructor queues the end behind the lines queued
  // and joins the thread once they are written or dropped.
  pool.reset();
}

log_status current_log_status() {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  log_status st;
  if (!s.sink)
    return st;
  st.stalled = s.sink->stalled();
  st.dropped = s.sink->dropped() + s.overruns + (s.pool ? s.pool->overrun_counter() : 0)
               + s.refused.load(std::memory_order_relaxed);
  return st;
}

} // namespace canopy::core
