#pragma once

// Bearer tokens kept out of the config file: a user's token may
// come from a file (`token_file`) or an environment variable (`token_env`)
// instead of `token`. These functions read one and check it; the config
// parser (runtime/node/config.cpp) reports their errors at the key's path.
//
// Rules, the same for every source: a token is non-empty, at most
// `max_token_bytes`, holds no control character (a line break included) and
// neither starts nor ends with a blank (an HTTP header could never carry it).
//
// A token file must be a regular file (symbolic links are followed; a FIFO
// or a device is refused, never waited on) that neither other users nor the
// group can write and other users cannot read: mode 0600 or 0400, or 0640
// to share it with a service group. Trailing line breaks (`\n`, `\r\n`) are
// trimmed, so `echo TOKEN > file` works.

#include <cstddef>
#include <string>

#include <caf/expected.hpp>

namespace canopy::core {

/// The longest token (and token file) accepted, in bytes.
constexpr size_t max_token_bytes = 4096;

/// Checks a token's text against the rules above.
/// @returns an empty string when it is acceptable, else the reason (which
///          never quotes the token).
/// Thread-safe.
std::string token_problem(const std::string& token);

/// Reads the token in the file `path`.
/// @returns the token, or `runtime_errc::invalid_input` saying why (missing,
///          unreadable, not a regular file, too open a mode, empty, bad text).
/// Thread-safe; never blocks on a FIFO.
caf::expected<std::string> read_token_file(const std::string& path);

/// Reads the token in the environment variable `name`.
/// @returns the token, or `runtime_errc::invalid_input` saying why (a bad
///          name, unset, empty, bad text).
/// Reads the environment: not safe against concurrent `setenv`.
caf::expected<std::string> read_token_env(const std::string& name);

} // namespace canopy::core
