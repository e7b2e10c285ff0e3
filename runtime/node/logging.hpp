#pragma once

// The log of the long-running commands, `canopy serve` and `canopy worker`:
// `TIME LEVEL key=value ...` lines on stderr (UTC, milliseconds). The
// threads that log only queue their lines; a thread of the log's own writes
// them through an fd_sink (runtime/node/log_sink.hpp), so no thread that serves
// ever waits for stderr, and a stderr nobody reads costs lines, not service.

#include <cstddef>
#include <cstdint>

namespace canopy::core {

/// Lines the log's queue holds; when it is full, a new line overwrites the
/// oldest.
inline constexpr size_t log_queue_lines = 8192;

/// The log's health, as `/healthz` and `/metrics` show it.
struct log_status {
  /// stderr took no line lately (fd_sink::stalled).
  bool stalled = false;
  /// Lines lost since the log was installed: dropped by the sink, overwritten
  /// in the full queue, or refused by spdlog (a line it could not format).
  uint64_t dropped = 0;
};

/// Installs the process's log as spdlog's default logger (named `canopy`)
/// for its lifetime: an asynchronous logger on a thread pool of one thread,
/// its queue bounded by log_queue_lines and overwriting its oldest line when
/// full, so a thread that logs never waits; the pool's thread writes to
/// stderr through an fd_sink. Each line goes out as soon as that thread
/// takes it (nothing is buffered, no flush is needed).
///
/// The destructor ends the log's thread once it has written what stderr
/// takes of the lines queued (with a stalled stderr that costs at most one
/// fd_sink_timing::wait, never a blocked write), then leaves a synchronous
/// logger on the same sink as spdlog's default: a line logged later still
/// goes out, or is dropped and counted.
///
/// One at a time per process: construct it before the threads that log
/// (any thread may), destroy it after they ended. Its thread blocks every
/// signal, so signals reach only the threads meant to take them (a thread
/// in sigwait). Not copyable.
class process_log {
public:
  process_log();
  ~process_log();
  process_log(const process_log&) = delete;
  process_log& operator=(const process_log&) = delete;
};

/// The status of the log the last process_log installed; not stalled and
/// nothing dropped when none was. Any thread.
log_status current_log_status();

} // namespace canopy::core
