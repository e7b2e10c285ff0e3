// The event log of an execution from the server: paged, or streamed over
// server-sent events (the parser, reconnects from the last seq).

#include "runtime/client/client.hpp"

#include <algorithm>
#include <thread>

#include "runtime/client/client_detail.hpp"

namespace canopy::core {

namespace {

/// Pause before the n-th reconnect of a dropped stream: 100 ms doubling up
/// to 2 s, so a restarting server is not hammered.
millis reconnect_delay(int n) {
  int64_t ms = 100;
  for (int i = 1; i < n && ms < 2000; ++i)
    ms *= 2;
  return millis{std::min<int64_t>(ms, 2000)};
}

bool is_terminal_event(const std::string& spelling) {
  event_type type;
  return from_string(spelling, type) && is_final(type);
}

} // namespace

using namespace client_detail;

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

// -- the event log ----------------------------------------------------------------

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

} // namespace canopy::core
