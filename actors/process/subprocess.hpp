#pragma once

// A child process in its own process group, driven without blocking: the
// caller polls it from an actor (no thread ever waits in waitpid). Plain C++,
// no CAF actors.

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace canopy::core {

/// Largest stdout or stderr kept per process; beyond it only the tail is kept.
constexpr size_t max_captured_output = 1024u * 1024u;

/// @returns the start time of process `pid` (clock ticks since boot, from
/// /proc/PID/stat), or 0 when it does not exist. With the pid it identifies a
/// process even after the pid is reused. Thread-safe.
uint64_t process_start_time(int64_t pid);

/// Raises this process's soft limit of open files to its hard limit: every
/// running subprocess step holds pipes, and the usual soft limit (1024)
/// would cap a node at about 500 steps. @returns the new soft limit.
/// Threading: call once at start, before subprocesses are spawned.
uint64_t raise_open_files_limit();

/// What to start.
struct subprocess_options {
  std::vector<std::string> argv;              ///< argv[0] is looked up in PATH
  std::map<std::string, std::string> env;     ///< merged over this process's environment
  std::optional<std::string> stdin_data;      ///< written to stdin, then closed; else /dev/null
  std::string cwd;                            ///< empty: inherit
};

/// Captured output of one stream.
struct captured_output {
  std::string data;       ///< verbatim, at most `max_captured_output` bytes (the tail)
  bool truncated = false; ///< true when bytes were dropped from the front
};

/// A running (or finished) child process. Move-only. The destructor sends
/// SIGKILL to the process group of a process that was not reaped, and reaps it
/// (blocking briefly), so a subprocess object never leaves an orphan. While
/// the object owns it, the group is registered with this process's guardian
/// (guardian.hpp), which SIGKILLs it if this process dies; the registration is
/// withdrawn once the group is seen empty after the leader was reaped, or by
/// the destructor (or a move assignment over the object).
class subprocess {
public:
  /// Called with each complete line (without the newline) as it is read;
  /// `stream` is 1 for stdout, 2 for stderr. A final unterminated line is
  /// delivered when the stream ends.
  using line_callback = std::function<void(int stream, const std::string& line)>;

  subprocess() = default;
  subprocess(subprocess&&) noexcept;
  subprocess& operator=(subprocess&&) noexcept;
  subprocess(const subprocess&) = delete;
  subprocess& operator=(const subprocess&) = delete;
  ~subprocess();

  /// Starts `opts.argv` with posix_spawn in a new process group (pgid = pid),
  /// stdout and stderr on non-blocking pipes, signal mask and dispositions
  /// reset, and registers the group with the guardian (starting it first).
  /// @returns the process, or an error naming the program when it cannot be
  ///          started (not found, not executable, bad cwd).
  /// Thread-safe.
  static caf::expected<subprocess> start(const subprocess_options& opts);

  /// Process id (also the process group id).
  pid_t pid() const { return pid_; }

  /// Reads whatever output is available without blocking, feeds pending stdin,
  /// and reaps the process when it has exited (WNOHANG). After the leader
  /// exited, output still buffered in the pipes is drained; pipes held open by
  /// leftover group members are closed so a background grandchild cannot hang
  /// the step.
  /// @returns true once the process is reaped and its output complete.
  bool poll(const line_callback& on_line = {});

  /// Sends `sig` to the whole process group; works after the leader exited as
  /// long as any member remains. @returns false when no member exists.
  bool signal_group(int sig);

  /// True after `poll` returned true.
  bool done() const { return reaped_ && out_fd_ < 0 && err_fd_ < 0; }

  /// True once the leader was reaped.
  bool reaped() const { return reaped_; }

  /// The parent's ends of the pipes while open, else -1: stdout's and
  /// stderr's read ends, stdin's write end (for a watch: process_watch.hpp).
  int out_fd() const { return out_fd_; }
  int err_fd() const { return err_fd_; }
  int in_fd() const { return in_fd_; }

  /// The raw wait status (valid when done()).
  int wait_status() const { return status_; }

  /// Exit code: the exit status, or 128 + signal number when killed by a signal.
  int exit_code() const;

  /// The signal that ended the process, or 0.
  int term_signal() const;

  const captured_output& out() const { return out_; }
  const captured_output& err() const { return err_; }

private:
  void close_all();
  void drain(int& fd, captured_output& buf, std::string& partial, int stream,
             const line_callback& on_line, bool to_eof);
  /// Writes pending stdin without blocking; closes stdin when done or on EPIPE.
  void feed_stdin();
  /// SIGKILLs the group of an unreaped leader and reaps it (blocking).
  void kill_and_reap() noexcept;
  /// Withdraws the group's registration with the guardian, once.
  void unguard() noexcept;
  /// Moves all state out of `other`, leaving it empty.
  void take(subprocess& other) noexcept;

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int in_fd_ = -1;
  std::string stdin_pending_;
  size_t stdin_off_ = 0;
  bool reaped_ = false;
  int status_ = 0;
  captured_output out_;
  captured_output err_;
  std::string out_partial_;
  std::string err_partial_;
  bool group_gone_ = false; ///< kill(-pid) saw ESRCH after the leader was reaped
  bool guarded_ = false;    ///< the group is registered with the guardian
};

} // namespace canopy::core
