// `canopy serve` with its stderr on a pipe nobody reads (a paused pager, a
// stuck log shipper, a full journald buffer): every request is still
// answered, `/healthz` and `/metrics` show the stalled log and the lines it
// dropped, and SIGTERM still ends the process. The server is spawned here
// rather than by server_process, whose reader drains stderr the whole time.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/process/guardian.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/server_test_helpers.hpp"

extern char** environ;

using namespace canopy::core::test;
using namespace canopy::core::test::server_test;

namespace {

/// Longest a request may take while stderr is stalled (a synchronous log
/// blocks it for good once the pipe is full).
constexpr auto request_bound = std::chrono::seconds{5} * slow_build;

/// One `canopy --home HOME serve --config FILE` in a process group of its
/// own, stdout on /dev/null and stderr on a pipe whose read end this object
/// holds open and never reads. The destructor SIGKILLs the group of a
/// server not yet reaped, reaps it, closes the pipe, and in a
/// ThreadSanitizer run writes the server's reports to stderr. Not copyable.
class unread_stderr_server {
public:
  unread_stderr_server(const std::string& home, const std::string& config_file,
                       const std::string& tsan_dir)
    : tsan_dir_(tsan_dir) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string{"pipe2: "} + std::strerror(errno));
    err_read_ = fds[0];
    int err_write = fds[1];
    std::vector<std::string> args{canopy_binary(), "--home", home, "serve", "--config",
                                  config_file};
    std::map<std::string, std::string> env_map;
    add_tsan_log_path(env_map, tsan_dir_);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv{*e};
      if (env_map.count(kv.substr(0, kv.find('='))) == 0)
        env.push_back(kv);
    }
    for (auto& [k, v] : env_map)
      env.push_back(k + "=" + v);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    // dup2 clears close-on-exec on the copy: the server's stderr is the
    // blocking write end; both original ends close at exec.
    posix_spawn_file_actions_adddup2(&actions, err_write, STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t empty_mask;
    sigset_t all_signals;
    sigemptyset(&empty_mask);
    sigfillset(&all_signals);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &empty_mask);
    posix_spawnattr_setsigdefault(&attr, &all_signals);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK
                                      | POSIX_SPAWN_SETSIGDEF);
    int err = ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    ::close(err_write);
    if (err != 0) {
      ::close(err_read_);
      throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(err));
    }
    canopy::core::guard_process_group(pid_);
  }

  ~unread_stderr_server() {
    if (!reaped_) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    canopy::core::unguard_process_group(pid_);
    ::close(err_read_);
    echo_tsan_reports("canopy serve (pid " + std::to_string(pid_) + ")", tsan_dir_);
  }

  unread_stderr_server(const unread_stderr_server&) = delete;
  unread_stderr_server& operator=(const unread_stderr_server&) = delete;

  pid_t pid() const { return pid_; }

  /// Polls until the server exited (and reaps it) or `timeout` passed.
  /// @returns its exit code (128 + signal when a signal ended it), or -1 on
  /// timeout.
  int wait_exit(std::chrono::seconds timeout) {
    int code = -1;
    eventually(
      [&] {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) != pid_)
          return false;
        reaped_ = true;
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      },
      timeout);
    return code;
  }

private:
  std::string tsan_dir_;
  pid_t pid_ = -1;
  int err_read_ = -1; ///< held open so writes to the pipe do not fail, never read
  bool reaped_ = false;
};

} // namespace

TEST_CASE("with its stderr on a pipe nobody reads, serve answers every request, reports the "
          "stalled log and its dropped lines, and ends on SIGTERM",
          "[integration][server][log]") {
  temp_dir dir;
  int port = closed_port();
  auto config = default_server_config();
  config["listen"] = "127.0.0.1:" + std::to_string(port);
  auto config_file = dir.write("server.json", config.dump(2));
  unread_stderr_server srv{dir.path + "/home", config_file, dir.path};

  httplib::Client anon{"127.0.0.1", port};
  anon.set_connection_timeout(std::chrono::seconds{5});
  anon.set_read_timeout(request_bound);
  httplib::Client c{"127.0.0.1", port};
  c.set_connection_timeout(std::chrono::seconds{5});
  c.set_read_timeout(request_bound);
  c.set_bearer_token_auth(alice_token);
  REQUIRE(eventually([&] { return static_cast<bool>(anon.Get("/healthz")); },
                     std::chrono::seconds{30}, std::chrono::milliseconds{20}));

  // Each cycle logs about 900 bytes (the two `event=http` lines and the
  // execution's and stop's events): 300 cycles fill the pipe (64 KiB)
  // several times over.
  register_graph(c, sleeper_graph("nap", 600000));
  for (int i = 0; i < 300; ++i) {
    INFO("cycle " << i);
    auto t0 = std::chrono::steady_clock::now();
    auto started = post_json(c, "/v1/graphs/nap/executions", {{"inputs", json::object()}});
    REQUIRE(started.status == 201);
    auto t1 = std::chrono::steady_clock::now();
    auto stopped = post_json(c, "/v1/executions/" + started.body["id"].get<std::string>()
                                  + "/stop", {{"wait", 5}});
    REQUIRE(stopped.status == 200);
    auto t2 = std::chrono::steady_clock::now();
    REQUIRE(t1 - t0 < request_bound);
    REQUIRE(t2 - t1 < request_bound);
  }

  // The log's thread drops what the full pipe does not take.
  json health;
  CHECK(eventually(
    [&] {
      auto a = get_json(anon, "/healthz");
      health = a.body;
      return a.status == 200 && health.value("log", "") == "stalled"
             && health.value("log_dropped", 0) > 0;
    },
    std::chrono::seconds{10}));
  INFO("/healthz: " << health.dump());
  CHECK(health["status"] == "ok");
  auto m = request(anon, "GET", "/metrics");
  REQUIRE(m.status == 200);
  CHECK(sample(samples(m.text), "canopy_log_dropped_total") > 0);

  REQUIRE(::kill(srv.pid(), SIGTERM) == 0);
  CHECK(srv.wait_exit(std::chrono::seconds{30}) == 0);
}
