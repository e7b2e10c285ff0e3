#pragma once

// The cluster transport a node may start with: TLS
// files that load, and no cleartext cluster traffic off the loopback
// interface unless the configuration says so (`"tls": false`).

#include <optional>
#include <string>
#include <vector>

#include "persistence/graph.hpp"
#include "runtime/node/config.hpp"

namespace canopy::core {

/// Checks the transport of a cluster endpoint on `host` (the supervisor's
/// cluster port, or the address a worker joins) before anything starts:
/// - with `cluster.tls`, each file loads and the certificate chains to the
///   CA (check_tls_files); errors at `/cluster/tls/certificate|key|ca`;
/// - without it, a `host` that is not loopback is an error at `/cluster/tls`
///   unless `cluster.tls` is `false`.
/// `endpoint` names the address in the message (e.g. "the cluster port
/// 10.0.0.1:4242"), `file` the file the keys go in (e.g. "the file of
/// --config FILE"). @returns the errors (empty: start). Thread-safe.
std::vector<graph_error> check_cluster_transport(const std::optional<cluster_config>& cluster,
                                                 const std::string& host,
                                                 const std::string& endpoint,
                                                 const std::string& file);

} // namespace canopy::core
