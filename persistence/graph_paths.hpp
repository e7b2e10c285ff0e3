#pragma once

// Internal to persistence/: what the graph parser (graph_parser.hpp) and the loader
// of stored graphs (graph_load.cpp) must do identically, so that both build
// the same model (file paths, names, the inline-command refusal).

#include <string>

#include "persistence/graph.hpp"

namespace canopy::core::detail {

/// Returns `p` as an absolute, lexically normal path without a trailing slash
/// (relative to the working directory; empty: the working directory).
std::string normalize_path(const std::string& p);

/// Returns the folder of `abs_path` (`/` at the top).
std::string parent_of(const std::string& abs_path);

/// Returns the file name of `abs_path` without its extension: the default
/// name of a graph read from that file.
std::string stem_of(const std::string& abs_path);

/// True when a `graph` step's string names a file (it holds a `/` or ends in
/// `.json`), false for a registered graph's name.
bool is_file_reference(const std::string& s);

/// The error refusing an inline command (`run`, argv `plan`) on a node that
/// does not allow them (runtime/docs/reference/http.md#stop), code `inline_commands_disabled`.
/// @param what  e.g. "a 'run' step runs an argv given in the graph"
graph_error inline_refusal(std::string path, const char* what);

/// What `inline_refusal` says of a `run` step.
constexpr const char* run_refusal = "a 'run' step runs an argv given in the graph";

/// What `inline_refusal` says of a `plan` step with an argv.
constexpr const char* plan_refusal = "a 'plan' step with an argv runs a command given in the graph";

} // namespace canopy::core::detail
