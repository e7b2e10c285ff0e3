// `run`, `resume` and `stop` on the local home: an execution started in the
// foreground or detached, resumed, or asked to stop from another process.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include "actors/execution/execution_actor.hpp"
#include "persistence/signal_rules.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/cli/render.hpp"
#include "runtime/node/error.hpp"

extern char** environ;

namespace canopy::core::cli {

namespace {

/// `run --detach`: re-executes this program in a session of its own and
/// prints the id the child reports.
int run_detached(const global_options& g, const run_options& o, const char* self_exe) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return usage_error(std::string{"pipe: "} + std::strerror(errno));
  std::vector<std::string> args = {self_exe, "--home", home_of(g), "--max-parallel",
                                   std::to_string(g.max_parallel), "run", o.file,
                                   "--detached-fd", "3"};
  for (auto& i : o.inputs) {
    args.push_back("--input");
    args.push_back(i);
  }
  for (auto& s : o.signals) {
    args.push_back("--signal");
    args.push_back(s);
  }
  if (!o.config.empty()) {
    args.push_back("--config");
    args.push_back(o.config);
  }
  // The run's log lives in the home, which the detached run would create
  // only after the log is opened: a first command on a new home makes it
  // here (a failure shows as the spawn's error below).
  std::error_code ec;
  std::filesystem::create_directories(home_of(g), ec);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 3);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::string log = home_of(g) + "/detached.log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return usage_error(std::string{"cannot start background process: "} + std::strerror(rc));
  }
  std::string id;
  char buf[64];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0)
    id.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  while (!id.empty() && id.back() == '\n')
    id.pop_back();
  if (id.empty()) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::cerr << "error: the background run did not start (see " << log << ")\n";
    return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : exit_failed;
  }
  // The child runs on in its own session; init reaps it when it exits.
  if (o.json)
    std::cout << json{{"id", id}}.dump() << "\n";
  else
    std::cout << id << "\n";
  return exit_completed;
}

} // namespace

// -- commands --------------------------------------------------------------------------

int cmd_run(const global_options& g, const run_options& o, const remote_options& remote,
            const char* self_exe) {
  auto inputs = parse_inputs(o.inputs);
  if (!inputs)
    return fail(inputs.error());
  // Validate before anything is stored (and before a detached child starts).
  // A server checks tool names against its own tools and its workers'.
  std::optional<node_config> cfg;
  if (!o.config.empty()) {
    if (!remote.server.empty())
      return usage_error("--config is for a local run: a server has its own");
    cfg = read_run_config(o.config);
    if (!cfg)
      return exit_usage;
  }
  auto popts = local_or_server_tools(cfg ? &*cfg : nullptr, remote);
  auto parsed = parse_graph_file(o.file, popts);
  if (!parsed)
    return report_graph_errors(o.file, parsed);
  if (auto err = check_inputs(*parsed.value, *inputs))
    return fail(err);
  auto signals = parse_signals(o.signals);
  if (!signals)
    return fail(signals.error());
  if (auto bad = check_start_signals(*parsed.value, *signals); !bad.empty())
    return fail(make_error(runtime_errc::invalid_input, to_string(bad.front())));
  if (!remote.server.empty())
    return remote_run(g, remote, o.file, *parsed.value, std::move(*inputs), o.json, o.detach,
                      std::move(*signals));
  if (o.detach)
    return run_detached(g, o, self_exe);
  interrupt_guard guard;
  auto rt = open_runtime(g, cfg ? &*cfg : nullptr);
  if (!rt)
    return fail(rt.error());
  start_options so;
  so.signals = std::move(*signals);
  so.signals_from = "cli:pid " + std::to_string(::getpid());
  auto h = (*rt)->start(parsed.value, std::move(*inputs), so);
  if (!h)
    return fail(h.error());
  if (o.detached_fd >= 0) {
    auto line = h->id() + "\n";
    (void) !::write(o.detached_fd, line.data(), line.size());
    ::close(o.detached_fd);
  }
  return follow(g, **rt, *h, guard, o.json);
}

int cmd_resume(const global_options& g, const remote_options& remote, const std::string& id,
               bool as_json, std::optional<double> budget, const std::string& config) {
  if (!remote.server.empty() && !config.empty())
    return usage_error("--config is for a local resume: a server has its own");
  if (!remote.server.empty())
    return remote_resume(g, remote, id, as_json, budget);
  std::optional<node_config> cfg;
  if (!config.empty()) {
    cfg = read_run_config(config);
    if (!cfg)
      return exit_usage;
  }
  interrupt_guard guard;
  auto rt = open_runtime(g, cfg ? &*cfg : nullptr);
  if (!rt)
    return fail(rt.error());
  auto before = (*rt)->db()->last_seq();
  if (!before)
    return fail(before.error());
  auto h = (*rt)->resume(id, budget);
  if (!h)
    return fail(h.error());
  return follow(g, **rt, *h, guard, as_json, *before);
}

/// `canopy stop`: stores the request (the stop protocol; the process that
/// owns the execution delivers it), then waits, polling the store and
/// recovering a dead owner meanwhile, until the execution settled.
int cmd_stop(const global_options& g, const std::string& id, bool force, double wait_s) {
  auto db = open_store(g, store_use::write);
  if (!db)
    return fail(db.error());
  auto mode = force ? stop_mode::force : stop_mode::graceful;
  auto ticket = request_stop(**db, id, mode, "cli:pid " + std::to_string(::getpid()));
  if (!ticket)
    return fail(ticket.error());
  if (ticket->result == stop_result::no_execution && ticket->request.id.empty()) {
    std::cout << "no_execution\n";
    return 0;
  }
  auto wait = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  auto result = await_stop(**db, *ticket, wait, [&]() -> caf::error {
    auto r = recover_interrupted(**db);
    return r ? caf::error{} : r.error();
  });
  if (!result)
    return fail(result.error());
  auto now = (*db)->execution(id);
  if (!now)
    return fail(now.error());
  if (*result == stop_result::stopping) {
    std::cout << to_string(now->status) << "\n";
    std::cerr << "still " << to_string(now->status) << " after " << wait_s << " s\n";
    return 1;
  }
  std::cout << status_text(*now) << "\n";
  return 0;
}

} // namespace canopy::core::cli
