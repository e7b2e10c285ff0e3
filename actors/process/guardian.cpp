#include "actors/process/guardian.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <unordered_map>

namespace canopy::core {

namespace {

// -- tunables -----------------------------------------------------------------

/// Registrations the guardian holds at once; one beyond it is not protected.
/// Each running subprocess step holds at least two descriptors, so the open
/// files limit bounds a node far below this.
constexpr size_t max_guarded = 65536;

/// The descriptor the guardian keeps its socket on.
constexpr int guardian_fd = 3;

/// Highest descriptor the guardian closes one by one when close_range(2) is
/// unavailable (kernels before 5.9) and the open files limit is higher.
constexpr long max_close_loop = 1L << 20;

// -- the wire -----------------------------------------------------------------

/// What a record asks.
enum class record_op : int32_t {
  guard = 1,   ///< kill `pgid` when the owner dies
  unguard = 2, ///< forget one registration of `pgid`
};

/// One message on the socket (SOCK_SEQPACKET keeps the boundaries).
struct record {
  record_op op;
  int32_t pgid;
};

// -- the guardian process (async-signal-safe code only) -----------------------

/// The registered groups, in the guardian. Static: the guardian may not
/// allocate (it was forked from a multi-threaded process).
pid_t guarded[max_guarded];
size_t guarded_count = 0;

/// Closes every descriptor from `first` up.
void close_from(int first) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0)
    return;
#endif
  long limit = max_close_loop;
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
      && static_cast<long>(rl.rlim_cur) < limit)
    limit = static_cast<long>(rl.rlim_cur);
  for (long fd = first; fd < limit; ++fd)
    ::close(static_cast<int>(fd));
}

/// Resets every handled signal to its default, ignores the ones that
/// address a whole session or group, and unblocks all.
void guardian_signals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      ::sigaction(sig, &sa, nullptr); // EINVAL for the ones glibc reserves
  sa.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE})
    ::sigaction(sig, &sa, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

void apply(const record& rec) {
  if (rec.pgid <= 1)
    return;
  if (rec.op == record_op::guard) {
    if (guarded_count < max_guarded)
      guarded[guarded_count++] = rec.pgid;
    return;
  }
  if (rec.op != record_op::unguard)
    return;
  for (size_t i = guarded_count; i > 0; --i) {
    if (guarded[i - 1] == rec.pgid) {
      guarded[i - 1] = guarded[--guarded_count];
      return;
    }
  }
}

/// The guardian: reads records until its owner is gone, then kills what is
/// still registered. `sock` is its end of the socket pair.
[[noreturn]] void guardian_main(int sock) {
  if (sock != guardian_fd && ::dup2(sock, guardian_fd) < 0)
    ::_exit(1);
  close_from(guardian_fd + 1);
  // Nothing of the owner's stdio: a reader of its stdout must see EOF when
  // the owner is gone, whatever we do.
  ::close(STDIN_FILENO);
  ::close(STDOUT_FILENO);
  ::close(STDERR_FILENO);
  int null = ::open("/dev/null", O_RDWR);
  if (null == STDIN_FILENO) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  // A group of its own: a signal to the owner's group must not take us too.
  ::setpgid(0, 0);
  guardian_signals();
  ::prctl(PR_SET_NAME, "canopy-guard", 0, 0, 0);
  for (;;) {
    record rec;
    auto n = ::recv(guardian_fd, &rec, sizeof(rec), 0);
    if (n == static_cast<ssize_t>(sizeof(rec))) {
      apply(rec);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n > 0)
      continue; // not a record of ours: ignore it
    break;      // EOF (every copy of the owner's end is closed) or an error
  }
  for (size_t i = 0; i < guarded_count; ++i) {
    ::kill(-guarded[i], SIGKILL);
    // A leader that moved itself into another group still holds the number
    // (as the group does while it has members): kill it too.
    ::kill(guarded[i], SIGKILL);
  }
  ::_exit(0);
}

// -- the owner's side ---------------------------------------------------------

/// The owner's view of its guardian. Every field is guarded by `mu`.
struct guardian_state {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  int fd = -1;            ///< our end of the socket pair
  pid_t guardian = -1;    ///< its pid
  bool started = false;   ///< a start was attempted in this process
  bool running = false;   ///< the last send succeeded
  bool inherited = false; ///< forked: `registered` holds the parent's groups
  /// Registrations sent and not withdrawn, with their multiplicity.
  std::unordered_map<pid_t, size_t> registered;
};

/// The state once created; read by the fork handler, which must not touch
/// a function-local static (another thread may be initialising it).
std::atomic<guardian_state*> created_state{nullptr};

/// Runs in the child of every fork() of this process (before fork returns
/// there): the child does not share the parent's guardian, and the thread
/// that may have held the mutex does not exist in it. Memory writes and
/// close(2) only: it also runs in the guardian itself.
void after_fork_in_child() {
  static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  auto* created = created_state.load();
  if (created == nullptr)
    return;
  auto& s = *created;
  std::memcpy(&s.mu, &fresh, sizeof(fresh));
  if (s.fd >= 0)
    ::close(s.fd);
  s.fd = -1;
  s.guardian = -1;
  s.started = false;
  s.running = false;
  s.inherited = true;
}

/// The process-wide state, created (and the fork handler registered) once.
/// Never destroyed: subprocess destructors may run during static destruction.
guardian_state& state() {
  static guardian_state* s = [] {
    auto* result = new guardian_state;
    created_state.store(result);
    ::pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    return result;
  }();
  return *s;
}

/// Locks `s.mu` for a scope, and drops the registrations a forked child
/// inherited from its parent.
class locked {
public:
  explicit locked(guardian_state& s) : s_(s) {
    ::pthread_mutex_lock(&s_.mu);
    if (s_.inherited) {
      s_.inherited = false;
      s_.registered.clear();
    }
  }
  locked(const locked&) = delete;
  locked& operator=(const locked&) = delete;
  ~locked() {
    ::pthread_mutex_unlock(&s_.mu);
  }

private:
  guardian_state& s_;
};

/// Starts the guardian. Called with `s.mu` held, once per process.
void start(guardian_state& s) {
  s.started = true;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return;
  pid_t pid = ::fork();
  if (pid == 0)
    guardian_main(sv[1]);
  ::close(sv[1]);
  if (pid < 0) {
    ::close(sv[0]);
    return;
  }
  // Also from here, so the guardian is out of our group even before it runs.
  ::setpgid(pid, pid);
  s.fd = sv[0];
  s.guardian = pid;
  s.running = true;
}

/// Sends one record; a failure marks the guardian dead. Called with `s.mu`
/// held.
void send_record(guardian_state& s, record_op op, pid_t pgid) {
  if (!s.running)
    return;
  record rec{op, static_cast<int32_t>(pgid)};
  ssize_t n;
  do {
    n = ::send(s.fd, &rec, sizeof(rec), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(rec)))
    return;
  // The guardian is gone (EPIPE, ECONNRESET) or unusable: stop using it.
  // The descriptor is closed under the mutex, so no thread can send on a
  // reused number; the guardian is reaped if it already exited.
  s.running = false;
  ::close(s.fd);
  s.fd = -1;
  int status = 0;
  while (::waitpid(s.guardian, &status, WNOHANG) < 0 && errno == EINTR) {
    // retry
  }
}

} // namespace

// -- API ----------------------------------------------------------------------

void guard_process_group(pid_t pgid) {
  if (pgid <= 1)
    return;
  auto& s = state();
  locked lock{s};
  if (!s.started)
    start(s);
  try {
    ++s.registered[pgid];
  } catch (const std::bad_alloc&) {
    // Counted for tests only: the registration itself does not need it.
  }
  send_record(s, record_op::guard, pgid);
}

void unguard_process_group(pid_t pgid) {
  if (pgid <= 1)
    return;
  auto& s = state();
  locked lock{s};
  if (auto i = s.registered.find(pgid); i != s.registered.end() && --i->second == 0)
    s.registered.erase(i);
  // Sent even when not counted here: the guardian ignores unknown groups.
  send_record(s, record_op::unguard, pgid);
}

pid_t guardian_pid() {
  auto& s = state();
  locked lock{s};
  return s.guardian;
}

bool guardian_running() {
  auto& s = state();
  locked lock{s};
  return s.running;
}

size_t guarded_group_count() {
  auto& s = state();
  locked lock{s};
  size_t n = 0;
  for (auto& kv : s.registered)
    n += kv.second;
  return n;
}

} // namespace canopy::core
