#pragma once

// What an agent answers: the message vocabulary between an agent's mailbox
// (actors/agent_actor.hpp) and whoever messages it (the runtime, the HTTP
// API, the library). Plain C++; `to_string` / `from_string` are the only
// spellings.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "persistence/outcomes.hpp"
#include "persistence/records.hpp"

namespace canopy::core {

/// How a message to an agent ended.
enum class reply_status : uint8_t {
  completed, ///< the run completed: `reply` holds its `reply` output
  failed,    ///< the run failed, or it could not start
  stopped,   ///< the run stopped, or the node shut down before it started
  busy,      ///< rejected (`on_busy: reject`): nothing ran
  cancelled, ///< superseded by a newer message before its run started
};

/// The answer to a user's message.
struct agent_reply {
  reply_status status = reply_status::failed;
  step_reason reason = step_reason::none; ///< the run's reason, e.g. `requested`
  nlohmann::json reply;      ///< the run's `reply` output; null unless completed
  std::string execution_id;  ///< empty when no run started
  std::string error;         ///< why it failed, or was refused
};

/// @returns the reply status of a run that ended `x` (`x` is terminal).
reply_status reply_status_of(execution_status x);

/// What cancelling an agent's run did.
enum class cancel_result : uint8_t {
  cancelled,    ///< its live run was stopped
  no_execution, ///< no run was live
};

const char* to_string(reply_status x);
const char* to_string(cancel_result x);
/// Parses a spelling. @returns false when unknown.
bool from_string(const std::string& s, reply_status& x);
bool from_string(const std::string& s, cancel_result& x);

} // namespace canopy::core
