// The log's sink (runtime/node/log_sink.hpp) on a pipe: nobody reading costs
// lines, counted, never a wait per line; the first line the pipe takes
// again clears the stall; a line cut short is ended before the next.

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <spdlog/logger.h>

#include "runtime/node/log_sink.hpp"

using namespace canopy::core;
using namespace std::chrono_literals;

namespace {

/// A pipe of one page (4096 bytes), both ends blocking, closed on
/// destruction.
struct page_pipe {
  page_pipe() {
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    REQUIRE(::fcntl(fds[1], F_SETPIPE_SZ, 4096) == 4096);
  }
  ~page_pipe() {
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  }
  page_pipe(const page_pipe&) = delete;
  page_pipe& operator=(const page_pipe&) = delete;

  /// Everything the pipe holds, read without waiting.
  std::string drain() {
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }

  int fds[2] = {-1, -1};
};

/// A synchronous logger of bare lines (`%v`) on `sink`.
std::shared_ptr<spdlog::logger> bare_logger(std::shared_ptr<fd_sink> sink) {
  auto log = std::make_shared<spdlog::logger>("test", std::move(sink));
  log->set_pattern("%v");
  return log;
}

} // namespace

TEST_CASE("a sink on a pipe nobody reads drops and counts lines instead of waiting for each, "
          "and the first line the pipe takes again clears the stall",
          "[runtime][log]") {
  page_pipe p;
  // A stalled sink never waits again within this test.
  auto sink = std::make_shared<fd_sink>(p.fds[1], fd_sink_timing{500ms, 1h});
  auto log = bare_logger(sink);
  // 100 bytes with its newline: the pipe takes a few (poll reports a pipe
  // writable while a page of it is free), the rest is dropped.
  std::string line(99, 'x');
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i)
    log->info(line);
  auto took = std::chrono::steady_clock::now() - t0;
  // One wait of 500 ms, where a wait per dropped line (over 150 of them)
  // would take over a minute.
  CHECK(took < 30s);
  CHECK(sink->stalled());
  auto held = p.drain();
  CHECK(held.size() % 100 == 0);
  CHECK(held.size() >= 100);
  auto dropped = 200 - held.size() / 100;
  CHECK(sink->dropped() == dropped);

  log->info("again");
  CHECK_FALSE(sink->stalled());
  CHECK(p.drain() == "again\n");
  CHECK(sink->dropped() == dropped);
}

TEST_CASE("a sink writes a line longer than PIPE_BUF in pieces, and ends a line cut short "
          "before the next one",
          "[runtime][log]") {
  page_pipe p;
  auto sink = std::make_shared<fd_sink>(p.fds[1], fd_sink_timing{20ms, 1h});
  auto log = bare_logger(sink);
  log->info(std::string(3000, 'a'));
  CHECK(p.drain() == std::string(3000, 'a') + "\n");
  // The first 4096 bytes fill the pipe; the rest is dropped.
  log->info(std::string(6000, 'b'));
  CHECK(sink->dropped() == 1);
  CHECK(sink->stalled());
  CHECK(p.drain() == std::string(4096, 'b'));
  log->info("next");
  CHECK(p.drain() == "\nnext\n");
  CHECK_FALSE(sink->stalled());
}

TEST_CASE("a sink on a pipe whose reader is gone drops lines without raising SIGPIPE",
          "[runtime][log]") {
  page_pipe p;
  ::close(p.fds[0]);
  p.fds[0] = -1;
  auto sink = std::make_shared<fd_sink>(p.fds[1], fd_sink_timing{20ms, 1h});
  auto log = bare_logger(sink);
  log->info("lost");
  log->info("lost too");
  CHECK(sink->dropped() == 2);
  CHECK(sink->stalled());
}
