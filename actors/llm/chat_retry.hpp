#pragma once

// When a model call is tried again inside one attempt, as providers expect:
// 429, 5xx and connection errors back off exponentially with full jitter,
// a `Retry-After` the provider sent is honoured, at most `max_retries`
// tries more, and never past the attempt's time. Any other 4xx ends the
// attempt at once. Plain functions: the client asks, tests check.

#include <cstdint>
#include <optional>
#include <string>

namespace canopy::core {

/// The first back-off (before jitter), doubled on each further try.
constexpr int64_t chat_backoff_base_ms = 500;
/// The longest back-off of one try (before jitter).
constexpr int64_t chat_backoff_cap_ms = 30'000;

/// What to do after a failed try.
struct chat_retry {
  bool again = false;   ///< try once more
  int64_t delay_ms = 0; ///< after this long
};

/// @param status the HTTP status, or 0 for a connection error (refused,
///        reset, a stream cut before its end)
/// @param retry_after_ms the provider's `Retry-After`, if it sent one
/// @param tries_done failed tries so far, this one included (1 after the first)
/// @param max_retries tries allowed after the first
/// @param left_ms time left of the attempt (its `timeout`); negative: no limit
/// @param jitter a number in [0, 1): the share of the back-off slept
/// Thread-safe (no state).
chat_retry decide_chat_retry(int status, std::optional<int64_t> retry_after_ms, int tries_done,
                             int max_retries, int64_t left_ms, double jitter);

/// Reads a `Retry-After` value: delay-seconds (`"2"`) or an HTTP-date
/// (`"Wed, 21 Oct 2026 07:28:00 GMT"`, relative to `now_ms`).
/// @returns milliseconds to wait (0 for a date in the past), or nullopt
///          for anything else.
std::optional<int64_t> parse_retry_after(const std::string& value, int64_t now_ms);

} // namespace canopy::core
