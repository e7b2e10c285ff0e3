#pragma once

// The HTTP API of `canopy serve` (runtime/docs/reference/http.md): routing, authentication, the
// answers and their errors. Internal (not installed): server.cpp runs it on
// its listener. The handlers live by resource in http_api.cpp (routing,
// auth, shared helpers, health, metrics, the static files),
// http_api_executions.cpp (graphs and executions), http_api_events.cpp (the
// event log and SSE) and http_api_agents.cpp (agents and nodes).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "persistence/error.hpp"
#include "persistence/reference.hpp"
#include "runtime/server/auth.hpp"
#include "runtime/node/config.hpp"
#include "runtime/node/document.hpp"
#include "runtime/node/error.hpp"
#include "runtime/server/http_routes.hpp"
#include "runtime/server/metrics.hpp"
#include "runtime/node/quota.hpp"
#include "runtime/node/runtime.hpp"
#include "runtime/node/worker.hpp"

namespace canopy::core::api {

// -- constants ------------------------------------------------------------------

/// Default and largest `wait` of a stop (runtime/docs/reference/http.md#stop).
inline constexpr double default_stop_wait = 15;
inline constexpr double max_stop_wait = 3600;

/// Listings: default and largest page.
inline constexpr size_t default_page = 100;
inline constexpr size_t max_page = 1000;

/// Agent messages waiting for their runs at once; each holds an HTTP thread
/// (of up to http_limits::max_threads, see http_listener.hpp).
inline constexpr size_t max_agent_sends = 96;

/// A comment line on an idle SSE stream this often (runtime/docs/reference/http.md#server-sent-events).
inline constexpr auto sse_keepalive = std::chrono::seconds{15};
/// The reconnection delay an event stream asks of its client (`retry:`).
inline constexpr int sse_retry_ms = 3000;

/// An HTTP error answer: status, code, message, JSON path.
struct http_error {
  int status = 400;
  std::string code;
  std::string message;
  std::string path;
};

/// A 400 answer (`code` defaults to `bad_request`).
http_error bad_request(std::string message, std::string path = "",
                       std::string code = "bad_request");

/// A 404 answer.
http_error not_found(std::string message);

/// Maps a library error to its HTTP answer.
http_error from_error(const caf::error& err);

/// The runtime/docs/reference/http.md error body `{"error": {"code", "message", "path"}}`.
json error_body(const http_error& e);

/// Answers `status` with the JSON `body`.
void reply(httplib::Response& res, int status, const json& body);

/// Answers the error `e` with its error body.
void reply(httplib::Response& res, const http_error& e);

/// Parses a request body that must be a JSON object with only `allowed`
/// keys; an empty body is `{}`. On an error `err` holds the answer.
caf::expected<json> body_object(const httplib::Request& req,
                                std::initializer_list<const char*> allowed, http_error& err);

/// Reads the stop options `{mode, wait}` of a body; false with `err` set
/// when one is bad.
bool stop_options(const json& body, stop_mode& mode, double& wait, http_error& err);

/// True for names usable as graph ids in a URL: 1-128 of [A-Za-z0-9._-].
bool valid_name(const std::string& s);

/// True for strings that look like execution ids (lowercase base32).
bool valid_id(const std::string& s);

/// Parses a decimal unsigned integer of at most 19 digits.
bool parse_uint(const std::string& s, uint64_t& out);

/// Blocks until the resumed execution `h` (stored as `before` when resumed)
/// has a committed record other than `before`, or its actor is gone.
void await_resumed(const store& db, const execution_handle& h, const execution_record& before);

// -- event notifier ---------------------------------------------------------------

/// Wakes SSE streams when events are committed.
class notifier {
public:
  uint64_t generation() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return gen_;
  }
  void bump() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ++gen_;
    }
    cv_.notify_all();
  }
  void shutdown() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      closed_ = true;
    }
    cv_.notify_all();
  }
  /// Waits until the generation differs from `seen`, the timeout passed, or
  /// shutdown. @returns false on shutdown.
  bool wait(uint64_t seen, std::chrono::steady_clock::duration timeout) {
    std::unique_lock<std::mutex> lock{mtx_};
    cv_.wait_for(lock, timeout, [&] { return closed_ || gen_ != seen; });
    return !closed_;
  }
  bool closed() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return closed_;
  }

private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  uint64_t gen_ = 0;
  bool closed_ = false;
};

// -- the server ------------------------------------------------------------------------

/// A matched request: the user and the text of the route's `{...}` segment.
struct call {
  const httplib::Request& req;
  httplib::Response& res;
  std::string user;
  std::string capture;
  std::vector<std::string> more; ///< the route's `{...}` segments after the first
};

/// The routes and their handlers; one per server, its handlers called on
/// the listener's threads (thread-safe: the store, runtime, metrics and the
/// graph cache are).
class api_server {
public:
  api_server(const node_config& cfg, runtime& rt, metrics& m, notifier& n);

  /// Waits for the agent messages in flight to end (after the runtime, which
  /// ends their runs, is gone).
  ~api_server();

  /// Shutdown: agent messages still waiting answer 503 at once (their runs
  /// are stopped with reason `shutdown` when the runtime closes), and no new
  /// one is taken.
  void close();

  /// Installs the routes and handlers on `svr`. httplib gets no route of
  /// its own (its routes are std::regex patterns, whose matching recurses
  /// once per byte of the path): a request without a body is answered from
  /// the pre-routing hook; one with a body (POST, PUT, PATCH, DELETE) is
  /// marked there, httplib reads its body, finds no route and calls the
  /// error hook with 404, which answers the marked request.
  void install(httplib::Server& svr);

private:
  using handler = void (api_server::*)(call&);

  /// Marks a request whose answer waits for its body (see install).
  static constexpr const char* deferred_header = "X-Canopy-Deferred";

  /// Takes `br` out of the request's Accept-Encoding: httplib compresses
  /// with brotli at quality 11 whenever a client accepts it (every browser
  /// does), far slower than gzip for a large execution tree
  /// (measured: runtime/docs/benchmarks.md#design-measurements),
  /// so the server answers gzip (or plain) instead.
  static void without_brotli(const httplib::Request& req);

  /// Methods httplib reads a body for before routing.
  static bool expects_body(const std::string& method);

  void add(const char* method, const char* pattern, bool auth, handler fn);

  /// dispatch(), with an exception answered 500 (the hooks run outside
  /// httplib's own exception handling).
  void guarded_dispatch(const httplib::Request& req, httplib::Response& res);

  void dispatch(const httplib::Request& req, httplib::Response& res);

  /// The user whose token `req` carries (`Authorization: Bearer TOKEN`, the
  /// scheme in any case: RFC 9110 §11.1). Otherwise nothing, and `err` is
  /// the answer: 400 when an Authorization header holds a control character
  /// (a byte below 0x20 but HTAB, or 0x7F), else 401.
  std::optional<std::string> authenticate(const httplib::Request& req, http_error& err) const;

  // -- helpers --------------------------------------------------------------------

  /// The execution `id` if `user` owns it; else the 404 answer.
  std::optional<execution_record> owned(call& c, const std::string& id);

  /// The document of execution `id`; answers the error itself when it fails.
  std::optional<json> document(call& c, const std::string& id, bool steps, bool children);
  /// The same of `rec`, just read by `owned` (not read again).
  std::optional<json> document(call& c, execution_record rec, bool steps, bool children);

  /// Parses a registered graph version against this node (cached).
  caf::expected<std::shared_ptr<const graph>> parsed(const registered_graph& rg,
                                                      http_error& err);

  /// One answer for a list of validation errors: the first one's code and
  /// path, every message.
  static http_error graph_errors(const std::vector<graph_error>& errors);

  // -- routes ---------------------------------------------------------------------

  /// 200 while the store can be read, with the log's health: `log` is
  /// `stalled` while stderr takes no lines (runtime/node/logging.hpp), and
  /// `log_dropped` counts the lines lost.
  void healthz(call& c);

  void get_metrics(call& c);

  /// `/` and `/ui`: the dashboard is at `/ui/`.
  void to_dashboard(call& c);

  /// A dashboard file (`/ui/` is index.html): compiled in, or read from
  /// `$CANOPY_WEB_DIR` when the server started with it. The pages hold no
  /// data (they read the API with the user's token), so no token is needed;
  /// their headers allow scripts, styles and requests from this origin only.
  void get_page(call& c);

  /// A file compiled into the binary (runtime/server/assets.hpp), at its own path.
  void get_asset(call& c);

  void post_graph(call& c);

  /// The registered graph `id` of the caller (`?version=N` or the newest).
  std::optional<registered_graph> owned_graph(call& c, const std::string& id, int version);

  /// Reads `?limit=` (1 to max_page, default default_page) into `limit`;
  /// answers 400 itself when it is bad.
  bool page_limit(call& c, size_t& limit);

  /// The caller's registered graphs, newest version each, by id; `next` is
  /// the cursor (the last id) while a page is full.
  void list_graphs(call& c);

  void get_graph(call& c);

  void start_execution(call& c);

  /// Requests a stop of `rec` for the caller and waits up to `wait` seconds
  /// (the stop protocol: every wait in it is bounded).
  /// @returns the answer's status and body.
  std::pair<int, json> stop_one(call& c, const execution_record& rec, stop_mode mode,
                                double wait);

  /// Reads a stop body `{mode, wait}`; answers the error itself when bad.
  bool stop_body(call& c, stop_mode& mode, double& wait);

  void stop_execution(call& c);

  // -- signals and waits (http_api_signals.cpp) --

  /// `POST /v1/executions/{id}/signals/{name}`: `{"value": V}` or
  /// `{"fail": {"message": M}}`, `?step=PATH`, header `Idempotency-Key`;
  /// 200 with `consumed_by` once a wait took it, 202 `buffered`, or the
  /// error of its outcome (persistence/signal_rules.hpp).
  void post_signal(call& c);
  /// `GET /v1/executions/{id}/signals`: the tree's signals (the audit).
  void list_signals(call& c);
  /// `GET /v1/waits`: the waits the user may answer, oldest armed first.
  void list_waits(call& c);

  void stop_graph(call& c);

  void list_executions(call& c);

  /// Deletes a settled root's whole tree: 204; 409 `wrong_state` for a
  /// child or a live tree.
  void delete_execution(call& c);

  void get_execution(call& c);

  void get_tree(call& c);

  void resume_execution(call& c);

  void get_events(call& c);

  /// One page of the event log as JSON: `limit` (default and at most
  /// `max_page`) events of the tree after `after` (or `?cursor=`), those of
  /// `rec`'s subtree among them; `next` is the cursor of the following page,
  /// null once the log has no more.
  void event_page(call& c, const execution_record& rec, uint64_t after);

  /// What one look at the tree's log found for a subtree.
  struct event_scan {
    std::vector<event_record> events; ///< the subtree's, in seq order
    uint64_t last_seq = 0;            ///< the last seq looked at (`after` when none)
    bool full = false;                ///< `limit` events looked at: the log may go on
  };

  /// Looks at up to `limit` events (0: all) of `rec`'s tree with seq >
  /// `after` and keeps those of `rec`'s subtree.
  caf::expected<event_scan> subtree_events(const execution_record& rec, uint64_t after,
                                           size_t limit = 0);

  /// Streams the events of `rec`'s subtree as Server-Sent Events from seq
  /// `after` until the subtree is no longer running; then one `end` event
  /// (no `id`, so a client's Last-Event-ID stays the last seq) with the final
  /// status, and the stream closes. A settled subtree with nothing after
  /// `after` answers 204: the standard tells EventSource to stop reconnecting.
  void stream_events(call& c, const execution_record& rec, uint64_t after);

  // -- agents (runtime/docs/reference/graph-format.md#agent-graphs) ---------------------------------------------------

  /// Agent `name` of the caller; else answers 404 (another user's agent
  /// too) or the store's error itself.
  std::optional<agent_record> owned_agent(call& c, const std::string& name);

  /// The graph of a new agent from the body's `graph`: a graph document, or
  /// the id of a registered graph of the caller. Answers the error itself.
  std::shared_ptr<const graph> agent_graph(call& c, const json& field);

  void post_agent(call& c);

  void list_agents(call& c);

  // -- cluster (runtime/docs/reference/config.md#cluster) -------------------------------------------------

  /// `GET /v1/nodes`: the members of the cluster, the supervisor first (this
  /// node alone, named `local`, without a cluster). Any user may read it.
  void list_nodes(call& c);

  void get_agent(call& c);

  void message_agent(call& c);

  /// Sends `message` to agent `name` of the caller and waits for the end of
  /// its run. The call blocks on a thread of its own, so a shutdown answers
  /// at once (503) instead of waiting for the run. Answers errors itself.
  std::optional<agent_reply> send(call& c, const std::string& name, json message);

  void cancel_agent(call& c);

  /// The 409 of a user at `quotas.live_executions`.
  http_error live_quota_exceeded(const std::string& user) const;

  const node_config& cfg_;
  /// `$CANOPY_WEB_DIR` at start: the dashboard's files are read from there.
  const std::string web_dir_ = [] {
    auto dir = std::getenv("CANOPY_WEB_DIR");
    return std::string{dir != nullptr ? dir : ""};
  }();
  runtime& rt_;
  store& db_;
  metrics& metrics_;
  notifier& events_;
  /// `quotas.live_executions`: the API's starts and resumes per user.
  live_quota live_quota_{
    cfg_.quotas.live_executions,
    [this](const std::string& id) {
      auto rec = db_.execution(id);
      // Unreadable for now (a busy store): still counted.
      return rec ? is_stoppable(rec->status) : !is(rec.error(), persistence_errc::not_found);
    },
    [this] {
      std::vector<std::pair<std::string, std::string>> out;
      if (auto live = db_.live())
        for (auto& r : *live)
          if (r.parent_id.empty() && !r.owner.empty())
            out.emplace_back(r.owner, r.id);
      return out;
    }};
  token_table users_; ///< token → user, constant time
  route_table routes_;
  std::vector<std::pair<bool, handler>> handlers_; ///< by route index: auth, handler
  std::mutex cache_mtx_;
  std::map<std::string, std::shared_ptr<const graph>> cache_;
  /// Agent messages in flight (each on a thread of its own, see `send`).
  std::mutex sends_mtx_;
  std::condition_variable sends_cv_;
  size_t sends_live_ = 0;
  bool closing_ = false;
};

} // namespace canopy::core::api
