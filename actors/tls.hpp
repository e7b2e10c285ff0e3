#pragma once

// TLS on the cluster port: the PEM files of a node's
// `cluster.tls`, their check at start, and which hosts count as loopback.
// Plain data and libssl only: no CAF here (actors/cluster.cpp hands the files
// to CAF's openssl module).

#include <string>
#include <vector>

struct ssl_ctx_st; // OpenSSL's SSL_CTX

namespace canopy::core {

/// The PEM files of a node's `cluster.tls`. With them the cluster port runs
/// over CAF's openssl module, and each side of a connection verifies the
/// other's certificate against `ca` (mutual authentication, before the
/// cluster secret is sent). There is no host name check: every certificate
/// the CA signed is a member's, so the CA should be the cluster's own.
struct tls_files {
  std::string certificate; ///< this node's certificate (chain)
  std::string key;         ///< its private key (unencrypted)
  std::string ca;          ///< the CA certificate(s) a peer's certificate must chain to
};

/// A problem with one of the files.
struct tls_problem {
  std::string field;   ///< `certificate`, `key` or `ca`
  std::string message; ///< names the file and OpenSSL's reason
};

/// Loads `certificate` (a PEM chain) and `key` (an unencrypted PEM key) into
/// `ctx` and checks that they match (a context made by the caller, e.g. the
/// HTTP API's). @returns the problems, field `certificate` or `key`, each
/// naming the file and OpenSSL's reason; empty when both loaded. Thread-safe
/// for distinct contexts.
std::vector<tls_problem> load_certificate_and_key(ssl_ctx_st* ctx,
                                                  const std::string& certificate,
                                                  const std::string& key);

/// Loads the files as CAF's openssl module will on every connection (where
/// a failure aborts the process): the certificate chain; the key, and that
/// it matches the certificate; the CA file; and that the certificate chains
/// to that CA (peers holding the same CA would refuse it otherwise).
/// @returns the problems, empty when the files are usable. Thread-safe.
std::vector<tls_problem> check_tls_files(const tls_files& files);

/// True when `host` is a loopback address: `localhost`, 127.0.0.0/8 or
/// `::1`. A wildcard (`0.0.0.0`, `::`) or any other name is not.
bool is_loopback_host(const std::string& host);

} // namespace canopy::core
