#pragma once

// A client of the HTTP API of `canopy serve` (runtime/docs/reference/http.md), for the CLI's
// `--server URL`: JSON requests with a bearer token, answers turned into the
// errors (and so the exit codes) of runtime/docs/reference/cli.md, and a reader of the live event
// stream (Server-Sent Events, runtime/docs/reference/http.md#server-sent-events) that reconnects where it left
// off.
//
//   auto url = canopy::core::parse_server_url("http://127.0.0.1:8080");
//   canopy::core::api_client api{{*url, token}};
//   auto doc = api.tree(id);              // the execution document with children
//   api.stream_events(id, 0, [](const json& e) { ...; return true; });

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "persistence/duration.hpp"
#include "actors/agent_reply.hpp"
#include "persistence/records.hpp"

namespace canopy::core {

// -- server addresses ----------------------------------------------------------

/// Where a server listens, from `--server URL`.
struct server_url {
  std::string host; ///< a name or an address (IPv6 without its brackets)
  int port = 80;
  bool tls = false; ///< `https://`
  /// `http://HOST:PORT` or `https://HOST:PORT`, for messages and httplib.
  std::string text() const;
};

/// Parses `http://HOST[:PORT][/]` or `https://...` (an IPv6 address in
/// brackets; the port defaults to 80 or 443).
/// @returns the address, or `runtime_errc::invalid_input` naming the URL and
///          what is wrong with it (another scheme, a path, a bad port).
/// Thread-safe.
caf::expected<server_url> parse_server_url(const std::string& text);

/// Percent-encodes `text` for a path segment or a query value (RFC 3986
/// unreserved characters stay). Thread-safe.
std::string url_encode(const std::string& text);

// -- answers of the server ------------------------------------------------------

/// Maps an error answer to a canopy error whose `exit_code_of` is runtime/docs/reference/cli.md's:
/// 401 → exit 2 ("unauthorized: check --token or $CANOPY_TOKEN"); 404 →
/// `persistence_errc::not_found` (exit 4); 400, 409 and 413 →
/// `runtime_errc::invalid_input` (exit 2) with the server's message, prefixed
/// by its JSON path when there is one; 503 → `persistence_errc::store_error`
/// (exit 5); anything else → `caf::sec::unexpected_response` (exit 1).
/// `body` is the answer's text (`{"error": {"code", "message", "path"}}`,
/// or anything else). Thread-safe.
caf::error error_of_answer(int status, const std::string& body);

/// Parses an RFC 3339 UTC time (`2026-11-22T09:22:21.042Z`, milliseconds
/// optional). @returns ms since the epoch, or 0 for null or anything else.
int64_t ms_of_rfc3339(const nlohmann::json& time);

/// Reads an execution document (runtime/docs/reference/cli.md) back into a record: identity,
/// lineage, status, reason, error, inputs, outputs and times (steps and
/// children are left out). Missing or null fields stay empty. Never throws.
execution_record execution_of(const nlohmann::json& doc);

/// Reads an event document (runtime/docs/reference/events.md) back into a record. Never throws.
event_record event_of(const nlohmann::json& doc);

// -- server-sent events ----------------------------------------------------------

/// One message of a `text/event-stream`.
struct sse_message {
  std::string id;    ///< the `id:` field (empty when absent)
  std::string event; ///< the `event:` field (empty when absent)
  std::string data;  ///< the `data:` lines joined with `\n`
};

/// An incremental parser of `text/event-stream` (the WHATWG rules): lines end
/// with LF, CRLF or CR, also when split across chunks; `:` starts a comment;
/// `data:` lines accumulate; a blank line dispatches a message that has data.
/// Not thread-safe: feed it from one thread.
class sse_parser {
public:
  /// Called with each complete message; returning false stops the parse.
  using handler = std::function<bool(const sse_message&)>;

  /// Parses `n` more bytes, calling `f` for every message they complete.
  /// @returns false when `f` returned false (the rest of the chunk is dropped).
  bool feed(const char* data, size_t n, const handler& f);

  /// Comment lines seen so far (keep-alives).
  size_t comments() const { return comments_; }

private:
  bool line(const std::string& text, const handler& f);

  std::string partial_;  ///< an unterminated line
  bool after_cr_ = false; ///< the last byte was CR: a following LF belongs to it
  sse_message current_;
  bool has_data_ = false;
  size_t comments_ = 0;
};

// -- the client --------------------------------------------------------------------

/// How to reach a server.
struct client_options {
  server_url server;
  std::string token;                 ///< sent as `Authorization: Bearer TOKEN`
  /// HTTPS: the PEM file of the CA certificate(s) the server's certificate
  /// must chain to (`--cacert`); empty: the system's CAs. The host name is
  /// checked against the certificate either way.
  std::string ca_file;
  millis connect_timeout{5000};
  millis read_timeout{30000};        ///< for one answer (stop adds its wait)
  /// Reading a live stream: longer than the server's 15 s keep-alive comments.
  millis stream_read_timeout{60000};
  /// A dropped stream is reopened this many times in a row at most.
  int max_reconnects = 10;
};

/// What `api_client::executions` lists: the query of `GET /v1/executions`.
struct execution_query {
  std::string status; ///< empty: any
  std::string graph;  ///< empty: any
  std::string since;  ///< empty: any age; else an age such as "10m" or "1d"
  bool all = false;   ///< children too (roots only by default)
  size_t limit = 0;   ///< the newest this many (0: every page)
};

/// A 2xx answer: its status and its JSON body.
struct api_answer {
  int status = 0;
  nlohmann::json body;
};

/// The answer of `POST /v1/executions/{id}/stop` (runtime/docs/reference/http.md#stop).
struct stop_answer {
  stop_result result = stop_result::stopping; ///< `stopping` with 202
  nlohmann::json execution; ///< the document (null when the server sent none)
};

/// A client of one server. Every request opens its own connection, so one
/// client may be used from several threads.
///
/// Errors of every member: a server that cannot be reached (refused, timed
/// out, dropped) is `persistence_errc::io_error` (exit 5) naming the URL;
/// an error answer is mapped by `error_of_answer`; a 2xx answer whose body is
/// not the expected JSON is `caf::sec::unexpected_response` (exit 1).
class api_client {
public:
  explicit api_client(client_options opts);

  /// `GET target` (a path with its query). @returns the 2xx answer.
  caf::expected<api_answer> get(const std::string& target) const;

  /// `POST target` with `body` as JSON; `extra_wait` lengthens the read
  /// timeout (a stop that waits). @returns the 2xx answer.
  caf::expected<api_answer> post(const std::string& target, const nlohmann::json& body,
                                 millis extra_wait = millis{0}) const;

  /// `POST /v1/executions/{id}/signals/{name}` with `body` (`{"value"}` or
  /// `{"fail"}`), `?step=` when `step` is set, and the `Idempotency-Key`
  /// header when `key` is. @returns the 200 (consumed) or 202 (buffered)
  /// answer; a refusal is an error (`error_of_answer`).
  caf::expected<api_answer> signal(const std::string& id, const std::string& name,
                                   const nlohmann::json& body, const std::string& step,
                                   const std::string& key) const;

  /// `GET /v1/waits`: the waits this client's user may answer.
  caf::expected<std::vector<nlohmann::json>> waits() const;

  /// `GET /v1/executions/{id}/tree`: the execution with its descendants.
  caf::expected<nlohmann::json> tree(const std::string& id) const;

  /// `GET /v1/executions?status=&graph=&since=&all=`, following `next`
  /// cursors to the end or until `q.limit` items came.
  /// @returns the items, newest first (as the server lists them).
  caf::expected<std::vector<nlohmann::json>> executions(const execution_query& q) const;

  /// `POST /v1/executions/{id}/stop` with `{"mode", "wait"}`.
  caf::expected<stop_answer> stop(const std::string& id, bool force, double wait_s) const;

  /// `GET /v1/executions/{id}/events` as JSON, following `next` cursors.
  /// @returns the event documents in seq order.
  caf::expected<std::vector<nlohmann::json>> events(const std::string& id) const;

  /// Reads `GET /v1/executions/{id}/events` as a live stream of
  /// Server-Sent Events (from seq `after`; 0: the whole log), calling `f`
  /// with each event document, in seq order, each once. When the connection
  /// drops before the stream ended (a transport error, or an end before the
  /// execution's terminal event), it reconnects with `Last-Event-ID` set to
  /// the last seq seen. `f` returning false ends the stream.
  /// @returns none once the stream ended (the tree is no longer running), or
  ///          an error (the first connection failed, reconnecting failed
  ///          `max_reconnects` times in a row, an error answer).
  caf::error stream_events(const std::string& id, uint64_t after,
                           const std::function<bool(const nlohmann::json&)>& f) const;

  // -- graphs (runtime/docs/reference/http.md) ---------------------------------------------------------

  /// `POST /v1/graphs` with `doc`, a graph document with its `name` (the
  /// id): registers it, or its next version.
  /// @returns the answer's body `{id, version}`. A graph the server refuses
  ///          (400, 409, 413) is `runtime_errc::invalid_input` (exit 2):
  ///          "the server refused graph 'NAME': PATH: message".
  caf::expected<nlohmann::json> register_graph(const nlohmann::json& doc) const;

  /// `GET /v1/graphs`, following `next` cursors. @returns the graph
  /// summaries `{id, version, created_at}`, the newest version of each, by id.
  caf::expected<std::vector<nlohmann::json>> graphs() const;

  // -- agents (runtime/docs/reference/graph-format.md#agent-graphs) -------------------------------------------

  /// `POST /v1/agents` with `{name, graph, on_busy, node}` (`on_busy` and
  /// `node` left out when empty). @returns the answer: 201 created, 200
  /// updated; the body is the agent document.
  caf::expected<api_answer> create_agent(const std::string& name, const nlohmann::json& graph,
                                         const std::string& on_busy,
                                         const std::string& node = {}) const;

  /// `GET /v1/agents`, following `next` cursors. @returns the agent documents.
  caf::expected<std::vector<nlohmann::json>> agents() const;

  /// `GET /v1/agents/{name}`: the agent document with `history` and `runs`.
  caf::expected<nlohmann::json> agent(const std::string& name) const;

  /// `POST /v1/agents/{name}/messages` with `{message}`; waits (without a
  /// read timeout of its own) until the run ended. A 409 `busy` or
  /// `cancelled` is an answer, not an error.
  /// `POST /v1/agents/{name}/messages`: a run's end (200), or a message
  /// refused (409 `busy` or `cancelled`) as an answer with that status.
  caf::expected<agent_reply> send_agent_message(const std::string& name,
                                                         const nlohmann::json& message) const;

  /// `POST /v1/agents/{name}/cancel` with `{}`. The server waits (up to
  /// 30 s) for the runs to stop before it answers; `wait` is how long this
  /// client waits for the answer beyond its read timeout.
  /// @returns `cancelled` or `no_execution`.
  caf::expected<cancel_result> cancel_agent(const std::string& name,
                                          millis wait = millis{30000}) const;

  // -- cluster (runtime/docs/reference/config.md#cluster) --------------------------------------------------------

  /// `GET /v1/nodes`, following `next` cursors. @returns the node documents,
  /// the supervisor first.
  caf::expected<std::vector<nlohmann::json>> nodes() const;

  const client_options& options() const { return opts_; }

private:
  /// Sends a request and @returns the status and body of any answer; only
  /// a transport failure is an error.
  caf::expected<std::pair<int, std::string>> exchange(const std::string& method,
                                                      const std::string& target,
                                                      const nlohmann::json* body,
                                                      millis extra_wait,
                                                      const std::string& key = {}) const;
  caf::expected<api_answer> finish(int status, const std::string& body) const;
  caf::error unreachable(const std::string& why) const;
  /// Every item of the listing at `path`, following `next` cursors; `what`
  /// names the listing in errors.
  caf::expected<std::vector<nlohmann::json>> all_items(const std::string& path,
                                                       const std::string& what) const;

  client_options opts_;
};

} // namespace canopy::core
