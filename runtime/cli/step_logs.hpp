#pragma once

// What the CLI shows of a step's output besides `canopy logs`: the last lines
// of its stderr under a failed step (`show`).

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace canopy::core {

/// How many stderr lines `show` prints under a failed step.
constexpr size_t failed_step_stderr_lines = 5;

/// The last `n` lines of `text` (lines end with LF or CRLF; trailing empty
/// lines are dropped). Thread-safe.
std::vector<std::string> last_lines(const std::string& text, size_t n);

/// The last `n` lines of the stderr in a step document's `result` (a `run`
/// or `tool` step keeps it, also when it failed: runtime/docs/reference/graph-format.md#run); none when
/// the result has no stderr. Thread-safe.
std::vector<std::string> stderr_tail(const nlohmann::json& step, size_t n);

} // namespace canopy::core
