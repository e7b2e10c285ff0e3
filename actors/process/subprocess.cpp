// A running subprocess: its lifetime (killed and reaped when it goes), stdin
// fed, polled until reaped, signals to its group, and its exit status.

#include "actors/process/subprocess.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "actors/process/guardian.hpp"
#include "actors/process/subprocess_detail.hpp"

namespace canopy::core {

namespace {

using subprocess_detail::close_fd;

// -- helpers ------------------------------------------------------------------

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

} // namespace canopy::core
