#include "runtime/node/log_sink.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace canopy::core {

namespace {

/// Waits until `fd` takes a write, at most until `deadline`.
/// @returns false on timeout or when the descriptor failed.
bool writable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLOUT, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    // POLLERR / POLLHUP: no reader (a write would raise SIGPIPE); POLLNVAL:
    // the descriptor is closed.
    return (p.revents & POLLOUT) != 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }
}

} // namespace

// -- construction -------------------------------------------------------------------

fd_sink::fd_sink(int fd, fd_sink_timing timing) : fd_(fd), timing_(timing) {
}

// -- base_sink ----------------------------------------------------------------------

void fd_sink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t line;
  if (cut_)
    line.push_back('\n');
  formatter_->format(msg, line);
  auto now = clock::now();
  auto wait = timing_.wait;
  if (stalled()) {
    if (now - last_wait_ >= timing_.retry)
      last_wait_ = now;
    else
      wait = std::chrono::milliseconds{0};
  }
  auto written = write_within(line.data(), line.size(), wait);
  if (written == line.size()) {
    cut_ = false;
    stalled_.store(false, std::memory_order_relaxed);
    return;
  }
  if (written > 0)
    cut_ = true;
  dropped_.fetch_add(1, std::memory_order_relaxed);
  if (!stalled()) {
    last_wait_ = now;
    stalled_.store(true, std::memory_order_relaxed);
  }
}

void fd_sink::flush_() {
  // Every line is written by its own call: nothing waits in a buffer.
}

size_t fd_sink::write_within(const char* data, size_t size, std::chrono::milliseconds wait) {
  auto deadline = clock::now() + wait;
  size_t written = 0;
  while (written < size) {
    if (!writable(fd_, deadline))
      break;
    auto chunk = std::min<size_t>(size - written, PIPE_BUF);
    auto n = ::write(fd_, data + written, chunk);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    // EAGAIN: a non-blocking descriptor filled up between poll and write;
    // poll again while the deadline allows.
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && clock::now() < deadline)
      continue;
    break;
  }
  return written;
}

} // namespace canopy::core
