#pragma once

// The pieces the reliability trials share (the crash loop, crash_trial.hpp,
// and the race harness, race_trial.hpp): canopy processes started with a
// mark in their environment, the scan for marked processes left behind,
// and the store as the command line shows it.
//
// Every process a trial starts carries `CANOPY_CRASH_MARK=MARK` in its
// environment, and so does everything it starts (guardians, step shells and
// their children, a detached run), which is how leftovers are found.
//
// Nothing here uses Catch; failures to start a process throw
// std::runtime_error.

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/process/subprocess.hpp"

namespace canopy::core::test {

/// The environment variable that marks every process of a trial.
inline constexpr const char* mark_var = "CANOPY_CRASH_MARK";

/// Processes (not zombies) whose environment holds `CANOPY_CRASH_MARK=mark`;
/// with `prefix`, any mark starting with `mark`.
std::vector<long> marked_processes(const std::string& mark, bool prefix = false);

/// Waits up to `timeout` for the processes marked `mark` (or any mark
/// starting with it, with `prefix`) to vanish; SIGKILLs the ones left (each
/// one's group and itself). @returns the number of processes that had to be
/// killed: orphans.
size_t settle_marked(const std::string& mark, std::chrono::milliseconds timeout,
                     bool prefix = false);

/// Starts `canopy --home HOME ARGS...` in a process group of its own, marked
/// `mark`. Throws when it cannot start.
subprocess start_marked_canopy(const std::string& home, const std::vector<std::string>& args,
                               const std::string& mark);

/// Polls `p` until it exits or `deadline` passes. @returns true when it exited.
bool exits_by(subprocess& p, std::chrono::steady_clock::time_point deadline);

/// What `ls`, `show` and `events` answered; `ok` false when one failed.
struct store_view {
  bool ok = true;
  std::string root;                  ///< the given id, else the oldest root, if any
  nlohmann::json doc;                ///< its tree document (`show --json`)
  std::vector<nlohmann::json> events; ///< its tree's events, as `events --json` printed them
  std::string error;                 ///< what failed, when not ok
};

/// Reads the tree `id` (empty: the oldest root of `ls --json`) of `home`
/// through the command line. A home where no store was created reads as
/// empty and ok.
store_view read_store(const std::string& home, std::string id);

} // namespace canopy::core::test
