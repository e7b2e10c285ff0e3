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

} // namespace

// -- start --------------------------------------------------------------------

caf::expected<subprocess> subprocess::start(const subprocess_options& opts) {
  if (opts.argv.empty() || opts.argv.front().empty())
    return make_error(persistence_errc::io_error,
                      "cannot start a process: empty argv");
  const auto& prog = opts.argv.front();
  for (auto& kv : opts.env)
    if (kv.first.empty() || kv.first.find('=') != std::string::npos)
      return start_error(opts, "invalid environment variable name '"
                                 + kv.first + "'");
  // A bad cwd gets its own message instead of a bare errno from the child.
  if (!opts.cwd.empty()) {
    struct stat st;
    if (::stat(opts.cwd.c_str(), &st) != 0) {
      int err = errno;
      if (err == ENOENT)
        return start_error(opts, "working directory '" + opts.cwd
                                   + "' does not exist");
      return start_error(opts, "working directory '" + opts.cwd
                                 + "': " + error_text(err));
    }
    if (!S_ISDIR(st.st_mode))
      return start_error(opts, "working directory '" + opts.cwd
                                 + "' is not a directory");
  }
  // Environment: ours, with opts.env merged over it.
  std::vector<std::string> env_store;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    const char* eq = std::strchr(entry, '=');
    std::string name = eq ? std::string(entry, eq) : std::string(entry);
    if (opts.env.count(name) == 0)
      env_store.emplace_back(entry);
  }
  for (auto& kv : opts.env)
    env_store.push_back(kv.first + "=" + kv.second);
  std::vector<char*> envp;
  envp.reserve(env_store.size() + 1);
  for (auto& s : env_store)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store(opts.argv.begin(), opts.argv.end());
  std::vector<char*> argv;
  argv.reserve(argv_store.size() + 1);
  for (auto& s : argv_store)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  // A PATH given in opts.env decides the lookup, as in a shell's
  // `PATH=... prog`; posix_spawnp would search our own PATH instead.
  std::string exec_path;
  bool use_path_search = true;
  if (auto i = opts.env.find("PATH");
      i != opts.env.end() && prog.find('/') == std::string::npos) {
    auto [found, err] = search_path(prog, i->second, opts.cwd);
    if (err != 0)
      return start_error(opts, error_text(err));
    exec_path = std::move(found);
    use_path_search = false;
  } else {
    exec_path = prog;
  }
  // Pipes: the parent keeps the read ends of stdout/stderr and the write end
  // of stdin, non-blocking; all our ends are close-on-exec.
  fd_guard out_r, out_w, err_r, err_w, in_r, in_w;
  bool feed_stdin = opts.stdin_data && !opts.stdin_data->empty();
  int err = make_pipe(out_r, out_w);
  if (err == 0)
    err = make_pipe(err_r, err_w);
  if (err == 0 && feed_stdin)
    err = make_pipe(in_r, in_w);
  if (err == 0)
    err = set_nonblocking(out_r.fd);
  if (err == 0)
    err = set_nonblocking(err_r.fd);
  if (err == 0 && feed_stdin)
    err = set_nonblocking(in_w.fd);
  if (err != 0)
    return start_error(opts, "cannot create pipes: " + error_text(err));
  posix_spawn_file_actions_t actions;
  if ((err = posix_spawn_file_actions_init(&actions)) != 0)
    return start_error(opts, error_text(err));
  posix_spawnattr_t attr;
  if ((err = posix_spawnattr_init(&attr)) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return start_error(opts, error_text(err));
  }
  if (feed_stdin)
    err = posix_spawn_file_actions_adddup2(&actions, in_r.fd, STDIN_FILENO);
  else
    err = posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                           O_RDONLY, 0);
  if (err == 0)
    err = posix_spawn_file_actions_adddup2(&actions, out_w.fd, STDOUT_FILENO);
  if (err == 0)
    err = posix_spawn_file_actions_adddup2(&actions, err_w.fd, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors some library opened without O_CLOEXEC stay out of steps.
  if (err == 0)
    err = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  if (err == 0 && !opts.cwd.empty())
    err = posix_spawn_file_actions_addchdir_np(&actions, opts.cwd.c_str());
  // Own process group; empty signal mask; default dispositions for all.
  sigset_t empty_mask;
  sigset_t all_signals;
  sigemptyset(&empty_mask);
  sigfillset(&all_signals);
  if (err == 0)
    err = posix_spawnattr_setpgroup(&attr, 0);
  if (err == 0)
    err = posix_spawnattr_setsigmask(&attr, &empty_mask);
  if (err == 0)
    err = posix_spawnattr_setsigdefault(&attr, &all_signals);
  if (err == 0)
    err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP
                                            | POSIX_SPAWN_SETSIGMASK
                                            | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (err == 0) {
    if (use_path_search)
      err = posix_spawnp(&pid, exec_path.c_str(), &actions, &attr, argv.data(),
                         envp.data());
    else
      err = posix_spawn(&pid, exec_path.c_str(), &actions, &attr, argv.data(),
                        envp.data());
  }
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    if (!opts.cwd.empty())
      return start_error(opts, error_text(err) + " (working directory '"
                                 + opts.cwd + "')");
    return start_error(opts, error_text(err));
  }
  // From here until the registration, a death of this process would leave
  // the group running (the window guardian.hpp documents).
  guard_process_group(pid);
  subprocess result;
  result.pid_ = pid;
  result.guarded_ = true;
  result.out_fd_ = out_r.release();
  result.err_fd_ = err_r.release();
  if (feed_stdin) {
    result.in_fd_ = in_w.release();
    result.stdin_pending_ = *opts.stdin_data;
  }
  // The child-side ends (out_w, err_w, in_r) close here, so EOF arrives once
  // every process holding them has closed them.
  return result;
}

} // namespace canopy::core
