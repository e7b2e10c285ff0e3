#include "tests/integration/test_certs.hpp"

#include <chrono>
#include <stdexcept>
#include <vector>

namespace canopy::core::test {

namespace {

/// Runs `openssl ARGS...`; throws when it fails.
void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::seconds{60});
  if (r.exit_code != 0)
    throw std::runtime_error("openssl " + args.at(0) + " exited " + std::to_string(r.exit_code)
                             + " (is the openssl package installed?): " + r.err);
}

} // namespace

test_ca make_ca(const temp_dir& dir, const std::string& name) {
  test_ca ca{dir.path + "/" + name + ".pem", dir.path + "/" + name + ".key"};
  openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-keyout", ca.key, "-out", ca.cert, "-days", "2", "-subj", "/CN=" + name});
  return ca;
}

tls_files issue_cert(const temp_dir& dir, const test_ca& ca, const std::string& node,
                     const std::string& ca_file) {
  tls_files t{dir.path + "/" + node + ".pem", dir.path + "/" + node + ".key",
              ca_file.empty() ? ca.cert : ca_file};
  auto csr = dir.path + "/" + node + ".csr";
  openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-keyout", t.key, "-out", csr, "-subj", "/CN=" + node});
  openssl({"x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
           "-out", t.certificate, "-days", "2"});
  return t;
}

tls_files make_self_signed(const temp_dir& dir, const std::string& name) {
  tls_files t{dir.path + "/" + name + ".pem", dir.path + "/" + name + ".key", {}};
  t.ca = t.certificate;
  openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-keyout", t.key, "-out", t.certificate, "-days", "2", "-subj", "/CN=" + name,
           "-addext", "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"});
  return t;
}

json tls_json(const tls_files& t) {
  return {{"certificate", t.certificate}, {"key", t.key}, {"ca", t.ca}};
}

} // namespace canopy::core::test
