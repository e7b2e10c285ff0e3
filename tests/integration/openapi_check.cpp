#include "tests/integration/openapi_check.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include <nlohmann/json.hpp>

extern char** environ;

namespace canopy::core::test {

namespace {

/// The checker co-process: `python3 check_responses.py openapi.json`,
/// answering `ok` or `error: ...` per line.
class checker {
public:
  ~checker() {
    if (to_ >= 0)
      ::close(to_); // the checker exits at the end of its input
    if (from_ >= 0)
      ::close(from_);
    if (pid_ > 0) {
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }

  std::string check(const std::string& line) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!started_) {
      started_ = true;
      start();
    }
    if (!broken_.empty())
      return broken_;
    auto out = line + "\n";
    for (size_t off = 0; off < out.size();) {
      auto n = ::write(to_, out.data() + off, out.size() - off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return broken("the checker stopped reading");
      off += static_cast<size_t>(n);
    }
    std::string reply;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        reply = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        break;
      }
      pollfd p{from_, POLLIN, 0};
      int rc = ::poll(&p, 1, 60000);
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc <= 0)
        return broken("the checker gave no answer within 60 s");
      char tmp[4096];
      auto n = ::read(from_, tmp, sizeof(tmp));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return broken("the checker exited (is python3-jsonschema installed? run "
                      "/usr/bin/python3 tests/openapi/check_responses.py runtime/server/openapi.json)");
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return reply == "ok" ? std::string{} : reply;
  }

private:
  std::string broken(std::string why) {
    broken_ = "OpenAPI check impossible: " + std::move(why);
    return broken_;
  }

  void start() {
    std::string dir = CANOPY_SOURCE_DIR;
    std::string script = dir + "/tests/openapi/check_responses.py";
    std::string doc = dir + "/runtime/server/openapi.json";
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      broken(std::string{"pipe: "} + std::strerror(errno));
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group; default signal handling.
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &pipe_set);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK
                                      | POSIX_SPAWN_SETSIGDEF);
    std::string python = "/usr/bin/python3";
    char* argv[] = {python.data(), script.data(), doc.data(), nullptr};
    int rc = posix_spawn(&pid_, python.c_str(), &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) {
      pid_ = -1;
      broken("cannot start " + python + ": " + std::strerror(rc));
    }
  }

  std::mutex mtx_;
  bool started_ = false;
  std::string broken_;
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buf_;
};

checker& the_checker() {
  static checker c;
  return c;
}

} // namespace

std::string openapi_mismatch(const std::string& method, const std::string& path, int status,
                             const std::string& content_type, const std::string& body) {
  nlohmann::json line = {{"method", method},
                         {"path", path},
                         {"status", status},
                         {"content_type", content_type}};
  auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (!body.empty() && !parsed.is_discarded()) {
    line["body"] = std::move(parsed);
  } else {
    line["body"] = nullptr;
    line["text"] = body;
  }
  return the_checker().check(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

} // namespace canopy::core::test
