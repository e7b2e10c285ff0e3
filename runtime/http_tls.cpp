#include "runtime/http_tls.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "actors/tls.hpp"

namespace canopy {

namespace {

/// OpenSSL's queued errors as one line (and the queue emptied).
std::string ssl_errors() {
  std::string out;
  while (auto code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

/// Empty when `path` can be opened for reading, else why not.
std::string unreadable(const std::string& path) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return std::strerror(errno != 0 ? errno : EIO);
  std::fclose(f);
  return {};
}

/// An encrypted key must fail to load instead of prompting on a terminal.
int no_passphrase(char*, int, int, void*) {
  return 0;
}

/// The server context for the two files, or the errors.
http_transport load_context(const std::string& cert, const std::string& key) {
  http_transport out;
  auto fail = [&](const char* path, const std::string& file, const std::string& what) {
    out.errors.push_back(graph_error{path, "'" + file + "': " + what, {}});
  };
  ERR_clear_error();
  tls_server_context ctx{SSL_CTX_new(TLS_server_method()), &SSL_CTX_free};
  if (!ctx) {
    out.errors.push_back({"/tls_cert", "cannot create an OpenSSL context: " + ssl_errors(), {}});
    return out;
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_default_passwd_cb(ctx.get(), no_passphrase);
  bool cert_ok = false;
  if (auto why = unreadable(cert); !why.empty())
    fail("/tls_cert", cert, "cannot read it: " + why);
  else if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    fail("/tls_cert", cert, "not a PEM certificate: " + ssl_errors());
  else
    cert_ok = true;
  if (auto why = unreadable(key); !why.empty())
    fail("/tls_key", key, "cannot read it: " + why);
  else if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1)
    fail("/tls_key", key,
         (cert_ok ? "not an unencrypted PEM key, or it does not match the certificate: "
                  : "not an unencrypted PEM key: ")
           + ssl_errors());
  else if (cert_ok && SSL_CTX_check_private_key(ctx.get()) != 1)
    fail("/tls_key", key, "does not match the certificate: " + ssl_errors());
  ERR_clear_error();
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
      "\"tls_key\": FILE in " + file + " (see README, The server), or \"insecure_http\": true "
      "to accept plain HTTP",
    {}});
  return out;
}

} // namespace canopy
