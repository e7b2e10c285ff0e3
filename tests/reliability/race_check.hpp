#pragma once

// The race harness's verdict (race_trial.hpp), kept apart from the processes
// that produce its inputs so that it can be tested on made-up observations:
// what one trial saw goes in, the violations come out.
//
// Pure functions of plain data; no process, store or file is touched here.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace canopy::core::test {

/// One canopy process a trial started (a detached run's background process
/// is one of its own), with its lifetime on the wall clock (ms since the
/// epoch, as event times).
struct process_span {
  std::string role;        ///< `run`, `detached`, `resume`, `serve`, ...
  long pid = 0;
  int64_t started_ms = 0;  ///< just before it was spawned
  int64_t ended_ms = 0;    ///< when its exit was seen; 0 when never seen
  int exit_code = -1;      ///< 128 + signal when a signal ended it
  int signalled = 0;       ///< the last signal the harness sent it, 0 when none
  int64_t signalled_ms = 0; ///< when the harness first signalled it
  bool fenced = false;     ///< it said it was taken over by another process
  std::string stderr_tail; ///< the end of what it wrote to stderr
};

/// A moment a process was asked to run the trial's tree: it started it
/// (`run`, a detached run, an HTTP start on a `serve`) or resumed it
/// (`resume`, an HTTP resume, `serve --resume-interrupted`).
struct owner_claim {
  size_t process = 0;   ///< index in `processes`
  int64_t asked_ms = 0;
};

/// One HTTP request and its answer.
struct http_call {
  std::string what;           ///< `METHOD PATH`
  int status = 0;             ///< 0: no answer
  int64_t started_ms = 0;
  int64_t ms = 0;             ///< how long the answer took
  bool server_signalled = false; ///< the harness signalled the server meanwhile
  bool server_running = true; ///< the server still ran once the request ended
  std::string error;          ///< the client error, or an answer unlike the API document
};

/// An event log a reader got during the trial: an SSE stream, the JSON
/// log of `canopy events --json`.
struct log_read {
  std::string source;
  uint64_t after = 0;         ///< it asked for the events after this seq (0: all)
  std::vector<nlohmann::json> events;
};

/// Everything one trial observed.
struct race_observations {
  std::string root;                        ///< the tree's root execution id
  std::vector<process_span> processes;
  std::vector<owner_claim> claims;
  std::vector<http_call> http;
  std::vector<log_read> reads;
  /// Problems the trial met on its own: a read command that failed, a
  /// server that did not start, a process that hung.
  std::vector<std::string> failures;
  nlohmann::json final_doc;                ///< `show ROOT --json` at the end
  std::vector<nlohmann::json> events;      ///< `events ROOT --json` at the end
  /// `run` step → the wall-clock ms of each line it wrote to the side file.
  std::map<std::string, std::vector<int64_t>> side_lines;
  std::vector<std::string> orphans;        ///< marked processes that had to be killed
};

/// One broken rule: its kind (a short name for the tables) and a sentence.
struct race_violation {
  std::string kind;
  std::string text;
};

/// How close to a process's start, or to the signal that ended it, an
/// event may lie and still count as outside its life: a recovery takes its
/// events' time before it checks the owner, and the harness sees an exit a
/// few ms late.
inline constexpr int64_t lifetime_slack_ms = 50;

/// The same at the exit of a process nobody signalled: it ended on its own,
/// after its execution ended, so a recovery could find it dead only once the
/// harness reaped it (and took the time).
inline constexpr int64_t own_exit_slack_ms = 5;

/// The kinds judge_race() reports, in table order.
const std::vector<std::string>& race_violation_kinds();

/// Judges one trial:
///   - `event log`: event_log_violations() of the final log;
///   - `reads`: every log read during the trial is a contiguous run of the
///     final log (same seqs and types, in order, from its start or from
///     the first event after `after`);
///   - `re-run`: a `run` step's side-file line written after the step's
///     first `step.completed`;
///   - `live owner interrupted`: an `execution.stopped` or `step.pending`
///     with reason `interrupted` whose time lies inside the life of every
///     process that may have written the execution's latest
///     `execution.started`/`resumed` before it (each process claimed by then
///     and alive then); a life ends at the harness's first signal to it, or
///     at its exit, less the slacks above;
///   - `not completed`: the final document's root, children and steps are
///     not all `completed`;
///   - `stop not handled`: a `stop.requested` without its `stop.handled`;
///   - `http`: an answer over 30 s, a 5xx other than 503, no answer from a
///     server that ran on unsignalled, an answer unlike the API document;
///   - `crash`: a process ended by a signal the harness did not send, a
///     `serve` that exited without being signalled;
///   - `orphans`: processes of the trial left at its end;
///   - `failures`: what the trial met on its own (a read command that
///     failed, a server that did not start, a process that hung).
std::vector<race_violation> judge_race(const race_observations& obs);

} // namespace canopy::core::test
