#include "actors/subprocess.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "actors/guardian.hpp"
#include "persistence/error.hpp"

extern char** environ;

namespace canopy {

namespace {

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

// -- helpers ------------------------------------------------------------------

/// Thread-safe strerror.
std::string error_text(int err) {
  char buf[256];
  buf[0] = '\0';
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return strerror_r(err, buf, sizeof(buf));
#else
  if (strerror_r(err, buf, sizeof(buf)) != 0)
    return "error " + std::to_string(err);
  return buf;
#endif
}

caf::error start_error(const subprocess_options& opts, const std::string& what) {
  auto prog = opts.argv.empty() ? std::string{} : opts.argv.front();
  return make_error(persistence_errc::io_error,
                    "cannot start '" + prog + "': " + what);
}

/// Closes `fd` (if open) and sets it to -1.
void close_fd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

/// Owns a file descriptor until released; closes it on scope exit.
struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    close_fd(fd);
  }
  int release() {
    return std::exchange(fd, -1);
  }
};

/// Makes sure `fd` is not 0, 1 or 2 (possible when the parent runs with
/// closed standard streams), so the child-side dup2 calls cannot clobber
/// each other. Keeps O_CLOEXEC.
bool lift_fd(int& fd) {
  if (fd > 2)
    return true;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0)
    return false;
  ::close(fd);
  fd = moved;
  return true;
}

/// Creates a close-on-exec pipe whose ends are both above 2.
int make_pipe(fd_guard& read_end, fd_guard& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return errno;
  read_end.fd = fds[0];
  write_end.fd = fds[1];
  if (!lift_fd(read_end.fd) || !lift_fd(write_end.fd))
    return errno;
  return 0;
}

int set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return errno;
  return 0;
}

/// Looks `name` up in `path` (a PATH value) the way execvp does; relative
/// candidates are checked against `cwd`, where the child will run.
/// @returns the candidate to execute, or an errno value.
std::pair<std::string, int> search_path(const std::string& name,
                                        const std::string& path,
                                        const std::string& cwd) {
  int err = ENOENT;
  size_t pos = 0;
  for (;;) {
    auto end = path.find(':', pos);
    auto dir = path.substr(pos, end == std::string::npos ? std::string::npos
                                                         : end - pos);
    auto candidate = dir.empty() ? name : dir + "/" + name;
    auto check = candidate;
    if (!cwd.empty() && check.front() != '/')
      check = cwd + "/" + check;
    struct stat st;
    if (::stat(check.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(check.c_str(), X_OK) == 0)
        return {candidate, 0};
      err = EACCES;
    }
    if (end == std::string::npos)
      break;
    pos = end + 1;
  }
  return {std::string{}, err};
}

/// Blocks SIGPIPE in the calling thread for its lifetime; a SIGPIPE raised
/// meanwhile by a write to a closed pipe is consumed before the old mask
/// returns, so it can never reach a default disposition and kill the
/// process. A SIGPIPE that was pending before is left alone.
class sigpipe_guard {
public:
  sigpipe_guard() {
    sigemptyset(&pipe_set_);
    sigaddset(&pipe_set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_mask_);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }

  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

  /// Records that a write failed with EPIPE (so a SIGPIPE is pending).
  void saw_epipe() {
    saw_epipe_ = true;
  }

  ~sigpipe_guard() {
    if (saw_epipe_ && !was_pending_) {
      struct timespec zero = {0, 0};
      while (sigtimedwait(&pipe_set_, nullptr, &zero) < 0 && errno == EINTR) {
        // retry
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

private:
  sigset_t pipe_set_;
  sigset_t old_mask_;
  bool was_pending_ = false;
  bool saw_epipe_ = false;
};

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

// -- construction and destruction ---------------------------------------------

subprocess::subprocess(subprocess&& other) noexcept {
  take(other);
}

subprocess& subprocess::operator=(subprocess&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    unguard();
    close_all();
    take(other);
  }
  return *this;
}

subprocess::~subprocess() {
  kill_and_reap();
  unguard();
  close_all();
}

void subprocess::take(subprocess& other) noexcept {
  pid_ = std::exchange(other.pid_, -1);
  out_fd_ = std::exchange(other.out_fd_, -1);
  err_fd_ = std::exchange(other.err_fd_, -1);
  in_fd_ = std::exchange(other.in_fd_, -1);
  stdin_pending_ = std::move(other.stdin_pending_);
  other.stdin_pending_.clear();
  stdin_off_ = std::exchange(other.stdin_off_, 0);
  reaped_ = std::exchange(other.reaped_, false);
  status_ = std::exchange(other.status_, 0);
  group_gone_ = std::exchange(other.group_gone_, false);
  guarded_ = std::exchange(other.guarded_, false);
  out_ = std::move(other.out_);
  err_ = std::move(other.err_);
  other.out_ = captured_output{};
  other.err_ = captured_output{};
  out_partial_ = std::move(other.out_partial_);
  err_partial_ = std::move(other.err_partial_);
  other.out_partial_.clear();
  other.err_partial_.clear();
}

void subprocess::kill_and_reap() noexcept {
  if (pid_ <= 0 || reaped_)
    return;
  ::kill(-pid_, SIGKILL);
  // The leader may have moved itself into another group; it must die too,
  // or the blocking waitpid below would never return.
  ::kill(pid_, SIGKILL);
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  reaped_ = true;
  status_ = r == pid_ ? status : SIGKILL;
}

void subprocess::unguard() noexcept {
  if (!guarded_)
    return;
  guarded_ = false;
  unguard_process_group(pid_);
}

void subprocess::close_all() {
  close_fd(out_fd_);
  close_fd(err_fd_);
  close_fd(in_fd_);
  stdin_pending_.clear();
  stdin_pending_.shrink_to_fit();
  stdin_off_ = 0;
}

// -- start --------------------------------------------------------------------

caf::expected<subprocess> subprocess::start(const subprocess_options& opts) {
  if (opts.argv.empty() || opts.argv.front().empty())
    return make_error(persistence_errc::io_error,
                      "cannot start a process: empty argv");
  const auto& prog = opts.argv.front();
  for (auto& kv : opts.env)
    if (kv.first.empty() || kv.first.find('=') != std::string::npos)
      return start_error(opts, "invalid environment variable name '"
                                 + kv.first + "'");
  // A bad cwd gets its own message instead of a bare errno from the child.
  if (!opts.cwd.empty()) {
    struct stat st;
    if (::stat(opts.cwd.c_str(), &st) != 0) {
      int err = errno;
      if (err == ENOENT)
        return start_error(opts, "working directory '" + opts.cwd
                                   + "' does not exist");
      return start_error(opts, "working directory '" + opts.cwd
                                 + "': " + error_text(err));
    }
    if (!S_ISDIR(st.st_mode))
      return start_error(opts, "working directory '" + opts.cwd
                                 + "' is not a directory");
  }
  // Environment: ours, with opts.env merged over it.
  std::vector<std::string> env_store;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    const char* eq = std::strchr(entry, '=');
    std::string name = eq ? std::string(entry, eq) : std::string(entry);
    if (opts.env.count(name) == 0)
      env_store.emplace_back(entry);
  }
  for (auto& kv : opts.env)
    env_store.push_back(kv.first + "=" + kv.second);
  std::vector<char*> envp;
  envp.reserve(env_store.size() + 1);
  for (auto& s : env_store)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store(opts.argv.begin(), opts.argv.end());
  std::vector<char*> argv;
  argv.reserve(argv_store.size() + 1);
  for (auto& s : argv_store)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  // A PATH given in opts.env decides the lookup, as in a shell's
  // `PATH=... prog`; posix_spawnp would search our own PATH instead.
  std::string exec_path;
  bool use_path_search = true;
  if (auto i = opts.env.find("PATH");
      i != opts.env.end() && prog.find('/') == std::string::npos) {
    auto [found, err] = search_path(prog, i->second, opts.cwd);
    if (err != 0)
      return start_error(opts, error_text(err));
    exec_path = std::move(found);
    use_path_search = false;
  } else {
    exec_path = prog;
  }
  // Pipes: the parent keeps the read ends of stdout/stderr and the write end
  // of stdin, non-blocking; all our ends are close-on-exec.
  fd_guard out_r, out_w, err_r, err_w, in_r, in_w;
  bool feed_stdin = opts.stdin_data && !opts.stdin_data->empty();
  int err = make_pipe(out_r, out_w);
  if (err == 0)
    err = make_pipe(err_r, err_w);
  if (err == 0 && feed_stdin)
    err = make_pipe(in_r, in_w);
  if (err == 0)
    err = set_nonblocking(out_r.fd);
  if (err == 0)
    err = set_nonblocking(err_r.fd);
  if (err == 0 && feed_stdin)
    err = set_nonblocking(in_w.fd);
  if (err != 0)
    return start_error(opts, "cannot create pipes: " + error_text(err));
  posix_spawn_file_actions_t actions;
  if ((err = posix_spawn_file_actions_init(&actions)) != 0)
    return start_error(opts, error_text(err));
  posix_spawnattr_t attr;
  if ((err = posix_spawnattr_init(&attr)) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return start_error(opts, error_text(err));
  }
  if (feed_stdin)
    err = posix_spawn_file_actions_adddup2(&actions, in_r.fd, STDIN_FILENO);
  else
    err = posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                           O_RDONLY, 0);
  if (err == 0)
    err = posix_spawn_file_actions_adddup2(&actions, out_w.fd, STDOUT_FILENO);
  if (err == 0)
    err = posix_spawn_file_actions_adddup2(&actions, err_w.fd, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors some library opened without O_CLOEXEC stay out of steps.
  if (err == 0)
    err = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  if (err == 0 && !opts.cwd.empty())
    err = posix_spawn_file_actions_addchdir_np(&actions, opts.cwd.c_str());
  // Own process group; empty signal mask; default dispositions for all.
  sigset_t empty_mask;
  sigset_t all_signals;
  sigemptyset(&empty_mask);
  sigfillset(&all_signals);
  if (err == 0)
    err = posix_spawnattr_setpgroup(&attr, 0);
  if (err == 0)
    err = posix_spawnattr_setsigmask(&attr, &empty_mask);
  if (err == 0)
    err = posix_spawnattr_setsigdefault(&attr, &all_signals);
  if (err == 0)
    err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP
                                            | POSIX_SPAWN_SETSIGMASK
                                            | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (err == 0) {
    if (use_path_search)
      err = posix_spawnp(&pid, exec_path.c_str(), &actions, &attr, argv.data(),
                         envp.data());
    else
      err = posix_spawn(&pid, exec_path.c_str(), &actions, &attr, argv.data(),
                        envp.data());
  }
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    if (!opts.cwd.empty())
      return start_error(opts, error_text(err) + " (working directory '"
                                 + opts.cwd + "')");
    return start_error(opts, error_text(err));
  }
  // From here until the registration, a death of this process would leave
  // the group running (the window guardian.hpp documents).
  guard_process_group(pid);
  subprocess result;
  result.pid_ = pid;
  result.guarded_ = true;
  result.out_fd_ = out_r.release();
  result.err_fd_ = err_r.release();
  if (feed_stdin) {
    result.in_fd_ = in_w.release();
    result.stdin_pending_ = *opts.stdin_data;
  }
  // The child-side ends (out_w, err_w, in_r) close here, so EOF arrives once
  // every process holding them has closed them.
  return result;
}

// -- polling ------------------------------------------------------------------

void subprocess::feed_stdin() {
  if (in_fd_ < 0)
    return;
  sigpipe_guard guard;
  while (stdin_off_ < stdin_pending_.size()) {
    auto n = ::write(in_fd_, stdin_pending_.data() + stdin_off_,
                     stdin_pending_.size() - stdin_off_);
    if (n > 0) {
      stdin_off_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    // EPIPE (the child closed its stdin) or another error: stop feeding.
    if (n < 0 && errno == EPIPE)
      guard.saw_epipe();
    break;
  }
  close_fd(in_fd_);
  stdin_pending_.clear();
  stdin_pending_.shrink_to_fit();
  stdin_off_ = 0;
}

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

bool subprocess::poll(const line_callback& on_line) {
  if (pid_ <= 0)
    return false; // never waitpid on 0 or -1: other children are not ours
  if (done())
    return true;
  feed_stdin();
  drain(out_fd_, out_, out_partial_, 1, on_line, false);
  drain(err_fd_, err_, err_partial_, 2, on_line, false);
  if (!reaped_) {
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(pid_, &status, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == pid_) {
      reaped_ = true;
      status_ = status;
    } else if (r < 0 && errno == ECHILD) {
      // Someone else reaped our child (SIGCHLD set to SIG_IGN, or a
      // waitpid(-1) elsewhere): the status is lost; report a failure.
      reaped_ = true;
      status_ = 255 << 8;
    }
  }
  if (reaped_) {
    // Everything the leader wrote is in the pipes now.
    drain(out_fd_, out_, out_partial_, 1, on_line, true);
    drain(err_fd_, err_, err_partial_, 2, on_line, true);
    close_fd(in_fd_);
    stdin_pending_.clear();
    stdin_pending_.shrink_to_fit();
    stdin_off_ = 0;
    // A group without members needs no guarding, and its number may be
    // reused: withdraw it now. One with leftover members stays guarded until
    // it is seen empty or this object goes.
    if (!group_gone_ && ::kill(-pid_, 0) < 0 && errno == ESRCH)
      group_gone_ = true;
    if (group_gone_)
      unguard();
  }
  return done();
}

// -- signals and status -------------------------------------------------------

bool subprocess::signal_group(int sig) {
  if (pid_ <= 0 || group_gone_)
    return false; // never kill(0) or kill(1)
  // While any member lives (a zombie leader included) the kernel does not
  // reuse the pgid. Once the group was seen empty after the leader was
  // reaped, the number may belong to someone else: never signal it again.
  if (::kill(-pid_, sig) == 0)
    return true;
  if (errno == ESRCH && reaped_) {
    group_gone_ = true;
    unguard();
  }
  return false;
}

int subprocess::exit_code() const {
  if (!reaped_)
    return -1;
  if (WIFEXITED(status_))
    return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_))
    return 128 + WTERMSIG(status_);
  return -1;
}

int subprocess::term_signal() const {
  if (reaped_ && WIFSIGNALED(status_))
    return WTERMSIG(status_);
  return 0;
}

uint64_t raise_open_files_limit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void) ::setrlimit(RLIMIT_NOFILE, &rl);
    (void) ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return static_cast<uint64_t>(rl.rlim_cur);
}

uint64_t process_start_time(int64_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string text;
  if (!in || !std::getline(in, text))
    return 0;
  // The command name may hold spaces and parentheses: skip past the last ')'.
  auto pos = text.rfind(')');
  if (pos == std::string::npos || pos + 2 >= text.size())
    return 0;
  std::istringstream fields{text.substr(pos + 2)};
  std::string field;
  // Field 3 (state) is the first after ')'; starttime is field 22.
  for (int i = 3; i < 22; ++i)
    if (!(fields >> field))
      return 0;
  uint64_t start = 0;
  fields >> start;
  return start;
}

} // namespace canopy
