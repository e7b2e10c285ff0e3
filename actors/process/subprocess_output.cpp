// Reading a subprocess's output: its pipes drained without blocking, split
// into lines for the caller, and the tail of each stream kept.

#include "actors/process/subprocess.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "actors/process/subprocess_detail.hpp"

namespace canopy::core {

namespace {

using subprocess_detail::close_fd;

// -- tunables -----------------------------------------------------------------

/// Bytes requested per read(2).
constexpr size_t read_chunk = 64u * 1024u;

/// A line longer than this is handed to the line callback in pieces of this
/// size, so a stream without newlines cannot grow the partial-line buffer.
constexpr size_t max_line_chunk = 64u * 1024u;

/// Bytes read per stream in one ordinary `poll`, so a fast writer cannot keep
/// the polling actor busy forever; the rest is read by the next poll.
constexpr size_t max_read_per_poll = 1024u * 1024u;

/// Bytes read per stream after the leader was reaped: what the leader wrote
/// is bounded by the pipe capacity; the cap stops a chatty grandchild from
/// holding `poll` in the final drain.
constexpr size_t max_final_read = 16u * 1024u * 1024u;

/// Appends `chunk` to the tail buffer `buf`, keeping only the newest
/// `max_captured_output` bytes. Called once per drain, so the front is moved
/// at most once per poll.
void keep_tail(captured_output& buf, const std::string& chunk,
               bool chunk_truncated) {
  if (chunk_truncated)
    buf.truncated = true;
  if (chunk.size() >= max_captured_output) {
    if (chunk.size() > max_captured_output || !buf.data.empty())
      buf.truncated = true;
    buf.data.assign(chunk, chunk.size() - max_captured_output,
                    max_captured_output);
    return;
  }
  auto total = buf.data.size() + chunk.size();
  if (total > max_captured_output) {
    buf.data.erase(0, total - max_captured_output);
    buf.truncated = true;
  }
  buf.data.append(chunk);
}

/// Splits `data` into lines for `on_line`; `partial` holds the unterminated
/// rest between calls, capped at `max_line_chunk`.
void split_lines(const char* data, size_t size, std::string& partial,
                 int stream, const subprocess::line_callback& on_line) {
  size_t start = 0;
  while (start < size) {
    auto nl = static_cast<const char*>(std::memchr(data + start, '\n',
                                                   size - start));
    if (nl == nullptr)
      break;
    auto end = static_cast<size_t>(nl - data);
    if (on_line) {
      if (partial.empty()) {
        on_line(stream, std::string(data + start, end - start));
      } else {
        partial.append(data + start, end - start);
        on_line(stream, partial);
      }
    }
    partial.clear();
    start = end + 1;
  }
  if (start < size)
    partial.append(data + start, size - start);
  if (partial.size() > max_line_chunk) {
    size_t off = 0;
    while (partial.size() - off > max_line_chunk) {
      if (on_line)
        on_line(stream, partial.substr(off, max_line_chunk));
      off += max_line_chunk;
    }
    partial.erase(0, off);
  }
}

} // namespace

// -- draining ----------------------------------------------------------------

void subprocess::drain(int& fd, captured_output& buf, std::string& partial,
                       int stream, const line_callback& on_line, bool to_eof) {
  if (fd < 0)
    return;
  // `to_eof` marks the final drain after the leader was reaped: read what is
  // there now, then close the pipe even if a grandchild still holds it.
  auto budget = to_eof ? max_final_read : max_read_per_poll;
  std::string fresh;
  bool fresh_truncated = false;
  bool at_end = false;
  size_t total = 0;
  while (total < budget) {
    auto old = fresh.size();
    fresh.resize(old + read_chunk);
    auto n = ::read(fd, &fresh[old], read_chunk);
    if (n > 0) {
      fresh.resize(old + static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      split_lines(fresh.data() + old, static_cast<size_t>(n), partial, stream,
                  on_line);
      // Keep the staging buffer bounded (amortised: trims once per 1 MiB).
      if (fresh.size() >= 2 * max_captured_output) {
        fresh.erase(0, fresh.size() - max_captured_output);
        fresh_truncated = true;
      }
      continue;
    }
    fresh.resize(old);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    at_end = true; // EOF, or an error that ends the stream
    break;
  }
  if (!fresh.empty() || fresh_truncated)
    keep_tail(buf, fresh, fresh_truncated);
  if (at_end || to_eof) {
    close_fd(fd);
    if (!partial.empty()) {
      if (on_line)
        on_line(stream, partial);
      partial.clear();
    }
    partial.shrink_to_fit();
  }
}

} // namespace canopy::core
