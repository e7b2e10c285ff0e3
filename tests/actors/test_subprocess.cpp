// Tests of canopy::core::subprocess against real processes. Every wait is a poll
// loop with a deadline, so a hang fails the test instead of blocking it.

#include "actors/process/subprocess.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "persistence/error.hpp"

using namespace canopy::core;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

void nap() {
  struct timespec ts = {0, 1000000}; // 1 ms
  nanosleep(&ts, nullptr);
}

subprocess start_ok(subprocess_options opts) {
  auto p = subprocess::start(opts);
  if (!p)
    FAIL("start failed: " << message_of(p.error()));
  return std::move(*p);
}

subprocess start_ok(std::vector<std::string> argv) {
  subprocess_options opts;
  opts.argv = std::move(argv);
  return start_ok(std::move(opts));
}

/// Polls until done; on deadline kills the group and fails.
void run_to_end(subprocess& p, const subprocess::line_callback& on_line = {},
                std::chrono::seconds limit = 30s) {
  auto deadline = clock_type::now() + limit;
  while (!p.poll(on_line)) {
    if (clock_type::now() > deadline) {
      p.signal_group(SIGKILL);
      FAIL("process " << p.pid() << " did not finish in time");
    }
    nap();
  }
}

/// Polls until `pred()` holds; fails at the deadline.
template <class Pred>
void poll_until(subprocess& p, Pred pred, std::chrono::seconds limit = 30s) {
  auto deadline = clock_type::now() + limit;
  while (!pred()) {
    p.poll();
    if (clock_type::now() > deadline) {
      p.signal_group(SIGKILL);
      FAIL("condition not reached in time");
    }
    nap();
  }
}

/// True when `pid` no longer exists or is a zombie (waiting for init).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH)
    return true;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in)
    return true;
  std::string line;
  std::getline(in, line);
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size())
    return true;
  return line[close_paren + 2] == 'Z';
}

bool wait_gone(pid_t pid, std::chrono::seconds limit = 10s) {
  auto deadline = clock_type::now() + limit;
  while (!process_gone(pid)) {
    if (clock_type::now() > deadline)
      return false;
    nap();
  }
  return true;
}

/// Reads the first stdout line (a pid printed by the script).
pid_t first_line_pid(subprocess& p) {
  poll_until(p, [&] { return p.out().data.find('\n') != std::string::npos; });
  auto line = p.out().data.substr(0, p.out().data.find('\n'));
  return static_cast<pid_t>(std::stol(line));
}

/// A fresh temporary directory, removed (with its files) at scope exit.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/canopy-subprocess-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    char resolved[PATH_MAX];
    REQUIRE(realpath(tmpl, resolved) != nullptr);
    path = resolved;
  }
  ~temp_dir() {
    std::string cmd = "rm -rf '" + path + "'";
    if (std::system(cmd.c_str()) != 0) {
      // best effort
    }
  }
};

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  {
    std::ofstream out(path);
    out << text;
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

std::string patterned(size_t size) {
  std::string s;
  s.reserve(size);
  for (size_t i = 0; s.size() < size; ++i)
    s += std::to_string(i) + (i % 17 == 0 ? "\n" : ",");
  s.resize(size);
  return s;
}

} // namespace

// -- exit status --------------------------------------------------------------

TEST_CASE("a process that exits normally reports its exit code",
          "[actors][subprocess]") {
  auto ok = start_ok({"true"});
  run_to_end(ok);
  CHECK(ok.done());
  CHECK(ok.exit_code() == 0);
  CHECK(ok.term_signal() == 0);
  auto three = start_ok({"sh", "-c", "exit 3"});
  run_to_end(three);
  CHECK(three.exit_code() == 3);
  CHECK(three.term_signal() == 0);
  CHECK(WIFEXITED(three.wait_status()));
}

TEST_CASE("a process killed by a signal reports 128 plus the signal number",
          "[actors][subprocess]") {
  auto self_kill = start_ok({"sh", "-c", "kill -TERM $$"});
  run_to_end(self_kill);
  CHECK(self_kill.exit_code() == 128 + SIGTERM);
  CHECK(self_kill.term_signal() == SIGTERM);
  auto sleeper = start_ok({"sleep", "100"});
  CHECK(sleeper.signal_group(SIGKILL));
  run_to_end(sleeper);
  CHECK(sleeper.exit_code() == 128 + SIGKILL);
  CHECK(sleeper.term_signal() == SIGKILL);
}

TEST_CASE("poll keeps returning true once the process is done",
          "[actors][subprocess]") {
  auto p = start_ok({"true"});
  run_to_end(p);
  CHECK(p.poll());
  CHECK(p.poll());
  CHECK(p.exit_code() == 0);
}

// -- output -------------------------------------------------------------------

TEST_CASE("stdout and stderr are captured verbatim without a trailing newline",
          "[actors][subprocess]") {
  auto p = start_ok({"sh", "-c", "printf 'a\\n\\tb  '; printf 'e1\\r\\ne2' >&2"});
  run_to_end(p);
  CHECK(p.exit_code() == 0);
  CHECK(p.out().data == "a\n\tb  ");
  CHECK(p.err().data == "e1\r\ne2");
  CHECK_FALSE(p.out().truncated);
  CHECK_FALSE(p.err().truncated);
}

TEST_CASE("binary output including NUL bytes is captured verbatim",
          "[actors][subprocess]") {
  auto p = start_ok({"sh", "-c", "printf 'x\\000y\\377'"});
  run_to_end(p);
  CHECK(p.out().data == std::string("x\0y\xff", 4));
}

TEST_CASE("the line callback receives the lines of both streams in order",
          "[actors][subprocess]") {
  std::vector<std::string> out_lines;
  std::vector<std::string> err_lines;
  auto on_line = [&](int stream, const std::string& line) {
    (stream == 1 ? out_lines : err_lines).push_back(line);
  };
  auto p = start_ok({"sh", "-c",
                     "echo one; echo e1 >&2; printf '\\n'; echo two; "
                     "echo e2 >&2; printf 'e3' >&2; printf last"});
  run_to_end(p, on_line);
  CHECK(out_lines == std::vector<std::string>{"one", "", "two", "last"});
  CHECK(err_lines == std::vector<std::string>{"e1", "e2", "e3"});
  CHECK(p.out().data == "one\n\ntwo\nlast");
}

TEST_CASE("a line without newline is delivered in bounded chunks",
          "[actors][subprocess]") {
  size_t total = 0;
  size_t largest = 0;
  size_t calls = 0;
  bool only_a = true;
  auto on_line = [&](int stream, const std::string& line) {
    CHECK(stream == 1);
    ++calls;
    total += line.size();
    largest = std::max(largest, line.size());
    only_a = only_a && line.find_first_not_of('a') == std::string::npos;
  };
  auto p = start_ok({"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a"});
  run_to_end(p, on_line);
  CHECK(p.exit_code() == 0);
  CHECK(total == 300000);
  CHECK(largest == 64u * 1024u);
  CHECK(calls == 5);
  CHECK(only_a);
}

TEST_CASE("output beyond 1 MiB keeps the tail and is marked truncated",
          "[actors][subprocess]") {
  auto p = start_ok({"sh", "-c",
                     "head -c 3000000 /dev/zero | tr '\\0' a; printf END; "
                     "printf small >&2"});
  run_to_end(p);
  CHECK(p.exit_code() == 0);
  CHECK(p.out().truncated);
  REQUIRE(p.out().data.size() == max_captured_output);
  CHECK(p.out().data.compare(p.out().data.size() - 3, 3, "END") == 0);
  CHECK(p.out().data.find_first_not_of('a') == max_captured_output - 3);
  CHECK_FALSE(p.err().truncated);
  CHECK(p.err().data == "small");
}

TEST_CASE("output of exactly 1 MiB is not truncated", "[actors][subprocess]") {
  auto p = start_ok({"sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' b"});
  run_to_end(p);
  CHECK_FALSE(p.out().truncated);
  CHECK(p.out().data.size() == max_captured_output);
}

// -- stdin --------------------------------------------------------------------

TEST_CASE("stdin_data is written to the process's stdin",
          "[actors][subprocess]") {
  subprocess_options opts;
  opts.argv = {"cat"};
  opts.stdin_data = std::string("hello\nworld");
  auto p = start_ok(opts);
  run_to_end(p);
  CHECK(p.exit_code() == 0);
  CHECK(p.out().data == "hello\nworld");
}

TEST_CASE("without stdin_data the process reads an empty stdin",
          "[actors][subprocess]") {
  auto p = start_ok({"cat"});
  run_to_end(p, {}, 10s);
  CHECK(p.exit_code() == 0);
  CHECK(p.out().data.empty());
  subprocess_options opts;
  opts.argv = {"cat"};
  opts.stdin_data = std::string();
  auto q = start_ok(opts);
  run_to_end(q, {}, 10s);
  CHECK(q.exit_code() == 0);
  CHECK(q.out().data.empty());
}

TEST_CASE("large stdin and large output flow at once without deadlock",
          "[actors][subprocess]") {
  auto input = patterned(2u * 1024u * 1024u);
  subprocess_options opts;
  opts.argv = {"cat"};
  opts.stdin_data = input;
  auto p = start_ok(opts);
  size_t lines = 0;
  run_to_end(p, [&](int, const std::string&) { ++lines; });
  CHECK(p.exit_code() == 0);
  CHECK(p.out().truncated);
  CHECK(p.out().data == input.substr(input.size() - max_captured_output));
  auto expected_lines = static_cast<size_t>(
    std::count(input.begin(), input.end(), '\n') + (input.back() != '\n'));
  CHECK(lines == expected_lines);
  subprocess_options count;
  count.argv = {"wc", "-c"};
  count.stdin_data = input;
  auto q = start_ok(count);
  run_to_end(q);
  CHECK(q.out().data.find(std::to_string(input.size())) != std::string::npos);
}

TEST_CASE("a process that ignores its stdin does not break the writer",
          "[actors][subprocess]") {
  subprocess_options opts;
  opts.argv = {"head", "-c", "1"};
  opts.stdin_data = patterned(2u * 1024u * 1024u);
  auto p = start_ok(opts);
  run_to_end(p);
  CHECK(p.exit_code() == 0);
  CHECK(p.out().data == "0");
  // The EPIPE's SIGPIPE was consumed, not left pending.
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
  opts.argv = {"true"};
  auto q = start_ok(opts);
  run_to_end(q);
  CHECK(q.exit_code() == 0);
}

// -- environment and working directory ----------------------------------------

TEST_CASE("env is merged over the parent's environment and overrides it",
          "[actors][subprocess]") {
  REQUIRE(::setenv("CANOPY_SP_BASE", "base", 1) == 0);
  REQUIRE(::setenv("CANOPY_SP_OVER", "old", 1) == 0);
  subprocess_options opts;
  opts.argv = {"sh", "-c",
               "printf '%s|%s|%s' \"$CANOPY_SP_BASE\" \"$CANOPY_SP_OVER\" "
               "\"$CANOPY_SP_NEW\""};
  opts.env = {{"CANOPY_SP_OVER", "new"}, {"CANOPY_SP_NEW", "x y=z"}};
  auto p = start_ok(opts);
  run_to_end(p);
  CHECK(p.out().data == "base|new|x y=z");
  auto env_dump = start_ok({"env"});
  run_to_end(env_dump);
  CHECK(env_dump.out().data.find("CANOPY_SP_OVER=old\n") != std::string::npos);
  ::unsetenv("CANOPY_SP_BASE");
  ::unsetenv("CANOPY_SP_OVER");
}

TEST_CASE("a PATH in env decides where the program is looked up",
          "[actors][subprocess]") {
  temp_dir dir;
  write_file(dir.path + "/canopy-sp-tool", "#!/bin/sh\necho tool-ran\n", 0755);
  subprocess_options opts;
  opts.argv = {"canopy-sp-tool"};
  opts.env = {{"PATH", dir.path + ":/usr/bin:/bin"}};
  auto p = start_ok(opts);
  run_to_end(p);
  CHECK(p.out().data == "tool-ran\n");
  opts.env = {{"PATH", "/usr/bin:/bin"}};
  auto missing = subprocess::start(opts);
  REQUIRE_FALSE(missing);
  CHECK(message_of(missing.error())
        == "cannot start 'canopy-sp-tool': No such file or directory");
}

TEST_CASE("cwd sets the working directory of the process",
          "[actors][subprocess]") {
  temp_dir dir;
  subprocess_options opts;
  opts.argv = {"pwd"};
  opts.cwd = dir.path;
  auto p = start_ok(opts);
  run_to_end(p);
  CHECK(p.out().data == dir.path + "\n");
  // A relative program path is resolved in the new working directory.
  write_file(dir.path + "/local.sh", "#!/bin/sh\necho local\n", 0755);
  opts.argv = {"./local.sh"};
  auto q = start_ok(opts);
  run_to_end(q);
  CHECK(q.out().data == "local\n");
}

// -- start errors -------------------------------------------------------------

TEST_CASE("a program that does not exist gives an error naming it",
          "[actors][subprocess]") {
  auto p = subprocess::start({{"canopy-no-such-program-xyz", "arg"}, {}, {}, {}});
  REQUIRE_FALSE(p);
  CHECK(message_of(p.error())
        == "cannot start 'canopy-no-such-program-xyz': No such file or directory");
  auto abs = subprocess::start({{"/nonexistent/dir/prog"}, {}, {}, {}});
  REQUIRE_FALSE(abs);
  CHECK(message_of(abs.error()).find("'/nonexistent/dir/prog'")
        != std::string::npos);
}

TEST_CASE("a file without execute permission gives an error naming it",
          "[actors][subprocess]") {
  temp_dir dir;
  auto path = dir.path + "/not-exec";
  write_file(path, "#!/bin/sh\necho no\n", 0644);
  auto p = subprocess::start({{path}, {}, {}, {}});
  REQUIRE_FALSE(p);
  CHECK(message_of(p.error())
        == "cannot start '" + path + "': Permission denied");
}

TEST_CASE("a bad working directory gives an error naming it",
          "[actors][subprocess]") {
  temp_dir dir;
  subprocess_options opts;
  opts.argv = {"pwd"};
  opts.cwd = dir.path + "/missing";
  auto p = subprocess::start(opts);
  REQUIRE_FALSE(p);
  CHECK(message_of(p.error())
        == "cannot start 'pwd': working directory '" + opts.cwd
             + "' does not exist");
  write_file(dir.path + "/file", "x", 0644);
  opts.cwd = dir.path + "/file";
  auto q = subprocess::start(opts);
  REQUIRE_FALSE(q);
  CHECK(message_of(q.error())
        == "cannot start 'pwd': working directory '" + opts.cwd
             + "' is not a directory");
}

TEST_CASE("an empty argv or a bad env name is rejected",
          "[actors][subprocess]") {
  auto empty = subprocess::start(subprocess_options{});
  REQUIRE_FALSE(empty);
  CHECK(message_of(empty.error()) == "cannot start a process: empty argv");
  subprocess_options opts;
  opts.argv = {"true"};
  opts.env = {{"A=B", "c"}};
  auto bad = subprocess::start(opts);
  REQUIRE_FALSE(bad);
  CHECK(message_of(bad.error())
        == "cannot start 'true': invalid environment variable name 'A=B'");
}

// -- process group and signals ------------------------------------------------

TEST_CASE("the child leads its own process group", "[actors][subprocess]") {
  auto p = start_ok({"sleep", "100"});
  CHECK(::getpgid(p.pid()) == p.pid());
  CHECK(::getpgrp() != p.pid());
  CHECK(p.signal_group(SIGKILL));
  run_to_end(p);
}

TEST_CASE("signal_group reaches a grandchild", "[actors][subprocess]") {
  auto p = start_ok({"sh", "-c", "sleep 100 & echo $!; wait"});
  auto grandchild = first_line_pid(p);
  REQUIRE(grandchild > 0);
  CHECK(::getpgid(grandchild) == p.pid());
  CHECK(p.signal_group(SIGTERM));
  run_to_end(p);
  CHECK(p.exit_code() == 128 + SIGTERM);
  CHECK(wait_gone(grandchild));
}

TEST_CASE("a background grandchild holding stdout does not hang poll",
          "[actors][subprocess]") {
  auto started = clock_type::now();
  // The grandchild holds stdout for two minutes: waiting for it would take
  // over the hang bound.
  auto p = start_ok({"sh", "-c", "sleep 120 & echo $! >&2; echo hi"});
  run_to_end(p, {}, 60s);
  CHECK(clock_type::now() - started < 30s);
  CHECK(p.exit_code() == 0);
  CHECK(p.out().data == "hi\n");
  auto grandchild = static_cast<pid_t>(std::stol(p.err().data));
  CHECK_FALSE(process_gone(grandchild));
  // The group outlives its leader, and can still be signalled.
  CHECK(p.signal_group(SIGKILL));
  CHECK(wait_gone(grandchild));
}

TEST_CASE("signal_group answers false when no member is left",
          "[actors][subprocess]") {
  auto p = start_ok({"true"});
  run_to_end(p);
  CHECK_FALSE(p.signal_group(0));
  CHECK_FALSE(p.signal_group(SIGTERM));
  subprocess empty;
  CHECK_FALSE(empty.signal_group(0));
  CHECK_FALSE(empty.poll());
}

TEST_CASE("a blocked or ignored SIGINT in the parent does not reach the child",
          "[actors][subprocess]") {
  sigset_t block_int;
  sigset_t old_mask;
  sigemptyset(&block_int);
  sigaddset(&block_int, SIGINT);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &block_int, &old_mask) == 0);
  struct sigaction ignore = {};
  struct sigaction old_action = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  auto blocked = start_ok({"sleep", "100"});
  REQUIRE(sigaction(SIGINT, &ignore, &old_action) == 0);
  auto ignored = start_ok({"sleep", "100"});
  REQUIRE(sigaction(SIGINT, &old_action, nullptr) == 0);
  REQUIRE(pthread_sigmask(SIG_SETMASK, &old_mask, nullptr) == 0);
  CHECK(blocked.signal_group(SIGINT));
  CHECK(ignored.signal_group(SIGINT));
  run_to_end(blocked);
  run_to_end(ignored);
  CHECK(blocked.term_signal() == SIGINT);
  CHECK(ignored.term_signal() == SIGINT);
  CHECK(blocked.exit_code() == 128 + SIGINT);
}

// -- lifetime -----------------------------------------------------------------

TEST_CASE("destroying an unreaped process kills its whole group",
          "[actors][subprocess]") {
  pid_t leader = -1;
  pid_t grandchild = -1;
  {
    auto p = start_ok({"sh", "-c", "sleep 100 & echo $!; wait"});
    leader = p.pid();
    grandchild = first_line_pid(p);
    REQUIRE_FALSE(process_gone(grandchild));
  }
  // The leader was reaped by the destructor: gone for good.
  CHECK(::kill(leader, 0) == -1);
  CHECK(errno == ESRCH);
  CHECK(wait_gone(grandchild));
}

TEST_CASE("moving a subprocess transfers ownership", "[actors][subprocess]") {
  subprocess_options opts;
  opts.argv = {"cat"};
  opts.stdin_data = std::string("moved\n");
  auto a = start_ok(opts);
  auto pid = a.pid();
  subprocess b(std::move(a));
  CHECK(a.pid() == -1);
  CHECK(b.pid() == pid);
  subprocess c;
  c = std::move(b);
  CHECK(b.pid() == -1);
  run_to_end(c);
  CHECK(c.out().data == "moved\n");
  CHECK(c.exit_code() == 0);
  // Assigning over a running process kills and reaps it.
  auto victim = start_ok({"sleep", "100"});
  auto victim_pid = victim.pid();
  victim = start_ok({"true"});
  CHECK(::kill(victim_pid, 0) == -1);
  CHECK(errno == ESRCH);
  run_to_end(victim);
  CHECK(victim.exit_code() == 0);
}
