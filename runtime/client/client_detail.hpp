#pragma once

// Helpers shared by the HTTP client's source files (client.cpp,
// client_executions.cpp, client_agents.cpp, client_events.cpp). Internal: not installed.

#include <ctime>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <httplib.h>

#include "persistence/json_text.hpp"
#include "runtime/client/client.hpp"

namespace canopy::core::client_detail {

/// Parses a server's answer as strict JSON (`parse_json_text`).
/// @returns the document, or a discarded value when it is not one.
inline json parse_answer(std::string_view text) {
  auto doc = parse_json_text(text);
  return doc ? std::move(*doc) : json(json::value_t::discarded);
}

/// `s[key]` when it is a string, else "".
inline std::string text_of(const json& doc, const char* key) {
  if (!doc.is_object())
    return {};
  auto i = doc.find(key);
  return i != doc.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

inline caf::error unexpected(std::string message) {
  return caf::make_error(caf::sec::unexpected_response, std::move(message));
}

/// What went wrong with a request that got no answer, in words.
inline std::string describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "cannot connect";
    case httplib::Error::ConnectionTimeout: return "connection timed out";
    case httplib::Error::Read: return "the connection dropped or timed out while reading";
    case httplib::Error::Write: return "the connection dropped while sending";
    case httplib::Error::SSLConnection: return "the TLS handshake failed (is it an HTTPS server?)";
    case httplib::Error::SSLServerVerification:
      return "the server's certificate did not verify (pass the CA that signed it with "
             "--cacert FILE)";
    default: return httplib::to_string(e);
  }
}

/// A client of the server of `opts`; over HTTPS it verifies the server's
/// certificate (against `ca_file` when given) and host name.
inline httplib::Client connect(const client_options& opts) {
  httplib::Client c{opts.server.text()};
  if (opts.server.tls) {
    c.enable_server_certificate_verification(true);
    if (!opts.ca_file.empty())
      c.set_ca_cert_path(opts.ca_file);
  }
  return c;
}

/// Timeouts of `c`, and TCP_NODELAY.
inline void set_socket_options(httplib::Client& c, millis connect, millis read) {
  auto split = [](millis d, time_t& s, time_t& us) {
    s = static_cast<time_t>(d.count() / 1000);
    us = static_cast<time_t>((d.count() % 1000) * 1000);
  };
  time_t s, us;
  split(connect, s, us);
  c.set_connection_timeout(s, us);
  split(read, s, us);
  c.set_read_timeout(s, us);
  c.set_write_timeout(s, us);
  // A POST's head and body are two writes: Nagle would hold the body until
  // the server's delayed ACK.
  c.set_tcp_nodelay(true);
}

} // namespace canopy::core::client_detail
