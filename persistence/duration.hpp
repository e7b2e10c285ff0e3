#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace canopy::core {

/// Milliseconds, the unit of every duration and time in canopy.
using millis = std::chrono::milliseconds;

/// Parses a duration such as `"250ms"`, `"10s"`, `"5m"` or `"2h"`.
/// @returns the duration, or `persistence_errc::invalid_graph` with a message
///          naming the bad text.
/// Thread-safe.
caf::expected<millis> parse_duration(const std::string& text);

/// Reads a duration from a JSON value (a string for `parse_duration`).
/// @returns the duration, or `persistence_errc::invalid_graph` with a message
///          such as `expected a duration such as "10s", got 300`.
/// Thread-safe.
caf::expected<millis> duration_from_json(const nlohmann::json& v);

/// Renders `d` in the shortest exact unit (`"1500ms"`, `"10s"`, `"5m"`).
std::string to_duration_string(millis d);

/// Returns milliseconds since the Unix epoch (system clock).
int64_t now_ms();

/// Renders `ms_since_epoch` as RFC 3339 UTC with milliseconds,
/// e.g. `"2026-11-22T09:22:21.042Z"`.
std::string to_rfc3339(int64_t ms_since_epoch);

} // namespace canopy::core
