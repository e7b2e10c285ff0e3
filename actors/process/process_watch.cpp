// The process watch: one epoll thread per process wakes the runners whose
// subprocess has output, room for stdin, or an exited leader.

#include "actors/process/process_watch.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include "actors/messages.hpp"
#include "actors/process/subprocess.hpp"

namespace canopy::core {

namespace {

// -- the shared epoll thread ----------------------------------------------------

/// Events one `epoll_wait` takes at most.
constexpr int max_events = 256;

/// The epoll set and who watches what. Never destroyed: runners may end
/// during static destruction.
struct watcher {
  /// One watched subprocess: whom to wake, and whether a wake is due.
  struct entry {
    caf::actor_addr who;
    bool armed = true; ///< cleared by a wake, set again by `rearm`
  };
  int epoll_fd = -1;
  std::mutex mu;
  std::unordered_map<uint64_t, entry> watched; ///< by token
  uint64_t next_token = 1;
};

/// Event data: the token in the high bits, the slot (0-2 pipes, 3 pidfd) low.
uint64_t event_data(uint64_t token, int slot) {
  return (token << 2) | static_cast<uint64_t>(slot & 3);
}

void run(watcher* w) {
  // Signals are for the threads that expect them.
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::vector<epoll_event> events(max_events);
  std::vector<uint64_t> tokens;
  for (;;) {
    int n = ::epoll_wait(w->epoll_fd, events.data(), max_events, -1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    tokens.clear();
    for (int i = 0; i < n; ++i)
      tokens.push_back(events[static_cast<size_t>(i)].data.u64 >> 2);
    std::sort(tokens.begin(), tokens.end());
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    // One wake per arm, whichever descriptors fired; one that fired while
    // the watch was not armed fires again when `rearm` modifies it. The send
    // happens under the lock so that no wake leaves after `stop` returns.
    std::lock_guard<std::mutex> guard{w->mu};
    for (auto token : tokens) {
      auto i = w->watched.find(token);
      if (i == w->watched.end() || !i->second.armed)
        continue; // withdrawn, or woken already in this arm
      i->second.armed = false;
      if (auto a = caf::actor_cast<caf::actor>(i->second.who))
        caf::anon_send(a, poll_atom::value);
    }
  }
}

/// The watcher, its thread started on first use; null when epoll is unavailable.
watcher* instance() {
  static watcher* w = []() -> watcher* {
    int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0)
      return nullptr;
    auto* result = new watcher;
    result->epoll_fd = fd;
    try {
      std::thread{run, result}.detach();
    } catch (const std::system_error&) {
      ::close(fd);
      delete result;
      return nullptr;
    }
    return result;
  }();
  return w;
}

/// Adds (`op` EPOLL_CTL_ADD) or re-arms (EPOLL_CTL_MOD) one descriptor, one-shot.
bool arm(int op, int fd, uint32_t what, uint64_t data) {
  epoll_event ev{};
  ev.events = what | EPOLLONESHOT;
  ev.data.u64 = data;
  return ::epoll_ctl(instance()->epoll_fd, op, fd, &ev) == 0;
}

/// What slot `slot` waits for: output to read, or room for stdin.
uint32_t interest(int slot) {
  return slot == 2 ? static_cast<uint32_t>(EPOLLOUT) : static_cast<uint32_t>(EPOLLIN);
}

} // namespace

// -- process_watch ----------------------------------------------------------------

process_watch::~process_watch() {
  stop();
}

std::array<int, 3> process_watch::current() const {
  return {{proc_->out_fd(), proc_->err_fd(), proc_->in_fd()}};
}

bool process_watch::start(caf::actor_addr who, const subprocess& proc) {
  stop();
  auto* w = instance();
  if (w == nullptr || proc.pid() <= 0 || proc.reaped())
    return false;
#ifdef SYS_pidfd_open
  // The leader is our unreaped child: its pid cannot have been reused.
  int pid_fd = static_cast<int>(::syscall(SYS_pidfd_open, proc.pid(), 0));
#else
  int pid_fd = -1;
#endif
  if (pid_fd < 0)
    return false;
  uint64_t token;
  {
    std::lock_guard<std::mutex> guard{w->mu};
    token = w->next_token++;
    w->watched.emplace(token, watcher::entry{std::move(who), true});
  }
  token_ = token;
  pid_fd_ = pid_fd;
  proc_ = &proc;
  if (!arm(EPOLL_CTL_ADD, pid_fd_, EPOLLIN, event_data(token_, 3))) {
    stop();
    return false;
  }
  auto fds = current();
  for (int slot = 0; slot < 3; ++slot) {
    auto fd = fds[static_cast<size_t>(slot)];
    if (fd < 0)
      continue;
    if (!arm(EPOLL_CTL_ADD, fd, interest(slot), event_data(token_, slot))) {
      stop();
      return false;
    }
    fds_[static_cast<size_t>(slot)] = fd;
  }
  return true;
}

void process_watch::rearm() {
  if (token_ == 0)
    return;
  auto* w = instance();
  {
    // Armed before the descriptors: an event right after a modify wakes.
    std::lock_guard<std::mutex> guard{w->mu};
    w->watched[token_].armed = true;
  }
  auto fds = current();
  for (size_t slot = 0; slot < 3; ++slot) {
    if (fds_[slot] < 0)
      continue;
    if (fds_[slot] != fds[slot]) {
      fds_[slot] = -1; // closed by the subprocess: the kernel dropped it
      continue;
    }
    arm(EPOLL_CTL_MOD, fds_[slot], interest(static_cast<int>(slot)),
        event_data(token_, static_cast<int>(slot)));
  }
  if (!proc_->reaped())
    arm(EPOLL_CTL_MOD, pid_fd_, EPOLLIN, event_data(token_, 3));
}

void process_watch::stop() {
  if (token_ == 0)
    return;
  auto* w = instance();
  auto fds = current();
  for (size_t slot = 0; slot < 3; ++slot)
    if (fds_[slot] >= 0 && fds_[slot] == fds[slot])
      ::epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, fds_[slot], nullptr);
  fds_ = {{-1, -1, -1}};
  if (pid_fd_ >= 0) {
    ::epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, pid_fd_, nullptr);
    ::close(pid_fd_);
    pid_fd_ = -1;
  }
  {
    std::lock_guard<std::mutex> guard{w->mu};
    w->watched.erase(token_);
  }
  token_ = 0;
  proc_ = nullptr;
}

} // namespace canopy::core
