#pragma once

// HTTPS for the HTTP API: the server's TLS context, made from
// the config's `tls_cert` and `tls_key`, and the rule that bearer tokens
// never cross the network in clear: plain HTTP only on a loopback `listen`
// address, unless the config says `"insecure_http": true`.

#include <memory>
#include <string>
#include <vector>

#include "persistence/graph.hpp"
#include "runtime/node/config.hpp"

struct ssl_ctx_st; // OpenSSL's SSL_CTX

namespace canopy::core {

/// An OpenSSL server context (TLS 1.2 or later, the certificate chain and
/// key loaded), shared by every connection of the listener. Null: plain HTTP.
using tls_server_context = std::shared_ptr<ssl_ctx_st>;

/// What the HTTP API listens with.
struct http_transport {
  tls_server_context tls;          ///< null: plain HTTP
  std::vector<graph_error> errors; ///< empty: usable
};

/// Decides the HTTP API's transport for `cfg` on the `listen` host `host`:
/// - with `tls_cert` and `tls_key`, loads them (errors at `/tls_cert`,
///   `/tls_key`: unreadable, not PEM, a key that does not match);
/// - without them, a `host` that is not loopback is an error at `/listen`
///   unless `insecure_http` is set.
/// `file` names where the keys go in messages. Thread-safe.
http_transport load_http_transport(const node_config& cfg, const std::string& host,
                                   const std::string& file);

} // namespace canopy::core
