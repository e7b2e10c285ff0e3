#include "runtime/server/http_tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "actors/tls.hpp"

namespace canopy::core {

namespace {

/// The server context for the two files, or the errors (at `/tls_cert`,
/// `/tls_key`).
http_transport load_context(const std::string& cert, const std::string& key) {
  http_transport out;
  ERR_clear_error();
  tls_server_context ctx{SSL_CTX_new(TLS_server_method()), &SSL_CTX_free};
  if (!ctx) {
    out.errors.push_back({"/tls_cert", "cannot create an OpenSSL context", {}});
    return out;
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION);
  for (auto& p : load_certificate_and_key(ctx.get(), cert, key))
    out.errors.push_back(
      graph_error{p.field == "certificate" ? "/tls_cert" : "/tls_key", p.message, {}});
  if (out.errors.empty())
    out.tls = std::move(ctx);
  return out;
}

} // namespace

http_transport load_http_transport(const node_config& cfg, const std::string& host,
                                   const std::string& file) {
  if (!cfg.tls_cert.empty() && !cfg.tls_key.empty())
    return load_context(cfg.tls_cert, cfg.tls_key);
  http_transport out;
  if (is_loopback_host(host) || cfg.insecure_http)
    return out;
  // Secure by default: every request's bearer token would cross the
  // network in clear.
  out.errors.push_back(graph_error{
    "/listen",
    "the HTTP API on " + cfg.listen + " is not on a loopback address, and without TLS every "
      "request's bearer token crosses the network in clear: put \"tls_cert\": FILE and "
      "\"tls_key\": FILE in " + file + " (see runtime/docs/guide/server.md), or \"insecure_http\": true "
      "to accept plain HTTP",
    {}});
  return out;
}

} // namespace canopy::core
