#pragma once

// Tools: names mapped to argv templates and their limits (runtime/docs/reference/config.md#node-config).
// A node's config (or a worker's tools file) registers them; `tool` steps and
// `plan` steps that name a tool run them. Plain data, nothing runs here.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "persistence/duration.hpp"
#include "persistence/graph.hpp"

namespace canopy::core {

/// One registered tool.
struct tool_def {
  std::string name;
  /// Non-empty array of strings; items may hold `${with.KEY}` and `${inputs.KEY}`.
  json argv = json::array();
  /// At most this many of its subprocesses at once on a node (0: only the
  /// node's `max_parallel` applies).
  size_t max_parallel = 0;
  /// Default attempt timeout (a step's own `timeout` wins).
  std::optional<millis> timeout;
  /// Default grace periods (a step's own `grace` wins).
  std::optional<grace_periods> grace;
  /// What the tool does, for a model that may call it (`llm` steps' `tools`).
  std::string description;
  /// The JSON Schema (persistence/value_schema.hpp) of the arguments a model
  /// passes, each reaching the argv as `${with.KEY}`; null: none (a model
  /// may call it only when it has one).
  json parameters;
};

/// Tool name → definition.
using tool_table = std::map<std::string, tool_def>;

/// Parses a `tools` object. `path` is the JSON pointer of the object in its
/// document (e.g. `/tools`); every problem is appended to `errors` with the
/// path of the offending key (unknown keys, wrong types, bad durations,
/// an empty argv, a reference other than `${with.*}`/`${inputs.*}`, a
/// reference inside the script of a shell's `-c`: persistence/shell_argv.hpp).
/// @returns the table (complete only when no error was appended).
/// Thread-safe.
tool_table parse_tools(const json& tools, const std::string& path,
                       std::vector<graph_error>& errors);

} // namespace canopy::core
