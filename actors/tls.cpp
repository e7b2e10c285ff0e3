#include "actors/tls.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace canopy::core {

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

} // namespace

std::vector<tls_problem> load_certificate_and_key(ssl_ctx_st* ctx,
                                                  const std::string& certificate,
                                                  const std::string& key) {
  std::vector<tls_problem> out;
  ERR_clear_error();
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  auto fail = [&](const char* field, const std::string& path, const std::string& what) {
    out.push_back({field, "'" + path + "': " + what});
  };
  bool cert_ok = false;
  if (auto why = unreadable(certificate); !why.empty())
    fail("certificate", certificate, "cannot read it: " + why);
  else if (SSL_CTX_use_certificate_chain_file(ctx, certificate.c_str()) != 1)
    fail("certificate", certificate, "not a PEM certificate: " + ssl_errors());
  else
    cert_ok = true;
  // The key alone first (a context without a certificate), then with it:
  // OpenSSL refuses a key that does not match the loaded certificate.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> key_ctx{SSL_CTX_new(TLS_method()),
                                                            &SSL_CTX_free};
  if (key_ctx)
    SSL_CTX_set_default_passwd_cb(key_ctx.get(), no_passphrase);
  if (auto why = unreadable(key); !why.empty())
    fail("key", key, "cannot read it: " + why);
  else if (!key_ctx
           || SSL_CTX_use_PrivateKey_file(key_ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1)
    fail("key", key, "not an unencrypted PEM private key: " + ssl_errors());
  else if (cert_ok
           && (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1
               || SSL_CTX_check_private_key(ctx) != 1))
    fail("key", key, "does not match the certificate '" + certificate + "': " + ssl_errors());
  ERR_clear_error();
  return out;
}

std::vector<tls_problem> check_tls_files(const tls_files& files) {
  std::vector<tls_problem> out;
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{SSL_CTX_new(TLS_method()),
                                                        &SSL_CTX_free};
  if (!ctx) {
    out.push_back({"certificate", "cannot create an OpenSSL context: " + ssl_errors()});
    return out;
  }
  auto fail = [&](const char* field, const std::string& path, const std::string& what) {
    out.push_back({field, "'" + path + "': " + what});
  };
  out = load_certificate_and_key(ctx.get(), files.certificate, files.key);
  bool cert_ok = std::none_of(out.begin(), out.end(),
                              [](const tls_problem& p) { return p.field == "certificate"; });
  bool ca_ok = false;
  if (auto why = unreadable(files.ca); !why.empty())
    fail("ca", files.ca, "cannot read it: " + why);
  else if (SSL_CTX_load_verify_locations(ctx.get(), files.ca.c_str(), nullptr) != 1)
    fail("ca", files.ca, "not a PEM CA certificate: " + ssl_errors());
  else
    ca_ok = true;
  if (cert_ok && ca_ok) {
    // The certificate must chain to the CA: the peers check it against theirs.
    STACK_OF(X509)* chain = nullptr;
    SSL_CTX_get0_chain_certs(ctx.get(), &chain);
    std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> vctx{
      X509_STORE_CTX_new(), &X509_STORE_CTX_free};
    if (!vctx
        || X509_STORE_CTX_init(vctx.get(), SSL_CTX_get_cert_store(ctx.get()),
                               SSL_CTX_get0_certificate(ctx.get()), chain)
             != 1)
      fail("certificate", files.certificate, "cannot verify it: " + ssl_errors());
    else if (X509_verify_cert(vctx.get()) != 1)
      fail("certificate", files.certificate,
           std::string{"not signed by the CA in '"} + files.ca + "': "
             + X509_verify_cert_error_string(X509_STORE_CTX_get_error(vctx.get())));
  }
  ERR_clear_error();
  return out;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost")
    return true;
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1)
    return buf[0] == 127;
  if (inet_pton(AF_INET6, host.c_str(), buf) == 1) {
    static const unsigned char loopback6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::memcmp(buf, loopback6, 16) == 0;
  }
  return false;
}

} // namespace canopy::core

// -- OpenSSL's error queue under CAF's openssl module ---------------------------------
//
// CAF 0.17's `caf::openssl::session` (libcaf_openssl, session.cpp) never drains
// OpenSSL's per-thread error queue after a failed call: `handle_ssl_result`
// returns false on SSL_ERROR_SSL and leaves the queue as it is ("TODO: Log
// somehow?"). Every session of a node runs on the one multiplexer thread, so
// after one failed handshake (a worker whose certificate another CA signed, a
// plain-TCP client, a port scanner) the next SSL_read of a healthy connection
// that only has to wait for data (-1, "want read") is classified by
// SSL_get_error as SSL_ERROR_SSL from the stale entries, and CAF closes that
// connection: a joined worker was dropped ("connection closed
// (remote_link_unreachable)") a few milliseconds after a refused one tried.
// OpenSSL requires the queue to be empty before each TLS I/O call
// (SSL_get_error(3)); these definitions make it so for every caller in the
// process, CAF included: they are found before libssl's (the executable's
// symbols come first), clear the calling thread's queue and call libssl's.
// Any program that links canopy's actors library gets them; for a caller that
// already clears the queue they change nothing. The layers are built with
// hidden visibility, so these are marked visible: a hidden definition would
// not be found by libcaf_openssl. libcanopy.so does not export them (it
// exports its API alone, and it has no cluster port).

namespace {

template <class F>
F next_definition(const char* name) {
  auto f = reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
  if (f == nullptr) {
    std::fprintf(stderr, "canopy: libssl has no %s\n", name);
    std::abort();
  }
  return f;
}

} // namespace

#pragma GCC visibility push(default)
extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto next = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return next(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto next = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return next(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static auto next = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return next(ssl);
}

int SSL_connect(SSL* ssl) {
  static auto next = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return next(ssl);
}

} // extern "C"
#pragma GCC visibility pop
