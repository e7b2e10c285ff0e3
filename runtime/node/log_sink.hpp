#pragma once

// A spdlog sink that writes log lines to a file descriptor (the process's
// stderr) and never waits long for it: when nobody reads the other end (a
// paused pager, a stuck log shipper, a full journald buffer), lines are
// dropped and counted instead of blocking the thread that writes them.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include <spdlog/sinks/base_sink.h>

namespace canopy::core {

/// How long fd_sink waits for its descriptor.
struct fd_sink_timing {
  /// Longest wait for the descriptor to take one line.
  std::chrono::milliseconds wait{50};
  /// While stalled, one line per this interval waits `wait` again; the
  /// others are dropped at once unless the descriptor is writable already.
  std::chrono::milliseconds retry{1000};
};

/// Writes each formatted line to a file descriptor as it comes, with
/// write(2): nothing is buffered, so a line is out when its call returns
/// and flush() does nothing.
///
/// Never blocks for long, whether the descriptor is blocking or not: before
/// each write it polls for POLLOUT, and it writes at most PIPE_BUF bytes per
/// call (which a writable pipe takes whole, so a blocking write cannot
/// block). A line not taken within fd_sink_timing::wait is dropped (what was
/// not written of it) and counted, and the sink is *stalled*: from then on
/// a line is written only if the descriptor is writable at once, except one
/// line per fd_sink_timing::retry that waits again. The first line written
/// whole clears the stall. A line cut short is ended with a newline before
/// the next one, so every line written starts a line of the output. A
/// descriptor that fails (closed, no reader: POLLERR, POLLHUP, POLLNVAL or a
/// write error) counts as not writable: a pipe without a reader is not
/// written to (no SIGPIPE).
///
/// The sink does not own the descriptor. Its writes are serialised by
/// base_sink's mutex; dropped() and stalled() may be read from any thread.
class fd_sink final : public spdlog::sinks::base_sink<std::mutex> {
public:
  // -- construction ---------------------------------------------------------------

  explicit fd_sink(int fd, fd_sink_timing timing = {});

  // -- observers --------------------------------------------------------------------

  /// Lines dropped whole or in part since construction. Any thread.
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  /// True from a dropped line until the next line written whole. Any thread.
  bool stalled() const { return stalled_.load(std::memory_order_relaxed); }

protected:
  // -- base_sink ------------------------------------------------------------------

  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

private:
  using clock = std::chrono::steady_clock;

  /// Writes `size` bytes, waiting at most `wait` in all.
  /// @returns how many bytes were written.
  size_t write_within(const char* data, size_t size, std::chrono::milliseconds wait);

  int fd_;
  fd_sink_timing timing_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<bool> stalled_{false};
  clock::time_point last_wait_; ///< when a stalled sink last waited
  bool cut_ = false;            ///< the last line written was cut short
};

} // namespace canopy::core
