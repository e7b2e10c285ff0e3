// Tests of the guardian (actors/process/guardian.hpp) against real processes: an
// owner forked from the test starts a step and is SIGKILLed; the step's group
// must die. Every wait is a poll loop with a deadline, never a sleep.

#include "actors/process/guardian.hpp"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "actors/process/subprocess.hpp"
#include "persistence/error.hpp"

using namespace canopy::core;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

/// The deadline of every wait: generous, a hang fails instead of blocking.
constexpr auto deadline_after = 20s;

void nap() {
  struct timespec ts = {0, 1000000}; // 1 ms
  nanosleep(&ts, nullptr);
}

/// Polls `pred` until it holds (true) or the deadline passes (false).
template <class Pred>
bool eventually(Pred pred) {
  auto deadline = clock_type::now() + deadline_after;
  while (!pred()) {
    if (clock_type::now() > deadline)
      return false;
    nap();
  }
  return true;
}

/// The fields of /proc/PID/stat after the command name: state, ppid, pgrp.
struct stat_fields {
  char state = '?';
  long ppid = -1;
  long pgrp = -1;
};

bool read_stat(long pid, stat_fields& out) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string line;
  if (!in || !std::getline(in, line))
    return false;
  auto close = line.rfind(')');
  if (close == std::string::npos)
    return false;
  std::istringstream fields{line.substr(close + 1)};
  fields >> out.state >> out.ppid >> out.pgrp;
  return static_cast<bool>(fields);
}

/// True when `pid` does not exist or is a zombie (waiting to be reaped).
bool process_gone(long pid) {
  stat_fields f;
  return !read_stat(pid, f) || f.state == 'Z' || f.state == 'X';
}

/// True while a process that is not a zombie belongs to group `pgid`.
bool group_alive(long pgid) {
  DIR* d = ::opendir("/proc");
  if (d == nullptr)
    return false;
  bool alive = false;
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0')
      continue;
    stat_fields f;
    if (read_stat(pid, f) && f.pgrp == pgid && f.state != 'Z' && f.state != 'X') {
      alive = true;
      break;
    }
  }
  ::closedir(d);
  return alive;
}

std::string comm_of(long pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/comm"};
  std::string name;
  std::getline(in, name);
  return name;
}

/// The open descriptors of `pid` with what they point to.
std::set<std::pair<int, std::string>> fds_of(long pid) {
  std::set<std::pair<int, std::string>> result;
  auto dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return result;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.')
      continue;
    char target[PATH_MAX];
    auto n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    target[n > 0 ? n : 0] = '\0';
    // Sockets read as "socket:[inode]": keep the kind only.
    std::string what = target;
    if (what.rfind("socket:", 0) == 0)
      what = "socket";
    result.emplace(std::atoi(e->d_name), what);
  }
  ::closedir(d);
  return result;
}

/// The signals `pid` ignores (SigIgn of /proc/PID/status).
unsigned long long ignored_signals(long pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("SigIgn:", 0) == 0)
      return std::stoull(line.substr(7), nullptr, 16);
  return 0;
}

bool ignores(unsigned long long mask, int sig) {
  return (mask >> (sig - 1)) & 1ULL;
}

subprocess start_ok(std::vector<std::string> argv) {
  subprocess_options opts;
  opts.argv = std::move(argv);
  auto p = subprocess::start(opts);
  if (!p)
    FAIL("start failed: " << message_of(p.error()));
  return std::move(*p);
}

void run_to_end(subprocess& p) {
  if (!eventually([&] { return p.poll(); })) {
    p.signal_group(SIGKILL);
    FAIL("process " << p.pid() << " did not finish in time");
  }
}

/// What the forked owner reports: its step's pid and its guardian's pid.
struct owner_report {
  pid_t step = -1;
  pid_t guardian = -1;
};

/// A child of the test that owns a step: it starts `sh -c 'sleep 600 &
/// wait'` with canopy::core::subprocess, reports the pids through a pipe and waits
/// to be killed. The destructor SIGKILLs and reaps it if the test did not.
class forked_owner {
public:
  forked_owner() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(fds[0]);
      owner_main(fds[1]);
    }
    ::close(fds[1]);
    read_fd_ = fds[0];
  }

  forked_owner(const forked_owner&) = delete;
  forked_owner& operator=(const forked_owner&) = delete;

  ~forked_owner() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap();
    }
    if (read_fd_ >= 0)
      ::close(read_fd_);
  }

  pid_t pid() const { return pid_; }

  /// Waits for the owner's report; false when none came before the deadline.
  bool read_report(owner_report& out) {
    size_t got = 0;
    auto* buf = reinterpret_cast<char*>(&out);
    auto deadline = clock_type::now() + deadline_after;
    while (got < sizeof(out)) {
      pollfd pfd{read_fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 100) < 0 && errno != EINTR)
        return false;
      if (pfd.revents != 0) {
        auto n = ::read(read_fd_, buf + got, sizeof(out) - got);
        if (n <= 0)
          return false;
        got += static_cast<size_t>(n);
      }
      if (clock_type::now() > deadline)
        return false;
    }
    return true;
  }

  /// SIGKILLs the owner and reaps it.
  void kill_owner() {
    ::kill(pid_, SIGKILL);
    reap();
  }

private:
  void reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      // retry
    }
    pid_ = -1;
  }

  /// The owner: starts the step, reports, waits. Never returns into Catch.
  [[noreturn]] static void owner_main(int fd) {
    subprocess_options opts;
    opts.argv = {"sh", "-c", "sleep 600 & wait"};
    auto p = subprocess::start(opts);
    if (!p)
      ::_exit(1);
    owner_report rep{p->pid(), guardian_pid()};
    if (::write(fd, &rep, sizeof(rep)) != static_cast<ssize_t>(sizeof(rep)))
      ::_exit(1);
    for (;;)
      ::pause();
  }

  pid_t pid_ = -1;
  int read_fd_ = -1;
};

} // namespace

TEST_CASE("a SIGKILLed owner's guardian kills the step groups it registered",
          "[actors][guardian]") {
  // Make sure the test process has a guardian of its own first.
  auto warm = start_ok({"true"});
  run_to_end(warm);
  auto ours = guardian_pid();
  REQUIRE(ours > 0);
  forked_owner owner;
  owner_report rep;
  REQUIRE(owner.read_report(rep));
  REQUIRE(rep.step > 0);
  REQUIRE(rep.guardian > 0);
  // The forked owner got a guardian of its own, not a share of ours.
  CHECK(rep.guardian != ours);
  REQUIRE(eventually([&] { return comm_of(rep.guardian) == "canopy-guard"; }));
  stat_fields f;
  REQUIRE(read_stat(rep.guardian, f));
  CHECK(f.ppid == owner.pid());
  REQUIRE(eventually([&] { return read_stat(rep.guardian, f) && f.pgrp == rep.guardian; }));
  // The step's group has its shell and the background sleep.
  REQUIRE_FALSE(process_gone(rep.step));
  REQUIRE(group_alive(rep.step));
  owner.kill_owner();
  CHECK(eventually([&] { return process_gone(rep.step); }));
  CHECK(eventually([&] { return !group_alive(rep.step); }));
  CHECK(eventually([&] { return process_gone(rep.guardian); }));
  // Our own guardian is untouched.
  CHECK_FALSE(process_gone(ours));
  CHECK(guardian_running());
}

TEST_CASE("the guardian holds only its socket and /dev/null, in a group of its own",
          "[actors][guardian]") {
  auto warm = start_ok({"true"});
  run_to_end(warm);
  auto g = guardian_pid();
  REQUIRE(g > 0);
  REQUIRE(guardian_running());
  // It may still be setting itself up: wait until its descriptors settle.
  std::set<std::pair<int, std::string>> expected{
    {0, "/dev/null"}, {1, "/dev/null"}, {2, "/dev/null"}, {3, "socket"}};
  CHECK(eventually([&] { return fds_of(g) == expected; }));
  stat_fields f;
  REQUIRE(read_stat(g, f));
  CHECK(f.ppid == ::getpid());
  CHECK(f.pgrp == g);
  CHECK(f.pgrp != ::getpgrp());
  // It names itself and ignores signals after its descriptors settle.
  CHECK(eventually([&] { return comm_of(g) == "canopy-guard"; }));
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
    INFO("signal " << sig);
    CHECK(eventually([&] { return ignores(ignored_signals(g), sig); }));
  }
}

TEST_CASE("a finished subprocess withdraws its registration", "[actors][guardian]") {
  auto before = guarded_group_count();
  {
    auto p = start_ok({"true"});
    CHECK(guarded_group_count() == before + 1);
    run_to_end(p);
    // The group was seen empty: withdrawn at once, not in the destructor.
    CHECK(guarded_group_count() == before);
  }
  CHECK(guarded_group_count() == before);
  // A killed and destroyed process is withdrawn too.
  {
    auto p = start_ok({"sleep", "600"});
    CHECK(guarded_group_count() == before + 1);
  }
  CHECK(guarded_group_count() == before);
}

TEST_CASE("a group with a leftover member stays registered until it is empty",
          "[actors][guardian]") {
  auto before = guarded_group_count();
  auto p = start_ok({"sh", "-c", "sleep 600 & echo $!"});
  run_to_end(p);
  auto grandchild = std::stol(p.out().data);
  REQUIRE_FALSE(process_gone(grandchild));
  // The leader is reaped, its background sleep lives on: still guarded.
  CHECK(guarded_group_count() == before + 1);
  CHECK(p.signal_group(SIGKILL));
  CHECK(eventually([&] { return process_gone(grandchild); }));
  CHECK(guarded_group_count() == before + 1);
  {
    auto gone = std::move(p);
  }
  CHECK(guarded_group_count() == before);
}

TEST_CASE("moves keep exactly one registration per started group",
          "[actors][guardian]") {
  auto before = guarded_group_count();
  auto a = start_ok({"sleep", "600"});
  subprocess b(std::move(a));
  CHECK(guarded_group_count() == before + 1);
  subprocess c;
  c = std::move(b);
  CHECK(guarded_group_count() == before + 1);
  // Assigning over a running process kills it and withdraws its group.
  c = start_ok({"sleep", "600"});
  CHECK(guarded_group_count() == before + 1);
  c = subprocess{};
  CHECK(guarded_group_count() == before);
  {
    subprocess moved_from(std::move(a));
    CHECK(moved_from.pid() == -1);
  }
  CHECK(guarded_group_count() == before);
}

TEST_CASE("unguarding a group that was never registered changes nothing",
          "[actors][guardian]") {
  auto before = guarded_group_count();
  unguard_process_group(0);
  unguard_process_group(1);
  unguard_process_group(-5);
  unguard_process_group(INT_MAX);
  guard_process_group(0);
  guard_process_group(1);
  CHECK(guarded_group_count() == before);
}
