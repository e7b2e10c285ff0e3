#pragma once

// `canopy serve`: the long-running supervisor node (runtime/docs/reference/http.md). One
// process owns the store, hosts every execution's actor tree and serves the
// HTTP API; SIGTERM or SIGINT stops every live execution with reason
// `shutdown` (snapshotted), then the process exits 0.

#include <string>

#include "runtime/node/config.hpp"
#include "runtime/server/http_tls.hpp"

namespace canopy::core {

/// What `canopy serve` runs with: the config (from `--config`, with the
/// command line's flags already applied over it).
struct server_options {
  node_config config;
  /// Resume the executions that start-up recovery marked `interrupted`.
  bool resume_interrupted = false;
  /// The HTTP API's TLS context (load_http_transport); null: plain HTTP.
  tls_server_context tls;
};

/// Runs the server until SIGTERM or SIGINT. Prints one line
/// `listening on HOST:PORT` to stdout (the same line with HTTPS) once the API accepts connections (port
/// 0 in the config picks a free port; the line names the real one).
/// @returns the process exit code: 0 after a clean shutdown, 2 for an
///          unusable configuration, 5 when the store cannot be opened.
int run_server(const server_options& opts);

} // namespace canopy::core
