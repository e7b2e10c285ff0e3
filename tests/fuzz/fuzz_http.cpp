// libFuzzer target: what an unauthenticated client's bytes go through in
// `canopy serve` before and after routing, with the functions callable
// outside a running server (the router and the handlers live inside
// runtime/server/server.cpp):
//   - the request line and header block, read by cpp-httplib exactly as
//     its server reads them (stream_line_reader, read_headers), the target
//     URL-decoded and its query split (decode_url, parse_query_text);
//   - the body, as the handlers parse it: parse_json_text, then by route
//     `POST /v1/graphs` → parse_graph without inline commands (the server's
//     default), `POST /v1/agents` → check_agent_name, on_busy, the agent's
//     graph and check_agent_graph.
// Input: raw request bytes (`METHOD TARGET HTTP/1.1\r\nHeaders\r\n\r\nbody`).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <httplib.h>

#include "persistence/error.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"

namespace httplib::detail {
// Defined in libcpp-httplib (the server's header reader), not declared in
// its header in the split build that Debian ships.
bool read_headers(Stream& strm, Headers& headers);
} // namespace httplib::detail

using canopy::core::json;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_http: %s\n", what);
    std::abort();
  }
}

/// The route's body handling.
void body(const std::string& path, const std::string& text) {
  auto doc = canopy::core::parse_json_text(text);
  if (!doc || !doc->is_object())
    return;
  canopy::core::parse_options opts;
  opts.allow_inline = false;
  opts.load_file = [](const std::string& p) -> caf::expected<json> {
    return canopy::core::make_error(canopy::core::persistence_errc::io_error, "no file on a fuzzed server: " + p);
  };
  if (path == "/v1/graphs") {
    auto r = canopy::core::parse_graph(*doc, "/home", opts);
    check(static_cast<bool>(r) == r.errors.empty(), "a graph both accepted and refused");
  } else if (path == "/v1/agents") {
    if (auto n = doc->find("name"); n != doc->end() && n->is_string())
      (void) canopy::core::check_agent_name(n->get<std::string>());
    if (auto b = doc->find("on_busy"); b != doc->end() && b->is_string()) {
      canopy::core::busy_policy p;
      (void) canopy::core::from_string(b->get<std::string>(), p);
    }
    if (auto g = doc->find("graph"); g != doc->end() && g->is_object())
      if (auto r = canopy::core::parse_graph(*g, "/home", opts))
        (void) canopy::core::check_agent_graph(*r.value);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::detail::BufferStream strm;
  strm.write(reinterpret_cast<const char*>(data), size);
  char buf[2048]; // httplib's own line buffer size
  httplib::detail::stream_line_reader line(strm, buf, sizeof(buf));
  if (!line.getline())
    return 0;
  std::string request_line{line.ptr(), line.size()};
  httplib::Headers headers;
  if (!httplib::detail::read_headers(strm, headers))
    return 0;
  (void) headers.count("Authorization");
  // METHOD TARGET VERSION: the target's path and query.
  auto sp1 = request_line.find(' ');
  auto sp2 = sp1 == std::string::npos ? sp1 : request_line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos)
    return 0;
  auto target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  auto q = target.find('?');
  auto path = httplib::detail::decode_url(target.substr(0, q), false);
  httplib::Params params;
  if (q != std::string::npos)
    httplib::detail::parse_query_text(target.substr(q + 1), params);
  // The rest of the input is the body.
  std::string rest;
  char chunk[4096];
  for (ssize_t n; (n = strm.read(chunk, sizeof(chunk))) > 0;)
    rest.append(chunk, static_cast<size_t>(n));
  body(path, rest);
  return 0;
}
