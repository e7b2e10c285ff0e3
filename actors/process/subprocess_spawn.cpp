// Starting a subprocess: the environment, the PATH lookup, the pipes and
// posix_spawn into a process group of its own, registered with the guardian.

#include "actors/process/subprocess.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "actors/process/guardian.hpp"
#include "actors/process/subprocess_detail.hpp"
#include "persistence/error.hpp"

extern char** environ;

namespace canopy::core {

namespace {

using subprocess_detail::close_fd;

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

// -- the phases of a start ----------------------------------------------------------

/// Checks what the kernel would report only as a bare errno: an empty argv,
/// an environment name with '=', a missing or non-directory cwd.
caf::error check_options(const subprocess_options& opts) {
  if (opts.argv.empty() || opts.argv.front().empty())
    return make_error(persistence_errc::io_error, "cannot start a process: empty argv");
  for (auto& kv : opts.env)
    if (kv.first.empty() || kv.first.find('=') != std::string::npos)
      return start_error(opts, "invalid environment variable name '" + kv.first + "'");
  if (opts.cwd.empty())
    return caf::none;
  struct stat st;
  if (::stat(opts.cwd.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT)
      return start_error(opts, "working directory '" + opts.cwd + "' does not exist");
    return start_error(opts, "working directory '" + opts.cwd + "': " + error_text(err));
  }
  if (!S_ISDIR(st.st_mode))
    return start_error(opts, "working directory '" + opts.cwd + "' is not a directory");
  return caf::none;
}

/// What posix_spawn runs: the program, its argv and its environment (ours
/// with `opts.env` merged over it), as the C arrays it takes. Built in place:
/// the arrays point into the strings.
struct exec_plan {
  std::vector<std::string> env_store;
  std::vector<std::string> argv_store;
  std::vector<char*> envp;
  std::vector<char*> argv;
  std::string path;
  bool search_our_path = true; ///< posix_spawnp: look `path` up in our PATH
};

/// Fills `plan` from `opts`. A PATH given in `opts.env` decides the lookup,
/// as in a shell's `PATH=... prog` (posix_spawnp would search our own).
caf::error make_plan(const subprocess_options& opts, exec_plan& plan) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    const char* eq = std::strchr(entry, '=');
    std::string name = eq ? std::string(entry, eq) : std::string(entry);
    if (opts.env.count(name) == 0)
      plan.env_store.emplace_back(entry);
  }
  for (auto& kv : opts.env)
    plan.env_store.push_back(kv.first + "=" + kv.second);
  plan.argv_store.assign(opts.argv.begin(), opts.argv.end());
  auto c_array = [](std::vector<std::string>& from, std::vector<char*>& to) {
    to.reserve(from.size() + 1);
    for (auto& x : from)
      to.push_back(x.data());
    to.push_back(nullptr);
  };
  c_array(plan.env_store, plan.envp);
  c_array(plan.argv_store, plan.argv);
  const auto& prog = opts.argv.front();
  plan.path = prog;
  if (auto i = opts.env.find("PATH");
      i != opts.env.end() && prog.find('/') == std::string::npos) {
    auto [found, err] = search_path(prog, i->second, opts.cwd);
    if (err != 0)
      return start_error(opts, error_text(err));
    plan.path = std::move(found);
    plan.search_our_path = false;
  }
  return caf::none;
}

/// The child's standard streams: pipes whose parent ends (the read ends of
/// stdout and stderr, the write end of stdin) are non-blocking. Every end
/// is close-on-exec and closed with this object unless released.
struct child_pipes {
  fd_guard out_r, out_w, err_r, err_w, in_r, in_w;
  bool feed_stdin = false; ///< else the child reads /dev/null

  /// @returns 0 or an errno value.
  int open() {
    int err = make_pipe(out_r, out_w);
    if (err == 0)
      err = make_pipe(err_r, err_w);
    if (err == 0 && feed_stdin)
      err = make_pipe(in_r, in_w);
    for (auto* end : {&out_r, &err_r, &in_w})
      if (err == 0 && end->fd >= 0)
        err = set_nonblocking(end->fd);
    return err;
  }
};

/// The child's side of the start: its streams, `cwd`, no inherited
/// descriptors. @returns 0 or an errno value.
int add_file_actions(posix_spawn_file_actions_t& actions, const child_pipes& pipes,
                     const std::string& cwd) {
  int err = pipes.feed_stdin
              ? posix_spawn_file_actions_adddup2(&actions, pipes.in_r.fd, STDIN_FILENO)
              : posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY,
                                                 0);
  if (err == 0)
    err = posix_spawn_file_actions_adddup2(&actions, pipes.out_w.fd, STDOUT_FILENO);
  if (err == 0)
    err = posix_spawn_file_actions_adddup2(&actions, pipes.err_w.fd, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors some library opened without O_CLOEXEC stay out of steps.
  if (err == 0)
    err = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  if (err == 0 && !cwd.empty())
    err = posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  return err;
}

/// Own process group; an empty signal mask; default dispositions for all.
/// @returns 0 or an errno value.
int set_group_attributes(posix_spawnattr_t& attr) {
  sigset_t empty_mask;
  sigset_t all_signals;
  sigemptyset(&empty_mask);
  sigfillset(&all_signals);
  int err = posix_spawnattr_setpgroup(&attr, 0);
  if (err == 0)
    err = posix_spawnattr_setsigmask(&attr, &empty_mask);
  if (err == 0)
    err = posix_spawnattr_setsigdefault(&attr, &all_signals);
  if (err == 0)
    err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK
                                            | POSIX_SPAWN_SETSIGDEF);
  return err;
}

/// Spawns `plan` in a process group of its own with `pipes` as its streams.
/// @returns 0 (and sets `pid`) or an errno value.
int spawn_in_group(const exec_plan& plan, const child_pipes& pipes, const std::string& cwd,
                   pid_t& pid) {
  posix_spawn_file_actions_t actions;
  if (int err = posix_spawn_file_actions_init(&actions); err != 0)
    return err;
  posix_spawnattr_t attr;
  if (int err = posix_spawnattr_init(&attr); err != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return err;
  }
  int err = add_file_actions(actions, pipes, cwd);
  if (err == 0)
    err = set_group_attributes(attr);
  if (err == 0)
    err = plan.search_our_path
            ? posix_spawnp(&pid, plan.path.c_str(), &actions, &attr, plan.argv.data(),
                           plan.envp.data())
            : posix_spawn(&pid, plan.path.c_str(), &actions, &attr, plan.argv.data(),
                          plan.envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return err;
}

} // namespace

// -- start --------------------------------------------------------------------

caf::expected<subprocess> subprocess::start(const subprocess_options& opts) {
  if (auto err = check_options(opts))
    return err;
  exec_plan plan;
  if (auto err = make_plan(opts, plan))
    return err;
  child_pipes pipes;
  pipes.feed_stdin = opts.stdin_data && !opts.stdin_data->empty();
  if (int err = pipes.open(); err != 0)
    return start_error(opts, "cannot create pipes: " + error_text(err));
  pid_t pid = -1;
  if (int err = spawn_in_group(plan, pipes, opts.cwd, pid); err != 0) {
    if (!opts.cwd.empty())
      return start_error(opts, error_text(err) + " (working directory '" + opts.cwd + "')");
    return start_error(opts, error_text(err));
  }
  // From here until the registration, a death of this process would leave
  // the group running (the window guardian.hpp documents).
  guard_process_group(pid);
  subprocess result;
  result.pid_ = pid;
  result.guarded_ = true;
  result.out_fd_ = pipes.out_r.release();
  result.err_fd_ = pipes.err_r.release();
  if (pipes.feed_stdin) {
    result.in_fd_ = pipes.in_w.release();
    result.stdin_pending_ = *opts.stdin_data;
  }
  // The child-side ends (out_w, err_w, in_r) close with `pipes`, so EOF
  // arrives once every process holding them has closed them.
  return result;
}

} // namespace canopy::core
