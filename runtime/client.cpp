#include "runtime/client.hpp"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include <caf/make_message.hpp>
#include <caf/sec.hpp>
#include <httplib.h>

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "runtime/error.hpp"

namespace canopy {

namespace {

/// Parses a server's answer as strict JSON (`parse_json_text`).
/// @returns the document, or a discarded value when it is not one.
json parse_answer(std::string_view text) {
  auto doc = parse_json_text(text);
  return doc ? std::move(*doc) : json(json::value_t::discarded);
}

using json = nlohmann::json;

/// Pause before the n-th reconnect of a dropped stream: 100 ms doubling up
/// to 2 s, so a restarting server is not hammered.
millis reconnect_delay(int n) {
  int64_t ms = 100;
  for (int i = 1; i < n && ms < 2000; ++i)
    ms *= 2;
  return millis{std::min<int64_t>(ms, 2000)};
}

/// `s[key]` when it is a string, else "".
std::string text_of(const json& doc, const char* key) {
  if (!doc.is_object())
    return {};
  auto i = doc.find(key);
  return i != doc.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

caf::error unexpected(std::string message) {
  return caf::make_error(caf::sec::unexpected_response, std::move(message));
}

bool is_terminal_event(const std::string& type) {
  return type == "execution.completed" || type == "execution.failed"
         || type == "execution.stopped";
}

/// What went wrong with a request that got no answer, in words.
std::string describe(httplib::Error e) {
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
httplib::Client connect(const client_options& opts) {
  httplib::Client c{opts.server.text()};
  if (opts.server.tls) {
    c.enable_server_certificate_verification(true);
    if (!opts.ca_file.empty())
      c.set_ca_cert_path(opts.ca_file);
  }
  return c;
}

/// Timeouts of `c`, and TCP_NODELAY.
void set_socket_options(httplib::Client& c, millis connect, millis read) {
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

} // namespace

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
  r.reason = text_of(doc, "reason");
  r.error = text_of(doc, "error");
  r.parent_id = text_of(doc, "parent_id");
  r.root_id = text_of(doc, "root_id");
  if (auto i = doc.find("depth"); i != doc.end() && i->is_number_integer())
    r.depth = i->get<int>();
  r.parent_step = text_of(doc, "parent_step");
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
  e.type = text_of(doc, "type");
  e.execution_id = text_of(doc, "execution_id");
  e.root_id = text_of(doc, "root_id");
  e.parent_id = text_of(doc, "parent_id");
  e.step = text_of(doc, "step");
  e.status = text_of(doc, "status");
  e.reason = text_of(doc, "reason");
  if (auto i = doc.find("data"); i != doc.end())
    e.data = *i;
  return e;
}

// -- server-sent events ------------------------------------------------------------------

bool sse_parser::feed(const char* data, size_t n, const handler& f) {
  for (size_t i = 0; i < n; ++i) {
    char c = data[i];
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n')
        continue; // the LF of a CRLF
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      auto text = std::move(partial_);
      partial_.clear();
      if (!line(text, f))
        return false;
      continue;
    }
    partial_ += c;
  }
  return true;
}

bool sse_parser::line(const std::string& text, const handler& f) {
  if (text.empty()) {
    // A blank line dispatches the message, if it has data.
    bool go = true;
    if (has_data_)
      go = f(current_);
    current_ = sse_message{};
    has_data_ = false;
    return go;
  }
  if (text.front() == ':') {
    ++comments_;
    return true;
  }
  auto colon = text.find(':');
  auto field = text.substr(0, colon);
  std::string value;
  if (colon != std::string::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ')
      value.erase(0, 1);
  }
  if (field == "data") {
    if (has_data_)
      current_.data += '\n';
    current_.data += value;
    has_data_ = true;
  } else if (field == "id") {
    current_.id = value;
  } else if (field == "event") {
    current_.event = value;
  } // `retry` and unknown fields are ignored
  return true;
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
                     millis extra_wait) const {
  auto c = connect(opts_);
  set_socket_options(c, opts_.connect_timeout, opts_.read_timeout + extra_wait);
  httplib::Headers h = {{"Authorization", "Bearer " + opts_.token},
                        {"Accept", "application/json"}};
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

caf::expected<json> api_client::tree(const std::string& id) const {
  auto a = get("/v1/executions/" + url_encode(id) + "/tree");
  if (!a)
    return a.error();
  if (!a->body.is_object())
    return unexpected("the tree of " + id + " is not a JSON object");
  return std::move(a->body);
}

caf::expected<std::vector<json>> api_client::executions(const std::string& status,
                                                        bool all) const {
  std::vector<json> out;
  std::string cursor;
  for (;;) {
    std::string target = "/v1/executions";
    std::string sep = "?";
    if (all) {
      target += "?all=true";
      sep = "&";
    }
    if (!status.empty()) {
      target += sep + "status=" + url_encode(status);
      sep = "&";
    }
    if (!cursor.empty())
      target += sep + "cursor=" + url_encode(cursor);
    auto a = get(target);
    if (!a)
      return a.error();
    auto& body = a->body;
    if (!body.is_object() || !body.contains("items") || !body["items"].is_array())
      return unexpected("the listing is not {\"items\": [...], \"next\": ...}");
    for (auto& item : body["items"])
      out.push_back(std::move(item));
    auto next = body.value("next", json());
    if (!next.is_string() || next.get<std::string>().empty())
      return out;
    if (next.get<std::string>() == cursor)
      return unexpected("the listing's cursor does not advance");
    cursor = next.get<std::string>();
  }
}

caf::expected<stop_answer> api_client::stop(const std::string& id, bool force,
                                            double wait_s) const {
  json body = {{"mode", force ? "force" : "graceful"}, {"wait", wait_s}};
  auto a = post("/v1/executions/" + url_encode(id) + "/stop", body,
                millis{static_cast<int64_t>(wait_s * 1000)});
  if (!a)
    return a.error();
  // The execution document, with the stop's outcome under `stop`.
  stop_answer out;
  if (a->body.is_object()) {
    if (auto i = a->body.find("stop"); i != a->body.end())
      out.result = text_of(*i, "result");
    out.execution = a->body;
    out.execution.erase("stop");
  }
  if (a->status == 202 && out.result.empty())
    out.result = "stopping";
  if (out.result != "stopped" && out.result != "no_execution" && out.result != "stopping")
    return unexpected("the stop answer has no known result: " + a->body.dump());
  return out;
}

caf::expected<std::vector<json>> api_client::events(const std::string& id) const {
  std::vector<json> out;
  std::string cursor;
  for (;;) {
    auto target = "/v1/executions/" + url_encode(id) + "/events";
    if (!cursor.empty())
      target += "?cursor=" + url_encode(cursor);
    auto a = get(target);
    if (!a)
      return a.error();
    auto& body = a->body;
    if (!body.is_object() || !body.contains("items") || !body["items"].is_array())
      return unexpected("the event log is not {\"items\": [...]}");
    for (auto& item : body["items"])
      out.push_back(std::move(item));
    auto next = body.value("next", json());
    if (!next.is_string() || next.get<std::string>().empty() || next.get<std::string>() == cursor)
      return out;
    cursor = next.get<std::string>();
  }
}

// -- agents ------------------------------------------------------------------------------

caf::expected<api_answer> api_client::create_agent(const std::string& name, const json& graph,
                                                   const std::string& on_busy,
                                                   const std::string& node) const {
  json body = {{"name", name}, {"graph", graph}};
  if (!on_busy.empty())
    body["on_busy"] = on_busy;
  if (!node.empty())
    body["node"] = node;
  auto a = post("/v1/agents", body);
  if (!a)
    return a.error();
  if (!a->body.is_object())
    return unexpected("the agent answer is not a JSON object");
  return a;
}

caf::expected<std::vector<json>> api_client::all_items(const std::string& path,
                                                      const std::string& what) const {
  std::vector<json> out;
  std::string cursor;
  for (;;) {
    std::string target = path;
    if (!cursor.empty())
      target += "?cursor=" + url_encode(cursor);
    auto a = get(target);
    if (!a)
      return a.error();
    auto& body = a->body;
    if (!body.is_object() || !body.contains("items") || !body["items"].is_array())
      return unexpected("the " + what + " listing is not {\"items\": [...], \"next\": ...}");
    for (auto& item : body["items"])
      out.push_back(std::move(item));
    auto next = body.value("next", json());
    if (!next.is_string() || next.get<std::string>().empty())
      return out;
    if (next.get<std::string>() == cursor)
      return unexpected("the " + what + " listing's cursor does not advance");
    cursor = next.get<std::string>();
  }
}

caf::expected<json> api_client::register_graph(const json& doc) const {
  auto a = exchange("POST", "/v1/graphs", &doc, millis{0});
  if (!a)
    return a.error();
  auto [status, text] = std::move(*a);
  if (status == 400 || status == 409 || status == 413)
    return make_error(runtime_errc::invalid_input,
                      "the server refused graph '" + doc.value("name", std::string{}) + "': "
                        + message_of(error_of_answer(status, text)));
  auto answer = finish(status, text);
  if (!answer)
    return answer.error();
  if (!answer->body.is_object() || !answer->body.contains("id")
      || !answer->body["id"].is_string())
    return unexpected("the answer to a graph's registration is not {\"id\", \"version\"}");
  return std::move(answer->body);
}

caf::expected<std::vector<json>> api_client::graphs() const {
  return all_items("/v1/graphs", "graph");
}

caf::expected<std::vector<json>> api_client::agents() const {
  return all_items("/v1/agents", "agent");
}

caf::expected<std::vector<json>> api_client::nodes() const {
  return all_items("/v1/nodes", "node");
}

caf::expected<json> api_client::agent(const std::string& name) const {
  auto a = get("/v1/agents/" + url_encode(name));
  if (!a)
    return a.error();
  if (!a->body.is_object())
    return unexpected("the agent " + name + " is not a JSON object");
  return std::move(a->body);
}

caf::expected<agent_message_answer>
api_client::send_agent_message(const std::string& name, const json& message) const {
  json body = {{"message", message}};
  // The answer comes when the agent's run ended, however long it takes; a
  // server that goes away drops the connection, which ends the wait.
  constexpr millis a_week{7LL * 24 * 3600 * 1000};
  auto a = exchange("POST", "/v1/agents/" + url_encode(name) + "/messages", &body, a_week);
  if (!a)
    return a.error();
  auto [status, text] = *a;
  agent_message_answer out;
  if (status == 409) {
    auto doc = parse_answer(text);
    auto e = !doc.is_discarded() && doc.is_object() ? doc.value("error", json()) : json();
    auto code = text_of(e, "code");
    if (code != "busy" && code != "cancelled")
      return error_of_answer(status, text);
    out.status = code;
    out.error = text_of(e, "message");
    return out;
  }
  auto fin = finish(status, text);
  if (!fin)
    return fin.error();
  auto& doc = fin->body;
  if (!doc.is_object())
    return unexpected("the answer to a message is not a JSON object");
  out.status = text_of(doc, "status");
  if (out.status.empty())
    out.status = "completed"; // a server that only sends {reply, execution_id}
  out.reply = doc.value("reply", json());
  out.execution_id = text_of(doc, "execution_id");
  out.reason = text_of(doc, "reason");
  out.error = text_of(doc, "error");
  return out;
}

caf::expected<std::string> api_client::cancel_agent(const std::string& name,
                                                    millis wait) const {
  json body = json::object();
  millis extra = wait;
  auto a = post("/v1/agents/" + url_encode(name) + "/cancel", body, extra);
  if (!a)
    return a.error();
  auto result = text_of(a->body, "result");
  if (result != "cancelled" && result != "no_execution")
    return unexpected("the cancel answer has no known result: " + a->body.dump());
  return result;
}

caf::error api_client::stream_events(const std::string& id, uint64_t after,
                                     const std::function<bool(const json&)>& f) const {
  auto target = "/v1/executions/" + url_encode(id) + "/events";
  uint64_t last = after;
  bool connected_once = false;
  int failures = 0;
  for (;;) {
    auto c = connect(opts_);
    set_socket_options(c, opts_.connect_timeout, opts_.stream_read_timeout);
    httplib::Headers h = {{"Authorization", "Bearer " + opts_.token},
                          {"Accept", "text/event-stream"},
                          {"Cache-Control", "no-cache"}};
    if (last > 0)
      h.emplace("Last-Event-ID", std::to_string(last));
    int status = 0;
    std::string error_body;
    sse_parser parser;
    size_t delivered = 0;
    bool ended = false;   // the last event of `id` was terminal
    bool stopped = false; // `f` asked to stop
    caf::error bad;
    auto res = c.Get(
      target, h,
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status != 200) {
          error_body.append(data, n);
          return error_body.size() < (1u << 20);
        }
        return parser.feed(data, n, [&](const sse_message& m) {
          if (m.event == "end") {
            // The subtree settled: the server closes the stream next.
            ended = true;
            return true;
          }
          auto doc = parse_answer(m.data);
          if (doc.is_discarded() || !doc.is_object()) {
            bad = unexpected("an event of the stream is not a JSON object: " + m.data);
            return false;
          }
          uint64_t seq = 0;
          if (auto i = doc.find("seq"); i != doc.end() && i->is_number_unsigned())
            seq = i->get<uint64_t>();
          else if (!m.id.empty() && m.id.find_first_not_of("0123456789") == std::string::npos)
            seq = std::stoull(m.id);
          if (seq != 0 && seq <= last)
            return true; // seen before a reconnect
          last = std::max(last, seq);
          ++delivered;
          if (text_of(doc, "execution_id") == id)
            ended = is_terminal_event(text_of(doc, "type"));
          if (!f(doc)) {
            stopped = true;
            return false;
          }
          return true;
        });
      });
    if (bad)
      return bad;
    if (stopped)
      return caf::none;
    if (res)
      status = res->status; // the response handler sees only answers with a body
    if (status == 204)
      return caf::none; // settled, and nothing after `last`
    if (status != 0 && status != 200)
      return error_of_answer(status, error_body);
    if (status == 200) {
      connected_once = true;
      if (delivered > 0)
        failures = 0;
      // A stream that ended cleanly after the execution's terminal event, or
      // a reconnect that found nothing more, is the normal end.
      if (res && (ended || delivered == 0))
        return caf::none;
    }
    if (!connected_once)
      return unreachable(res ? "the event stream did not open"
                             : describe(res.error()));
    if (++failures > opts_.max_reconnects)
      return unreachable("the event stream dropped " + std::to_string(failures)
                         + " times in a row");
    // The connection dropped mid-stream: reopen it from the last seq.
    std::this_thread::sleep_for(reconnect_delay(failures));
  }
}

} // namespace canopy
