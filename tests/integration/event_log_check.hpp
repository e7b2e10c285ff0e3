#pragma once

// The invariants of a tree's event log (statuses, stop, resume, events), checked on
// the events a reader got, in the order it got them:
//
//   1. seqs strictly increase;
//   2. after an execution's terminal event (`execution.completed`, `failed`,
//      `stopped`) nothing more is said about it until it is resumed, except
//      `stop.requested` / `stop.handled` (a stop of a terminal execution is
//      answered `no_execution`), the `agent.reply` its completion writes
//      right after `execution.completed`, the `agent.cancelled` a
//      cancel writes with its stop request, and `signal.received` (a signal
//      to a stopped or failed tree is kept for its resume);
//   3. stops are causal: a `stop.handled` follows the `stop.requested` of
//      the same `data.stop_id`, and an execution stopping or stopped with
//      reason `requested` follows a `stop.requested` of it written since its
//      latest `execution.started` / `execution.resumed`;
//   4. a step recorded completed is never started again (across resumes),
//      and a step recorded skipped never starts;
//   5. each execution's status events follow the status rules: `queued` first,
//      `started` once (again only if it never started before a stop),
//      `stopping` only while it runs, a terminal event only while it runs
//      (or stops, or waits queued), `resumed` only after `stopped`/`failed`
//      (so a loop's iteration that completed never runs again);
//   6. a signal is consumed once, after it was received: each
//      `signal.consumed` names (`data.signal_id`) a `signal.received` before
//      it that no other `signal.consumed` named.
//
// Every invariant holds for any prefix of a valid log, so a log read while
// the tree still runs is checked too; a log read from the middle (after a
// cursor, `?after=`, `Last-Event-ID`) is not a log to check.
//
// The checker is a pure function. check_event_log() is what the test
// helpers call on every whole log they read (the CLI's `events --json`, the
// HTTP log, an SSE stream from its start, the store's `tree_events`): in the
// test binary (CANOPY_EVENT_LOG_CHECK) it throws, naming each violation,
// which Catch reports as the test's failure from any thread, as
// check_answer does; elsewhere (the benchmarks) it does nothing.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core::test {

/// The violations of the invariants above in `events` (event documents
/// `{seq, time, type, execution_id, root_id, parent_id, step, status,
/// reason, data}`, as `canopy events ID --json` and the HTTP API give them),
/// one readable sentence each naming the seqs involved; empty when the log
/// is fine.
std::vector<std::string> event_log_violations(const std::vector<nlohmann::json>& events);

/// The same for events read from the library (converted with
/// event_document()).
std::vector<std::string> event_log_violations(const std::vector<event_record>& events);

/// Parses `canopy events ID --json` output (JSON Lines). Lines that are not
/// JSON objects are skipped.
std::vector<nlohmann::json> parse_event_lines(const std::string& text);

/// Checks a whole event log a test read from `source` (e.g. `canopy events
/// ID --json`): in the test binary, throws std::runtime_error listing every
/// violation; elsewhere does nothing. Thread-safe.
void check_event_log(const std::vector<nlohmann::json>& events, const std::string& source);
void check_event_log(const std::vector<event_record>& events, const std::string& source);

/// While an object of this type lives, check_event_log() does nothing on
/// the thread that made it: for a harness that keeps every log it reads and
/// judges them once it has cleaned up (a throw would leave its processes).
class unchecked_event_logs {
public:
  unchecked_event_logs();
  ~unchecked_event_logs();
  unchecked_event_logs(const unchecked_event_logs&) = delete;
  unchecked_event_logs& operator=(const unchecked_event_logs&) = delete;

private:
  bool was_;
};

/// The store's whole log of the tree `root` (`db.tree_events(root)`), checked
/// with check_event_log. Throws std::runtime_error when it cannot be read.
std::vector<event_record> checked_tree_events(const store& db, const std::string& root);

} // namespace canopy::core::test
