#pragma once

// `canopy worker --join HOST:PORT` (runtime/docs/reference/cli.md): a node
// that joins a supervisor's cluster and runs the steps placed on it. A worker
// opens no store: the supervisor owns it and every execution.
//
// Also the node document of `GET /v1/nodes` and `canopy ls --nodes`.

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/cluster.hpp"
#include "persistence/duration.hpp"

namespace canopy::core {

/// The command line of `canopy worker`.
struct worker_flags {
  std::string join;       ///< the supervisor's cluster port, HOST:PORT
  size_t slots = 4;       ///< subprocess steps run at once (`--slots`, `--max-parallel`)
  std::string tools_file; ///< empty: no tools (and no secret from a file)
  std::string name;       ///< empty: the host name
  /// Pings and CAF's middleman heartbeat (`--heartbeat`, else the tools
  /// file's `cluster.heartbeat`, else 1 s).
  std::string heartbeat;
  /// The supervisor is lost after this much silence (`--timeout`, else the
  /// tools file's `cluster.timeout`, else 5 s).
  std::string timeout;
};

/// Runs a worker until SIGTERM or SIGINT (exit 0; the steps it runs are
/// killed first). Prints `joined HOST:PORT as NAME` on stdout each time it
/// joins the supervisor; logs `event=joined|refused|lost ...` lines on stderr.
/// Keeps retrying while the supervisor is unreachable.
/// With `cluster.tls` in the tools file it connects over TLS (CAF's openssl
/// module) and presents its certificate; a supervisor whose handshake fails
/// (a certificate from another CA, or no TLS) counts as unreachable.
/// @returns the exit code: 0 after a signal; 2 for a usage error (bad
///          `--join`, an unusable tools file, no cluster secret, TLS files
///          that do not load or chain to their CA, a non-loopback `--join`
///          without TLS or `"tls": false`) or when the supervisor refused
///          the secret.
/// Threading: call from the main thread before any other thread starts (it
/// blocks SIGINT/SIGTERM/SIGUSR1 in every thread).
int run_worker(const worker_flags& flags);

/// A value of a `key=value` log line: as it is when it is one word, else
/// quoted (`"..."`, with `"` and `\` escaped, newlines as spaces).
std::string log_value(const std::string& v);

/// The host name of this machine (`--name`'s default); "worker" when it
/// cannot be read.
std::string host_name();

/// A member as `GET /v1/nodes` shows it: `{name, slots, tools, running,
/// supervisor, joined_at, last_seen}`, times in RFC 3339 (null when unknown,
/// i.e. 0).
nlohmann::json node_document(const node_info& n);

} // namespace canopy::core
