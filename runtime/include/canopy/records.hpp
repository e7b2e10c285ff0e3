#pragma once

/// @file
/// What the library reports: statuses, events, execution records, agents'
/// replies. Plain values; copies are independent of the runtime.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include <canopy/export.hpp>

namespace canopy {

/// JSON values in and out: inputs, `with`, outputs, events' data
/// (nlohmann/json, a header-only library).
using json = nlohmann::json;

/// Where an execution stands. `queued`, `running` and `stopping` are live;
/// `stopped` (with a reason: `requested`, `interrupted`, ...) can be
/// resumed, and so can `failed`; `completed` is final.
enum class execution_status : uint8_t { queued, running, stopping, stopped, completed, failed };

/// @returns the status's name, e.g. `"running"`.
CANOPY_API const char* to_string(execution_status x);

/// True for `completed`, `failed` and `stopped`: nothing of it runs.
CANOPY_API bool is_settled(execution_status x);

/// How a stop treats running steps: `graceful` signals subprocesses and
/// waits their grace periods (SIGINT, then SIGTERM, then SIGKILL) and lets
/// `fn` steps reach a checkpoint; `force` kills at once.
enum class stop_mode : uint8_t { graceful, force };

/// What a stop found.
enum class stop_outcome : uint8_t {
  stopped,     ///< the tree's snapshot is committed: every step ended, resume picks up there
  stopping,    ///< the request is stored, the wait passed before the tree settled
  not_running, ///< nothing to stop: the execution had settled (nothing was stored)
};

/// @returns the outcome's name, e.g. `"stopped"`.
CANOPY_API const char* to_string(stop_outcome x);

/// One committed event of an execution tree, as the event log stores it.
struct event {
  uint64_t seq = 0;          ///< the home's event sequence: strictly increasing
  int64_t time = 0;          ///< ms since the epoch
  std::string type;          ///< `execution.started`, `step.completed`, ... (the reference's event list)
  std::string execution_id;
  std::string root_id;
  std::string parent_id;     ///< empty for a root's own events
  std::string step;          ///< empty for execution events
  std::string status;        ///< the status it reports, when it reports one
  std::string reason;
  json data;                 ///< type-specific details, null when none
};

/// One execution, without its steps. Times are ms since the epoch, 0: unset.
struct execution_info {
  std::string id;
  std::string graph;         ///< the graph's name
  execution_status status = execution_status::queued;
  std::string reason;        ///< why it stopped or failed, e.g. `requested`; empty: none
  std::string error;         ///< the failure's message; empty: none
  std::string root_id;
  std::string parent_id;     ///< empty for a root
  json inputs = json::object();
  json outputs;              ///< null unless completed
  int64_t created_at = 0;
  int64_t started_at = 0;
  int64_t ended_at = 0;
  std::string agent;         ///< the agent whose run it is; empty: none
};

/// What an agent does with a message that arrives while it runs one.
enum class busy_policy : uint8_t {
  cancel_previous, ///< stop the running run; the new message runs
  queue,           ///< run it after the others, in arrival order
  reject,          ///< refuse it (`send` answers `errc::busy`)
};

/// How an agent's run for a message ended.
struct agent_reply {
  execution_status status = execution_status::completed; ///< `completed`, `failed` or `stopped`
  bool cancelled = false;    ///< superseded by a newer message before its run started (nothing ran)
  std::string reason;
  json reply;                ///< the run's `reply` output; null unless completed
  std::string execution_id;  ///< empty when no run started
  std::string error;         ///< why it failed
};

/// What became of a signal sent to an execution's waits.
struct signal_answer {
  bool replayed = false;     ///< the same idempotency key and value were sent before: nothing new stored
  bool consumed = false;     ///< a wait took it (now, or before for a replay)
  std::string consumed_execution; ///< the execution of the wait that took it
  std::string consumed_step;      ///< that wait's step id
};

} // namespace canopy
