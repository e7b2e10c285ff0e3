// The HTTP client's core: server addresses, the server's answers and errors,
// and one request over HTTP or HTTPS with the token.

#include "runtime/client/client.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>

#include <caf/make_message.hpp>
#include <caf/sec.hpp>
#include <httplib.h>

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "runtime/node/error.hpp"
#include "runtime/client/client_detail.hpp"

namespace canopy::core {

using namespace client_detail;

// -- server addresses --------------------------------------------------------------

std::string server_url::text() const {
  auto h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (tls ? "https://" : "http://") + h + ":" + std::to_string(port);
}

caf::expected<server_url> parse_server_url(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return make_error(runtime_errc::invalid_input,
                      "--server '" + text + "': " + why
                        + " (expected http://HOST:PORT or https://HOST:PORT)");
  };
  auto sep = text.find("://");
  if (sep == std::string::npos)
    return bad("not a URL");
  auto scheme = text.substr(0, sep);
  for (auto& ch : scheme)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (scheme != "http" && scheme != "https")
    return bad("unsupported scheme '" + scheme + "', only http and https are supported");
  auto rest = text.substr(sep + 3);
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    if (rest.substr(slash) != "/")
      return bad("a path is not allowed");
    rest.resize(slash);
  }
  if (rest.find_first_of("?#@ ") != std::string::npos)
    return bad("a query, fragment, user or space is not allowed");
  server_url out;
  out.tls = scheme == "https";
  out.port = out.tls ? 443 : 80;
  std::string port;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos)
      return bad("unclosed '['");
    out.host = rest.substr(1, close - 1);
    auto after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return bad("unexpected text after ']'");
      port = after.substr(1);
      if (port.empty())
        return bad("empty port");
    }
  } else {
    auto colon = rest.find(':');
    out.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port = rest.substr(colon + 1);
      if (port.empty())
        return bad("empty port");
    }
  }
  if (out.host.empty())
    return bad("no host");
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
      return bad("bad port '" + port + "'");
    out.port = std::stoi(port);
    if (out.port < 1 || out.port > 65535)
      return bad("port " + port + " is out of range 1..65535");
  }
  return out;
}

std::string url_encode(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// -- answers of the server -----------------------------------------------------------

caf::error error_of_answer(int status, const std::string& body) {
  std::string message, path, code;
  auto doc = parse_answer(body);
  if (!doc.is_discarded() && doc.is_object() && doc.contains("error")) {
    auto& e = doc["error"];
    message = text_of(e, "message");
    path = text_of(e, "path");
    code = text_of(e, "code");
  }
  if (message.empty())
    message = code.empty() ? "HTTP " + std::to_string(status) : code;
  // A graph's errors come as `PATH: message; ...` with the first path as
  // `path`: it is not said twice.
  auto located = path.empty() || message.rfind(path + ": ", 0) == 0 ? message
                                                                     : path + ": " + message;
  switch (status) {
    case 401:
      return make_error(runtime_errc::invalid_input,
                        "unauthorized: check --token or $CANOPY_TOKEN");
    case 404:
      return make_error(persistence_errc::not_found, message);
    case 400:
    case 409:
    case 413:
      return make_error(runtime_errc::invalid_input, located);
    case 503:
      return make_error(persistence_errc::store_error, "server unavailable: " + message);
    default:
      return unexpected("server answered " + std::to_string(status) + ": " + located);
  }
}

int64_t ms_of_rfc3339(const json& time) {
  if (!time.is_string())
    return 0;
  auto s = time.get<std::string>();
  std::tm tm{};
  int ms = 0;
  int n = std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%3dZ", &tm.tm_year, &tm.tm_mon,
                      &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms);
  if (n != 6 && n != 7)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + (n == 7 ? ms : 0);
}

execution_record execution_of(const json& doc) {
  execution_record r;
  if (!doc.is_object())
    return r;
  r.id = text_of(doc, "id");
  r.graph = text_of(doc, "graph");
  if (!from_string(text_of(doc, "status"), r.status))
    r.status = execution_status::queued;
  from_string(text_of(doc, "reason"), r.reason);
  r.error = text_of(doc, "error");
  r.parent_id = text_of(doc, "parent_id");
  r.root_id = text_of(doc, "root_id");
  if (auto i = doc.find("depth"); i != doc.end() && i->is_number_integer())
    r.depth = i->get<int>();
  r.parent_step = text_of(doc, "parent_step");
  if (auto i = doc.find("iteration"); i != doc.end() && i->is_number_integer())
    r.iteration = i->get<int>();
  if (auto i = doc.find("inputs"); i != doc.end() && i->is_object())
    r.inputs = *i;
  if (auto i = doc.find("outputs"); i != doc.end())
    r.outputs = *i;
  r.created_at = ms_of_rfc3339(doc.value("created_at", json()));
  r.started_at = ms_of_rfc3339(doc.value("started_at", json()));
  r.ended_at = ms_of_rfc3339(doc.value("ended_at", json()));
  return r;
}

event_record event_of(const json& doc) {
  event_record e;
  if (!doc.is_object())
    return e;
  if (auto i = doc.find("seq"); i != doc.end() && i->is_number_unsigned())
    e.seq = i->get<uint64_t>();
  e.time = ms_of_rfc3339(doc.value("time", json()));
  from_string(text_of(doc, "type"), e.type);
  e.execution_id = text_of(doc, "execution_id");
  e.root_id = text_of(doc, "root_id");
  e.parent_id = text_of(doc, "parent_id");
  e.step = text_of(doc, "step");
  from_string(text_of(doc, "status"), !e.step.empty(), e.status);
  from_string(text_of(doc, "reason"), e.reason);
  if (auto i = doc.find("data"); i != doc.end())
    e.data = *i;
  return e;
}

// -- the client ---------------------------------------------------------------------------

api_client::api_client(client_options opts) : opts_(std::move(opts)) {
}

caf::error api_client::unreachable(const std::string& why) const {
  return make_error(persistence_errc::io_error,
                    "cannot reach the server at " + opts_.server.text() + ": " + why);
}

caf::expected<api_answer> api_client::finish(int status, const std::string& body) const {
  if (status < 200 || status >= 300)
    return error_of_answer(status, body);
  api_answer out;
  out.status = status;
  if (body.empty())
    return out;
  out.body = parse_answer(body);
  if (out.body.is_discarded())
    return unexpected("the server at " + opts_.server.text() + " answered " + std::to_string(status)
                      + " with a body that is not JSON");
  return out;
}

caf::expected<std::pair<int, std::string>>
api_client::exchange(const std::string& method, const std::string& target, const json* body,
                     millis extra_wait, const std::string& key) const {
  auto c = connect(opts_);
  set_socket_options(c, opts_.connect_timeout, opts_.read_timeout + extra_wait);
  httplib::Headers h = {{"Authorization", "Bearer " + opts_.token},
                        {"Accept", "application/json"}};
  if (!key.empty())
    h.emplace("Idempotency-Key", key);
  auto res = method == "GET" ? c.Get(target, h)
                             : c.Post(target, h, body ? body->dump() : std::string{"{}"},
                                      "application/json");
  if (!res)
    return unreachable(describe(res.error()));
  return std::make_pair(res->status, res->body);
}

caf::expected<api_answer> api_client::get(const std::string& target) const {
  auto a = exchange("GET", target, nullptr, millis{0});
  if (!a)
    return a.error();
  return finish(a->first, a->second);
}

caf::expected<api_answer> api_client::post(const std::string& target, const json& body,
                                           millis extra_wait) const {
  auto a = exchange("POST", target, &body, extra_wait);
  if (!a)
    return a.error();
  return finish(a->first, a->second);
}

} // namespace canopy::core
