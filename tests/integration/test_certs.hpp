#pragma once

// Certificates for cluster TLS tests, made at test time with the `openssl`
// command: a CA, and node certificates it signs (EC P-256, valid 2 days).
// Nothing here uses Catch: a failing `openssl` throws std::runtime_error
// with its stderr.

#include <string>

#include <nlohmann/json.hpp>

#include "actors/tls.hpp"
#include "tests/integration/helpers.hpp"

namespace canopy::core::test {

/// A CA: its certificate and key.
struct test_ca {
  std::string cert;
  std::string key;
};

/// Makes a CA named `name` (files `NAME.pem`, `NAME.key`) in `dir`.
test_ca make_ca(const temp_dir& dir, const std::string& name);

/// Makes a key and a certificate for `node` (`NODE.key`, `NODE.pem` in
/// `dir`) signed by `ca`. @returns them with `ca_file` as the CA the node
/// trusts (default: `ca`'s certificate).
tls_files issue_cert(const temp_dir& dir, const test_ca& ca, const std::string& node,
                     const std::string& ca_file = {});

/// Makes a self-signed certificate and its key for `name` (`NAME.pem`,
/// `NAME.key` in `dir`) valid for 127.0.0.1, ::1 and localhost, as an
/// HTTPS server's. @returns them, with `ca` the certificate itself.
tls_files make_self_signed(const temp_dir& dir, const std::string& name);

/// The `cluster.tls` object of a config or tools file.
json tls_json(const tls_files& t);

} // namespace canopy::core::test
