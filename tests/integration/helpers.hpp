#pragma once

// Helpers for tests that use real processes, real stores and real files.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/process/subprocess.hpp"

namespace canopy::core::test {

using json = nlohmann::json;

/// How many times longer a wall-clock bound is in a ThreadSanitizer build,
/// where each canopy process starts and runs several times slower (about a
/// second for `ls` or `stop` on a loaded 2-vCPU machine, over 10 s to accept
/// 500 connections on a thread each, heartbeats late). Only bounds that
/// measure the machine use it; what they check stays checked.
#if defined(__SANITIZE_THREAD__)
constexpr int slow_build = 4;
#else
constexpr int slow_build = 1;
#endif

/// A fresh folder under /tmp, removed with its contents on destruction.
struct temp_dir {
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  /// Writes `content` to `name` inside the folder; @returns the full path.
  std::string write(const std::string& name, const std::string& content) const;
  std::string path;
};

/// What a finished process printed.
struct proc_result {
  int exit_code = -1;
  std::string out;
  std::string err;
  /// stdout parsed as JSON (null when it is not JSON).
  json out_json() const;
};

/// The canopy binary under test.
std::string canopy_binary();

/// The source tree (for examples and fixtures).
std::string source_dir();

/// True when a store was ever created in `home` (a reading command such as
/// `ls` creates none: it lists nothing there).
bool has_store(const std::string& home);

/// Runs `canopy --home HOME ARGS...` to completion (fails the test after
/// `timeout`). @returns its exit code and output. When ARGS print a whole
/// event log (`events ID --json`, with or without `--follow`, locally or
/// with `--server`) and the command succeeds, the log goes through
/// check_event_log (event_log_check.hpp): in the test binary a log that
/// breaks an invariant fails the test.
proc_result run_canopy(const std::string& home, const std::vector<std::string>& args,
                   std::chrono::seconds timeout = std::chrono::seconds{120},
                   const std::string& cwd = {});

/// Runs any command to completion.
proc_result run_command(const std::vector<std::string>& argv,
                        std::chrono::seconds timeout = std::chrono::seconds{120},
                        const std::string& cwd = {});

/// Runs `canopy --home HOME ARGS...` to completion with `env` merged over
/// this process's environment (e.g. `CANOPY_TOKEN`); checks an event log it
/// prints as run_canopy does.
proc_result run_canopy_env(const std::string& home, const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env,
                           std::chrono::seconds timeout = std::chrono::seconds{120});

/// What `canopy events ID --json` printed, read without judging it (for a
/// harness that judges the log itself, and must clean up before it fails).
struct event_log_read {
  bool ok = false;               ///< exit 0 and every line a JSON object
  std::vector<json> events;      ///< in the order printed
  std::string error;             ///< why not ok: stderr, or the bad line
};

/// Reads the event log of `id`'s tree with `canopy --home HOME events ID
/// --json`.
event_log_read read_event_log(const std::string& home, const std::string& id,
                              std::chrono::seconds timeout = std::chrono::seconds{60});

/// @returns a TCP port on 127.0.0.1 where nothing listens: bound to port 0,
/// read back, closed.
int closed_port();

/// Polls `p` until `pred(stdout so far)` holds or `timeout` passes.
/// @returns true when the predicate held. An event wait, not a sleep: it
/// returns as soon as the output shows the event.
bool wait_for_output(subprocess& p, const std::function<bool(const std::string&)>& pred,
                     std::chrono::seconds timeout = std::chrono::seconds{60});

/// Polls `p` until it exits (true) or `timeout` passes (false). On exit, a
/// ThreadSanitizer report in its stderr goes to ours
/// (echo_tsan_reports_in_stderr).
bool wait_exit(subprocess& p, std::chrono::seconds timeout = std::chrono::seconds{60});

// -- ThreadSanitizer reports of child processes -----------------------------------------
//
// In a `-DCANOPY_SANITIZE=thread` build ctest sets TSAN_OPTIONS for every
// test, and the canopy processes a test starts inherit it. A report inside
// such a process only changes its exit code (66) at exit, which a test that
// stops a server in a destructor never sees; so the helpers below (and
// wait_exit, run_command, run_canopy) write a child's reports to this
// process's stderr, where ctest (its
// FAIL_REGULAR_EXPRESSION `WARNING: ThreadSanitizer` in that build) fails
// the test and shows the report. Outside a TSan run (no TSAN_OPTIONS) they
// do nothing.

/// When TSAN_OPTIONS is set and `env` does not set it: adds TSAN_OPTIONS
/// with ` log_path=DIR/tsan` to `env`, so that the child's reports (and those
/// of the processes it starts) land whole in `DIR/tsan.PID`, however much it
/// logs to its stderr.
void add_tsan_log_path(std::map<std::string, std::string>& env, const std::string& dir);

/// Writes the contents of every `DIR/tsan.*` file to stderr under a heading
/// naming `who`. @returns true when there was one.
bool echo_tsan_reports(const std::string& who, const std::string& dir);

/// Writes `err` (a child's captured stderr) to stderr under a heading naming
/// `who` when it holds a ThreadSanitizer report. @returns true when it did.
bool echo_tsan_reports_in_stderr(const std::string& who, const std::string& err);

/// True when no process with `pid` exists any more (zombies count as gone).
bool process_gone(long pid);

/// The process group of `pid` (from /proc/PID/stat); -1 when it is gone.
long pgid_of(long pid);

/// True while some process that is not a zombie belongs to process group
/// `pgid` (a step's group: its shell and every child it started).
bool group_alive(long pgid);

/// The pid a step wrote to `path` (the file's whole first line, complete
/// once it ends in a newline), once it is there; 0 after `timeout`.
long wait_pid_file(const std::string& path,
                   std::chrono::milliseconds timeout = std::chrono::seconds{30});

/// Polls `pred()` every `every` until it holds or `timeout` passes: an event
/// wait with a deadline, never a fixed sleep. @returns whether it held.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds{30},
                std::chrono::milliseconds every = std::chrono::milliseconds{5});

/// Parses an RFC 3339 UTC time with milliseconds (as canopy writes them)
/// into ms since the epoch; throws (failing the test) for anything else.
int64_t ms_of(const json& t);

/// Reads a whole file.
std::string read_file(const std::string& path);

/// Creates (or rewrites) the file `path`: opens a test's gate.
void touch(const std::string& path);

/// Calls `f(doc)` for the execution document `doc` (`show --json`, `GET
/// /v1/executions/ID/tree`), then for every execution in its `children`,
/// depth first, pre-order. Given a mutable `doc`, `f` may change the
/// documents it is given. A document without a `children` array (or one
/// that is not an object) ends the walk below it.
template <class Json, class F>
void for_each_execution(Json&& doc, F&& f) {
  f(doc);
  if (!doc.is_object())
    return;
  if (auto c = doc.find("children"); c != doc.end() && c->is_array())
    for (auto& child : *c)
      for_each_execution(child, f);
}

} // namespace canopy::core::test
