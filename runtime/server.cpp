#include "runtime/server.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <system_error>
#include <thread>

#include <httplib.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "persistence/error.hpp"
#include "persistence/reference.hpp"
#include "runtime/auth.hpp"
#include "runtime/document.hpp"
#include "runtime/error.hpp"
#include "runtime/assets.hpp"
#include "runtime/http_listener.hpp"
#include "runtime/pruner.hpp"
#include "runtime/http_routes.hpp"
#include "runtime/metrics.hpp"
#include "runtime/quota.hpp"
#include "runtime/runtime.hpp"
#include "runtime/worker.hpp"

namespace canopy {

namespace {

// -- constants ------------------------------------------------------------------


/// Default and largest `wait` of a stop (SPEC §13 rule 19).
constexpr double default_stop_wait = 15;
constexpr double max_stop_wait = 3600;

/// Listings: default and largest page.
constexpr size_t default_page = 100;
constexpr size_t max_page = 1000;

/// Agent messages waiting for their runs at once; each holds an HTTP thread
/// (of up to http_limits::max_threads, see http_listener.hpp).
constexpr size_t max_agent_sends = 96;

/// A comment line on an idle SSE stream this often (SPEC §13 rule 20).
constexpr auto sse_keepalive = std::chrono::seconds{15};
/// The reconnection delay an event stream asks of its client (`retry:`).
constexpr int sse_retry_ms = 3000;

// -- errors ---------------------------------------------------------------------

/// An HTTP error answer: status, code, message, JSON path.
struct http_error {
  int status = 400;
  std::string code;
  std::string message;
  std::string path;
};

http_error bad_request(std::string message, std::string path = "",
                       std::string code = "bad_request") {
  return {400, std::move(code), std::move(message), std::move(path)};
}

http_error not_found(std::string message) {
  return {404, "not_found", std::move(message), ""};
}

/// Maps a library error to its HTTP answer.
http_error from_error(const caf::error& err) {
  auto msg = message_of(err);
  if (err.category() == persistence_category) {
    switch (static_cast<persistence_errc>(err.code())) {
      case persistence_errc::not_found: return not_found(msg);
      case persistence_errc::invalid_graph:
      case persistence_errc::bad_reference: return bad_request(msg, "", "invalid_graph");
      default: return {503, "store_unavailable", msg, ""};
    }
  }
  if (err.category() == runtime_category) {
    switch (static_cast<runtime_errc>(err.code())) {
      case runtime_errc::invalid_input: return bad_request(msg, "/inputs", "invalid_input");
      case runtime_errc::wrong_state: return {409, "wrong_state", msg, ""};
      case runtime_errc::shutting_down: return {503, "shutting_down", msg, ""};
      case runtime_errc::cluster_port: return {503, "unavailable", msg, ""};
      case runtime_errc::quota_exceeded: return {409, "quota_exceeded", msg, ""};
    }
  }
  return {503, "unavailable", msg, ""};
}

json error_body(const http_error& e) {
  return {{"error", {{"code", e.code}, {"message", e.message}, {"path", e.path}}}};
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body) + "\n", "application/json");
}

void reply(httplib::Response& res, const http_error& e) {
  reply(res, e.status, error_body(e));
}

// -- request bodies ----------------------------------------------------------------

/// Parses a request body that must be a JSON object with only `allowed`
/// keys; an empty body is `{}`.
caf::expected<json> body_object(const httplib::Request& req,
                                std::initializer_list<const char*> allowed, http_error& err) {
  if (req.body.empty())
    return json::object();
  auto doc = parse_json_text(req.body);
  if (!doc) {
    err = bad_request("malformed JSON: " + message_of(doc.error()), "", "invalid_json");
    return doc.error();
  }
  if (!doc->is_object()) {
    err = bad_request(std::string{"expected a JSON object, got "} + doc->type_name());
    return make_error(runtime_errc::invalid_input, err.message);
  }
  for (auto& kv : doc->items()) {
    bool known = false;
    for (auto a : allowed)
      known = known || kv.key() == a;
    if (!known) {
      err = bad_request("unknown key '" + kv.key() + "'", "/" + escape_pointer(kv.key()),
                        "unknown_key");
      return make_error(runtime_errc::invalid_input, err.message);
    }
  }
  return doc;
}

/// Reads the stop options `{mode, wait}` of a body.
bool stop_options(const json& body, stop_mode& mode, double& wait, http_error& err) {
  mode = stop_mode::graceful;
  wait = default_stop_wait;
  if (auto i = body.find("mode"); i != body.end()) {
    if (!i->is_string() || !from_string(i->get<std::string>(), mode)) {
      err = bad_request("mode must be \"graceful\" or \"force\"", "/mode");
      return false;
    }
  }
  if (auto i = body.find("wait"); i != body.end()) {
    if (!i->is_number() || i->get<double>() < 0 || i->get<double>() > max_stop_wait) {
      err = bad_request("wait must be a number of seconds from 0 to 3600", "/wait");
      return false;
    }
    wait = i->get<double>();
  }
  return true;
}

/// True for names usable as graph ids in a URL: 1-128 of [A-Za-z0-9._-].
bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128)
    return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

/// True for strings that look like execution ids (lowercase base32).
bool valid_id(const std::string& s) {
  if (s.empty() || s.size() > 64)
    return false;
  for (unsigned char c : s)
    if (!std::isdigit(c) && !std::islower(c))
      return false;
  return true;
}

bool parse_uint(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 19)
    return false;
  out = 0;
  for (unsigned char c : s) {
    if (!std::isdigit(c))
      return false;
    out = out * 10 + (c - '0');
  }
  return true;
}

/// Blocks until the resumed execution `h` (stored as `before` when resumed)
/// has a committed record other than `before`, or its actor is gone.
void await_resumed(const store& db, const execution_handle& h, const execution_record& before) {
  for (millis pause{1}; h.running(); pause = std::min(pause * 2, millis{20})) {
    auto now = db.execution(before.id);
    if (!now || now->status != before.status || now->ended_at != before.ended_at)
      return;
    std::this_thread::sleep_for(pause);
  }
}

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
};

class api_server {
public:
  api_server(const node_config& cfg, runtime& rt, metrics& m, notifier& n)
    : cfg_(cfg), rt_(rt), db_(*rt.db()), metrics_(m), events_(n), users_(cfg.users) {
    add("GET", "/healthz", false, &api_server::healthz);
    add("GET", "/metrics", false, &api_server::get_metrics);
    add("GET", "/v1/openapi.json", false, &api_server::get_asset);
    add("GET", "/", false, &api_server::to_dashboard);
    add("GET", "/ui", false, &api_server::to_dashboard);
    add("GET", "/ui/", false, &api_server::get_page);
    add("GET", "/ui/{file}", false, &api_server::get_page);
    add("POST", "/v1/graphs", true, &api_server::post_graph);
    add("GET", "/v1/graphs", true, &api_server::list_graphs);
    add("GET", "/v1/graphs/{id}", true, &api_server::get_graph);
    add("POST", "/v1/graphs/{id}/executions", true, &api_server::start_execution);
    add("POST", "/v1/graphs/{id}/stop", true, &api_server::stop_graph);
    add("GET", "/v1/executions", true, &api_server::list_executions);
    add("GET", "/v1/executions/{id}", true, &api_server::get_execution);
    add("DELETE", "/v1/executions/{id}", true, &api_server::delete_execution);
    add("GET", "/v1/executions/{id}/tree", true, &api_server::get_tree);
    add("POST", "/v1/executions/{id}/stop", true, &api_server::stop_execution);
    add("POST", "/v1/executions/{id}/resume", true, &api_server::resume_execution);
    add("GET", "/v1/executions/{id}/events", true, &api_server::get_events);
    add("POST", "/v1/agents", true, &api_server::post_agent);
    add("GET", "/v1/agents", true, &api_server::list_agents);
    add("GET", "/v1/agents/{name}", true, &api_server::get_agent);
    add("POST", "/v1/agents/{name}/messages", true, &api_server::message_agent);
    add("POST", "/v1/agents/{name}/cancel", true, &api_server::cancel_agent);
    add("GET", "/v1/nodes", true, &api_server::list_nodes);
  }

  /// Waits for the agent messages in flight to end (after the runtime, which
  /// ends their runs, is gone).
  ~api_server() {
    std::unique_lock<std::mutex> lock{sends_mtx_};
    sends_cv_.wait(lock, [this] { return sends_live_ == 0; });
  }

  /// Shutdown: agent messages still waiting answer 503 at once (their runs
  /// are stopped with reason `shutdown` when the runtime closes), and no new
  /// one is taken.
  void close() {
    std::lock_guard<std::mutex> guard{sends_mtx_};
    closing_ = true;
    sends_cv_.notify_all();
  }

  /// Installs the routes and handlers on `svr`. httplib gets no route of
  /// its own (its routes are std::regex patterns, whose matching recurses
  /// once per byte of the path): a request without a body is answered from
  /// the pre-routing hook; one with a body (POST, PUT, PATCH, DELETE) is
  /// marked there, httplib reads its body, finds no route and calls the
  /// error hook with 404, which answers the marked request.
  void install(httplib::Server& svr) {
    metrics_.set_routes(routes_.labels());
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (expects_body(req.method)) {
        res.set_header(deferred_header, "1");
        return httplib::Server::HandlerResponse::Unhandled;
      }
      guarded_dispatch(req, res);
      return httplib::Server::HandlerResponse::Handled;
    });
    // Answers httplib gives itself (413, 400 for a bad request line, ...)
    // get the error body too.
    httplib::Server::HandlerWithResponse on_error = [this](const httplib::Request& req,
                                                           httplib::Response& res) {
      bool deferred = res.has_header(deferred_header);
      res.headers.erase(deferred_header);
      if (deferred && res.status == 404 && res.body.empty()) {
        // The body is read and httplib found no route: the request is ours.
        res.status = 200;
        guarded_dispatch(req, res);
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!res.body.empty())
        return httplib::Server::HandlerResponse::Unhandled;
      // httplib answers malformed requests itself, e.g. a POST without
      // Content-Length (send `Content-Length: 0` for an empty body).
      http_error e{res.status, "bad_request",
                   "malformed HTTP request (HTTP " + std::to_string(res.status)
                     + "; a POST needs a Content-Length header, 0 for no body)",
                   ""};
      if (res.status == 413)
        e = {413, "too_large",
             req.get_header_value("Content-Type").find("x-www-form-urlencoded")
                 != std::string::npos
               ? "a form-encoded body is limited to 8192 bytes by the HTTP library: send "
                 "Content-Type: application/json"
               : "request body is over max_request_bytes",
             ""};
      else if (res.status == 414)
        e = {414, "uri_too_long", "the request line is over 8192 bytes", ""};
      reply(res, e.status, error_body(e));
      return httplib::Server::HandlerResponse::Handled;
    };
    svr.set_error_handler(on_error);
    svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        spdlog::error("event=http.exception error={}", log_text(what));
        reply(res, {500, "internal", what, ""});
      });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      auto& method = method_label(req.method);
      auto& route = routes_.label(req.method, req.path);
      metrics_.count_request(method, route, res.status);
      spdlog::info("event=http method={} route={} path={} status={}", method, route,
                   log_text(req.path), res.status);
    });
  }

private:
  using handler = void (api_server::*)(call&);

  /// Marks a request whose answer waits for its body (see install).
  static constexpr const char* deferred_header = "X-Canopy-Deferred";

  /// Methods httplib reads a body for before routing.
  static bool expects_body(const std::string& method) {
    return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
  }

  void add(const char* method, const char* pattern, bool auth, handler fn) {
    routes_.add(method, pattern);
    handlers_.push_back({auth, fn});
  }

  /// dispatch(), with an exception answered 500 (the hooks run outside
  /// httplib's own exception handling).
  void guarded_dispatch(const httplib::Request& req, httplib::Response& res) {
    std::string what;
    try {
      dispatch(req, res);
      return;
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
      what = "internal error";
    }
    spdlog::error("event=http.exception error={}", log_text(what));
    reply(res, {500, "internal", what, ""});
  }

  void dispatch(const httplib::Request& req, httplib::Response& res) {
    auto m = routes_.match(req.method, req.path);
    if (!m) {
      if (m.path_known)
        return reply(res, {405, "method_not_allowed",
                           "method " + req.method + " is not allowed on " + req.path, ""});
      return reply(res, not_found("no route " + req.method + " " + req.path));
    }
    auto& [auth, fn] = handlers_[m.index];
    call c{req, res, {}, std::move(m.capture)};
    if (auth) {
      auto user = authenticate(req);
      if (!user) {
        // RFC 6750: the scheme a client must use, nothing about who exists.
        res.set_header("WWW-Authenticate", "Bearer realm=\"canopy\"");
        return reply(res, {401, "unauthorized",
                           "missing or unknown bearer token (Authorization: Bearer TOKEN)", ""});
      }
      c.user = *user;
    }
    (this->*fn)(c);
  }

  std::optional<std::string> authenticate(const httplib::Request& req) const {
    auto h = req.get_header_value("Authorization");
    const std::string scheme = "Bearer ";
    if (h.size() <= scheme.size() || h.compare(0, scheme.size(), scheme) != 0)
      return std::nullopt;
    return users_.find(h.substr(scheme.size()));
  }

  // -- helpers --------------------------------------------------------------------

  /// The execution `id` if `user` owns it; else the 404 answer.
  std::optional<execution_record> owned(call& c, const std::string& id) {
    if (valid_id(id)) {
      auto rec = db_.execution(id);
      if (rec && rec->owner == c.user)
        return std::move(*rec);
      if (!rec && !is(rec.error(), persistence_errc::not_found)) {
        reply(c.res, from_error(rec.error()));
        return std::nullopt;
      }
    }
    reply(c.res, not_found("no execution '" + id + "'"));
    return std::nullopt;
  }

  /// The document of execution `id`; answers the error itself when it fails.
  std::optional<json> document(call& c, const std::string& id, bool steps, bool children) {
    document_options opts;
    opts.steps = steps;
    opts.children = children;
    auto doc = load_document(db_, id, opts);
    if (!doc) {
      reply(c.res, from_error(doc.error()));
      return std::nullopt;
    }
    return std::move(*doc);
  }

  /// Parses a registered graph version against this node (cached).
  caf::expected<std::shared_ptr<const graph>> parsed(const registered_graph& rg,
                                                      http_error& err) {
    auto key = rg.owner + '\0' + rg.name + '\0' + std::to_string(rg.version);
    {
      std::lock_guard<std::mutex> guard{cache_mtx_};
      if (auto i = cache_.find(key); i != cache_.end())
        return i->second;
    }
    auto result = rt_.parse_document(rg.document);
    if (!result) {
      err = graph_errors(result.errors);
      err.status = 409;
      err.message = "graph '" + rg.name + "' version " + std::to_string(rg.version)
                    + " no longer validates on this node: " + err.message;
      return make_error(persistence_errc::invalid_graph, err.message);
    }
    std::lock_guard<std::mutex> guard{cache_mtx_};
    if (cache_.size() >= 256)
      cache_.clear();
    cache_.emplace(key, result.value);
    return result.value;
  }

  /// One answer for a list of validation errors: the first one's code and
  /// path, every message.
  static http_error graph_errors(const std::vector<graph_error>& errors) {
    http_error e = bad_request("invalid graph", "", "invalid_graph");
    if (errors.empty())
      return e;
    // The first error with a code of its own decides the answer's code and
    // path (an inline command refused by the node), else the first error.
    auto first = std::find_if(errors.begin(), errors.end(),
                              [](const graph_error& x) { return !x.code.empty(); });
    if (first == errors.end())
      first = errors.begin();
    e.path = first->path;
    if (!first->code.empty())
      e.code = first->code;
    e.message.clear();
    for (auto& x : errors)
      e.message += (e.message.empty() ? "" : "; ") + to_string(x);
    return e;
  }

  // -- routes ---------------------------------------------------------------------

  void healthz(call& c) {
    if (auto seq = db_.last_seq(); !seq)
      return reply(c.res, from_error(seq.error()));
    reply(c.res, 200, {{"status", "ok"}});
  }

  void get_metrics(call& c) {
    auto usage = db_.usage();
    if (!usage)
      return reply(c.res, from_error(usage.error()));
    c.res.status = 200;
    c.res.set_content(metrics_.render(rt_.live_executions(), usage->used_bytes()),
                      "text/plain; version=0.0.4");
  }

  /// `/` and `/ui`: the dashboard is at `/ui/`.
  void to_dashboard(call& c) {
    c.res.status = 302;
    c.res.set_header("Location", "/ui/");
  }

  /// A dashboard file (`/ui/` is index.html): compiled in, or read from
  /// `$CANOPY_WEB_DIR` when the server started with it. The pages hold no
  /// data (they read the API with the user's token), so no token is needed;
  /// their headers allow scripts, styles and requests from this origin only.
  void get_page(call& c) {
    std::string name = c.capture.empty() ? "index.html" : c.capture;
    std::string body;
    std::string type;
    if (!web_dir_.empty()) {
      auto text = read_web_file(web_dir_, name);
      if (!text)
        return reply(c.res, not_found("no file /ui/" + name));
      body = std::move(*text);
      type = content_type_of(name);
    } else {
      auto a = find_asset("/ui/" + name);
      if (a == nullptr)
        return reply(c.res, not_found("no file /ui/" + name));
      body = a->body();
      type = a->content_type;
    }
    c.res.status = 200;
    c.res.set_header("Cache-Control", "no-cache");
    c.res.set_header("X-Content-Type-Options", "nosniff");
    c.res.set_header("Referrer-Policy", "no-referrer");
    c.res.set_header("X-Frame-Options", "DENY");
    c.res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; "
                     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                     "form-action 'none'; frame-ancestors 'none'");
    c.res.set_content(body, type);
  }

  /// A file compiled into the binary (runtime/assets.hpp), at its own path.
  void get_asset(call& c) {
    auto a = find_asset(c.req.path);
    if (a == nullptr)
      return reply(c.res, not_found("no file " + c.req.path));
    c.res.status = 200;
    c.res.set_header("Cache-Control", "no-cache");
    c.res.set_content(std::string{a->body()}, a->content_type);
  }

  void post_graph(call& c) {
    if (c.req.body.size() > max_graph_bytes)
      return reply(c.res, {413, "too_large",
                           "a graph document is at most " + std::to_string(max_graph_bytes)
                             + " bytes",
                           ""});
    auto doc = parse_json_text(c.req.body);
    if (!doc)
      return reply(c.res, bad_request("malformed JSON: " + message_of(doc.error()), "",
                                      "invalid_json"));
    if (!doc->is_object())
      return reply(c.res,
                   bad_request(std::string{"expected a graph object, got "} + doc->type_name()));
    auto name = doc->find("name");
    if (name == doc->end() || !name->is_string())
      return reply(c.res, bad_request("a graph posted over HTTP needs a \"name\" (its id)",
                                      "/name", "invalid_graph"));
    if (!valid_name(name->get<std::string>()))
      return reply(c.res, bad_request("name must be 1-128 characters of A-Z a-z 0-9 . _ -",
                                      "/name", "invalid_graph"));
    auto result = rt_.parse_document(*doc);
    if (!result)
      return reply(c.res, graph_errors(result.errors));
    auto id = name->get<std::string>();
    auto stored = rt_.register_graph(c.user, id, std::move(*doc), cfg_.quotas.graphs);
    if (!stored)
      return reply(c.res, from_error(stored.error()));
    spdlog::info("event=graph.registered user={} graph={} version={}", c.user, id,
                 stored->version);
    reply(c.res, 201, {{"id", id}, {"version", stored->version}});
  }

  /// The registered graph `id` of the caller (`?version=N` or the newest).
  std::optional<registered_graph> owned_graph(call& c, const std::string& id, int version) {
    if (!valid_name(id)) {
      reply(c.res, not_found("no graph '" + id + "'"));
      return std::nullopt;
    }
    auto rg = db_.registered(c.user, id, version);
    if (!rg) {
      reply(c.res, from_error(rg.error()));
      return std::nullopt;
    }
    return std::move(*rg);
  }

  /// Reads `?limit=` (1 to max_page, default default_page) into `limit`;
  /// answers 400 itself when it is bad.
  bool page_limit(call& c, size_t& limit) {
    limit = default_page;
    if (!c.req.has_param("limit"))
      return true;
    uint64_t n = 0;
    if (!parse_uint(c.req.get_param_value("limit"), n) || n == 0 || n > max_page) {
      reply(c.res, bad_request("limit must be an integer from 1 to " + std::to_string(max_page)));
      return false;
    }
    limit = n;
    return true;
  }

  /// The caller's registered graphs, newest version each, by id; `next` is
  /// the cursor (the last id) while a page is full.
  void list_graphs(call& c) {
    std::string after;
    if (c.req.has_param("cursor")) {
      after = c.req.get_param_value("cursor");
      if (!valid_name(after))
        return reply(c.res, bad_request("bad cursor '" + after + "'"));
    }
    size_t limit = 0;
    if (!page_limit(c, limit))
      return;
    auto graphs = db_.registered_graphs(c.user, after, limit);
    if (!graphs)
      return reply(c.res, from_error(graphs.error()));
    json items = json::array();
    for (auto& g : *graphs)
      items.push_back({{"id", g.name},
                       {"version", g.version},
                       {"created_at", to_rfc3339(g.created_at)}});
    json next = graphs->size() == limit ? json(graphs->back().name) : json(nullptr);
    reply(c.res, 200, {{"items", std::move(items)}, {"next", next}});
  }

  void get_graph(call& c) {
    int version = 0;
    if (c.req.has_param("version")) {
      uint64_t v = 0;
      if (!parse_uint(c.req.get_param_value("version"), v) || v == 0 || v > 1u << 30)
        return reply(c.res, bad_request("version must be a positive integer"));
      version = static_cast<int>(v);
    }
    auto rg = owned_graph(c, c.capture, version);
    if (!rg)
      return;
    reply(c.res, 200, {{"id", rg->name}, {"version", rg->version}, {"graph", rg->document}});
  }

  void start_execution(call& c) {
    http_error err;
    auto body = body_object(c.req, {"inputs", "version"}, err);
    if (!body)
      return reply(c.res, err);
    int version = 0;
    if (auto v = body->find("version"); v != body->end()) {
      if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 1 << 30)
        return reply(c.res, bad_request("version must be a positive integer", "/version"));
      version = v->get<int>();
    }
    auto rg = owned_graph(c, c.capture, version);
    if (!rg)
      return;
    json inputs = json::object();
    if (auto i = body->find("inputs"); i != body->end()) {
      if (!i->is_object())
        return reply(c.res, bad_request(std::string{"inputs must be an object, got "}
                                          + i->type_name(),
                                        "/inputs"));
      inputs = *i;
    }
    auto g = parsed(*rg, err);
    if (!g)
      return reply(c.res, err);
    if (auto e = check_inputs(**g, inputs)) {
      // Name the input in the path: missing or undeclared.
      auto msg = message_of(e);
      std::string path = "/inputs";
      for (auto& name : (*g)->inputs)
        if (!inputs.contains(name)) {
          path += "/" + escape_pointer(name);
          break;
        }
      if (path == "/inputs")
        for (auto& kv : inputs.items())
          if (std::find((*g)->inputs.begin(), (*g)->inputs.end(), kv.key())
              == (*g)->inputs.end()) {
            path += "/" + escape_pointer(kv.key());
            break;
          }
      return reply(c.res, bad_request(msg, path, "invalid_input"));
    }
    start_options opts;
    opts.owner = c.user;
    opts.graph_version = rg->version;
    if (!live_quota_.reserve(c.user))
      return reply(c.res, live_quota_exceeded(c.user));
    auto h = rt_.start(*g, std::move(inputs), opts);
    live_quota_.commit(c.user, h ? h->id() : std::string{});
    if (!h)
      return reply(c.res, from_error(h.error()));
    spdlog::info("event=execution.start user={} execution={} graph={} version={}", c.user,
                 h->id(), rg->name, rg->version);
    if (auto doc = document(c, h->id(), true, false))
      reply(c.res, 201, *doc);
  }

  /// Requests a stop of `rec` for the caller and waits up to `wait` seconds
  /// (the stop protocol: every wait in it is bounded).
  /// @returns the answer's status and body.
  std::pair<int, json> stop_one(call& c, const execution_record& rec, stop_mode mode,
                                double wait) {
    auto ticket = rt_.stop(rec.id, mode, "user:" + c.user);
    if (!ticket) {
      auto e = from_error(ticket.error());
      return {e.status, error_body(e)};
    }
    // Nothing stored: `no_execution` at once. Else `wait` 0 answers 202 as
    // SPEC §7 says, however fast the target settled.
    auto result = ticket->request.id.empty() ? ticket->result : stop_result::stopping;
    if (result == stop_result::stopping && wait > 0)
      result = rt_.await_stop(*ticket, millis{static_cast<int64_t>(wait * 1000)});
    spdlog::info("event=stop.request user={} execution={} mode={} stop={} result={}", c.user,
                 rec.id, to_string(mode), ticket->request.id, to_string(result));
    // The answer is the execution document (SPEC §7), the stop's own
    // outcome inside it.
    auto doc = load_document(db_, rec.id, {true, false});
    if (!doc) {
      auto e = from_error(doc.error());
      return {e.status, error_body(e)};
    }
    std::optional<stop_record> stored;
    if (!ticket->request.id.empty())
      if (auto s = db_.stop(ticket->request.id))
        stored = std::move(*s);
    (*doc)["stop"] = stop_summary(stored ? &*stored : nullptr, to_string(result), to_string(mode));
    return {result == stop_result::stopping ? 202 : 200, std::move(*doc)};
  }

  /// Reads a stop body `{mode, wait}`; answers the error itself when bad.
  bool stop_body(call& c, stop_mode& mode, double& wait) {
    http_error err;
    auto body = body_object(c.req, {"mode", "wait"}, err);
    if (!body || !stop_options(*body, mode, wait, err)) {
      reply(c.res, err);
      return false;
    }
    return true;
  }

  void stop_execution(call& c) {
    auto rec = owned(c, c.capture);
    if (!rec)
      return;
    stop_mode mode;
    double wait;
    if (!stop_body(c, mode, wait))
      return;
    auto [status, answer] = stop_one(c, *rec, mode, wait);
    reply(c.res, status, answer);
  }

  void stop_graph(call& c) {
    stop_mode mode;
    double wait;
    if (!stop_body(c, mode, wait))
      return;
    auto rg = owned_graph(c, c.capture, 0);
    if (!rg)
      return;
    auto live = db_.live();
    if (!live)
      return reply(c.res, from_error(live.error()));
    // Stop the topmost unfinished executions of the graph: a stop reaches
    // their subtrees anyway.
    std::vector<execution_record> targets;
    for (auto& r : *live)
      if (r.owner == c.user && r.graph == rg->name && is_stoppable(r.status))
        targets.push_back(r);
    json stopped = json::array();
    std::vector<stop_ticket> tickets;
    for (auto& r : targets) {
      auto t = rt_.stop(r.id, mode, "user:" + c.user);
      if (t && t->result != stop_result::no_execution) {
        stopped.push_back(r.id);
        tickets.push_back(std::move(*t));
      }
    }
    auto deadline = std::chrono::steady_clock::now()
                    + millis{static_cast<int64_t>(wait * 1000)};
    for (auto& t : tickets) {
      auto left = std::chrono::duration_cast<millis>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || rt_.await_stop(t, left) == stop_result::stopping)
        break;
    }
    spdlog::info("event=graph.stop user={} graph={} stopped={}", c.user, rg->name,
                 stopped.size());
    reply(c.res, 200, {{"stopped", stopped}});
  }

  void list_executions(call& c) {
    execution_filter f;
    f.owner = c.user;
    if (c.req.has_param("status") && !c.req.get_param_value("status").empty()) {
      execution_status s;
      auto text = c.req.get_param_value("status");
      if (!from_string(text, s))
        return reply(c.res, bad_request("unknown status '" + text + "' (queued, running, "
                                        "stopping, stopped, completed, failed)"));
      f.status = s;
    }
    if (c.req.has_param("graph"))
      f.graph = c.req.get_param_value("graph");
    if (c.req.has_param("all")) {
      auto all = c.req.get_param_value("all");
      if (all != "true" && all != "false")
        return reply(c.res, bad_request("all must be true or false"));
      f.roots_only = all != "true";
    }
    if (c.req.has_param("cursor")) {
      f.before = c.req.get_param_value("cursor");
      if (!valid_id(f.before))
        return reply(c.res, bad_request("bad cursor '" + f.before + "'"));
    }
    if (!page_limit(c, f.limit))
      return;
    auto recs = db_.list(f);
    if (!recs)
      return reply(c.res, from_error(recs.error()));
    json items = json::array();
    for (auto& r : *recs)
      items.push_back(execution_summary(r));
    json next = recs->size() == f.limit ? json(recs->back().id) : json(nullptr);
    reply(c.res, 200, {{"items", std::move(items)}, {"next", next}});
  }

  /// Deletes a settled root's whole tree: 204; 409 `wrong_state` for a
  /// child or a live tree.
  void delete_execution(call& c) {
    auto rec = owned(c, c.capture);
    if (!rec)
      return;
    auto ids = db_.subtree_ids(rec->id);
    if (!ids)
      return reply(c.res, from_error(ids.error()));
    if (auto err = rt_.delete_tree(rec->id))
      return reply(c.res, from_error(err));
    metrics_.forget({ids->begin(), ids->end()});
    spdlog::info("event=execution.deleted user={} execution={}", c.user, rec->id);
    c.res.status = 204;
  }

  void get_execution(call& c) {
    if (auto rec = owned(c, c.capture))
      if (auto doc = document(c, rec->id, true, false))
        reply(c.res, 200, *doc);
  }

  void get_tree(call& c) {
    if (auto rec = owned(c, c.capture))
      if (auto doc = document(c, rec->id, true, true))
        reply(c.res, 200, *doc);
  }

  void resume_execution(call& c) {
    auto rec = owned(c, c.capture);
    if (!rec)
      return;
    http_error err;
    auto body = body_object(c.req, {"budget"}, err);
    if (!body)
      return reply(c.res, err);
    std::optional<double> budget;
    if (auto b = body->find("budget"); b != body->end()) {
      if (!b->is_number() || b->get<double>() < 0 || b->get<double>() > 1e15)
        return reply(c.res, bad_request("budget must be a number from 0 to 1e15", "/budget"));
      budget = b->get<double>();
    }
    auto before = rec->status;
    bool counted = is_terminal(before) && before != execution_status::completed;
    if (counted && !live_quota_.reserve(c.user))
      return reply(c.res, live_quota_exceeded(c.user));
    auto h = rt_.resume(rec->id, budget);
    if (counted)
      live_quota_.commit(c.user, h ? rec->id : std::string{});
    if (!h)
      return reply(c.res, from_error(h.error()));
    spdlog::info("event=execution.resume user={} execution={}", c.user, rec->id);
    // Answer once the resumed run is visible (its `running` record is
    // committed), or it already ended again.
    if (before != execution_status::completed)
      await_resumed(db_, *h, *rec);
    if (auto doc = document(c, rec->id, true, false))
      reply(c.res, 200, *doc);
  }

  void get_events(call& c) {
    auto rec = owned(c, c.capture);
    if (!rec)
      return;
    uint64_t after = 0;
    if (c.req.has_param("after") && !parse_uint(c.req.get_param_value("after"), after))
      return reply(c.res, bad_request("after must be a non-negative integer (an event seq)"));
    if (c.req.has_header("Last-Event-ID")
        && !parse_uint(c.req.get_header_value("Last-Event-ID"), after))
      return reply(c.res, bad_request("Last-Event-ID must be an event seq"));
    bool sse = c.req.get_header_value("Accept").find("text/event-stream") != std::string::npos;
    if (!sse) {
      auto events = subtree_events(*rec, after);
      if (!events)
        return reply(c.res, from_error(events.error()));
      json items = json::array();
      for (auto& e : *events)
        items.push_back(event_document(e));
      return reply(c.res, 200, {{"items", std::move(items)}, {"next", nullptr}});
    }
    stream_events(c, *rec, after);
  }

  /// Events of `rec`'s subtree with seq > `after`, at most `limit`.
  caf::expected<std::vector<event_record>> subtree_events(const execution_record& rec,
                                                           uint64_t after, size_t limit = 0) {
    auto events = db_.tree_events(rec.root_id, after, limit);
    if (!events || rec.id == rec.root_id)
      return events;
    auto ids = db_.subtree_ids(rec.id);
    if (!ids)
      return ids.error();
    std::vector<event_record> out;
    for (auto& e : *events)
      if (ids->count(e.execution_id) > 0)
        out.push_back(std::move(e));
    return out;
  }

  /// Streams the events of `rec`'s subtree as Server-Sent Events from seq
  /// `after` until the subtree is no longer running; then one `end` event
  /// (no `id`, so a client's Last-Event-ID stays the last seq) with the final
  /// status, and the stream closes. A settled subtree with nothing after
  /// `after` answers 204: the standard tells EventSource to stop reconnecting.
  void stream_events(call& c, const execution_record& rec, uint64_t after) {
    {
      // Status first, then events (see below).
      auto now = db_.execution(rec.id);
      if (!now || !is_stoppable(now->status)) {
        auto more = subtree_events(rec, after, 1);
        if (!more)
          return reply(c.res, from_error(more.error()));
        if (more->empty()) {
          c.res.status = 204;
          return;
        }
      }
    }
    struct stream_state {
      uint64_t cursor;
      bool opened = false;
    };
    auto st = std::make_shared<stream_state>(stream_state{after});
    auto id = rec.id;
    c.res.set_header("Cache-Control", "no-cache");
    c.res.set_header("X-Accel-Buffering", "no");
    c.res.set_chunked_content_provider(
      "text/event-stream", [this, st, id, rec](size_t, httplib::DataSink& sink) {
        for (;;) {
          auto gen = events_.generation();
          // Status first, then events: once terminal, everything up to the
          // terminal commit is in the read that follows.
          auto now = db_.execution(id);
          bool settled = !now || !is_stoppable(now->status);
          auto events = subtree_events(rec, st->cursor, 1000);
          if (!events)
            return false;
          std::string out;
          if (!st->opened) {
            st->opened = true;
            out = "retry: " + std::to_string(sse_retry_ms) + "\n\n";
          }
          for (auto& e : *events) {
            out += "id: " + std::to_string(e.seq) + "\nevent: " + e.type
                   + "\ndata: " + dump_json(event_document(e)) + "\n\n";
            st->cursor = std::max(st->cursor, e.seq);
          }
          if (!out.empty() && !sink.write(out.data(), out.size()))
            return false;
          if (events->size() >= 1000)
            continue; // more to replay
          if (settled) {
            json end{{"execution_id", id},
                     {"status", now ? json(to_string(now->status)) : json(nullptr)},
                     {"last_seq", st->cursor}};
            auto last = "event: end\ndata: " + dump_json(end) + "\n\n";
            if (!sink.write(last.data(), last.size()))
              return false;
            sink.done();
            return true;
          }
          if (!out.empty())
            return true; // let httplib flush; it calls again
          if (!events_.wait(gen, sse_keepalive)) {
            sink.done(); // shutting down
            return true;
          }
          if (events_.generation() == gen) {
            static const std::string keepalive = ": keep-alive\n\n";
            if (!sink.write(keepalive.data(), keepalive.size()))
              return false;
            return true;
          }
        }
      });
  }

  // -- agents (SPEC §9, §13 rule 21) ---------------------------------------------------

  /// Agent `name` of the caller; else answers 404 (another user's agent
  /// too) or the store's error itself.
  std::optional<agent_record> owned_agent(call& c, const std::string& name) {
    if (check_agent_name(name).empty()) {
      auto ag = db_.agent(c.user, name);
      if (ag)
        return std::move(*ag);
      if (!is(ag.error(), persistence_errc::not_found)) {
        reply(c.res, from_error(ag.error()));
        return std::nullopt;
      }
    }
    reply(c.res, not_found("no agent '" + name + "'"));
    return std::nullopt;
  }

  /// The graph of a new agent from the body's `graph`: a graph document, or
  /// the id of a registered graph of the caller. Answers the error itself.
  std::shared_ptr<const graph> agent_graph(call& c, const json& field) {
    auto fail = [&](http_error e) {
      reply(c.res, e);
      return nullptr;
    };
    if (field.is_string()) {
      auto id = field.get<std::string>();
      auto rg = valid_name(id) ? db_.registered(c.user, id, 0)
                               : caf::expected<registered_graph>{
                                   make_error(persistence_errc::not_found, "bad graph id")};
      if (!rg && !is(rg.error(), persistence_errc::not_found))
        return fail(from_error(rg.error()));
      if (!rg)
        return fail(bad_request("no registered graph '" + id
                                  + "': give a graph document or the id of one of your graphs",
                                "/graph", "invalid_graph"));
      http_error err;
      auto g = parsed(*rg, err);
      if (!g) {
        err.path = "/graph";
        return fail(err);
      }
      if (auto errors = check_agent_graph(**g); !errors.empty()) {
        // The document is not in the body: name the field, keep the graph's
        // own paths in the message.
        auto e = graph_errors(errors);
        e.path = "/graph";
        e.message = "graph '" + id + "' cannot be an agent's graph: " + e.message;
        return fail(e);
      }
      return *g;
    }
    if (!field.is_object())
      return fail(bad_request(std::string{"graph must be a graph document (an object) or the "
                                          "id of a registered graph, got "}
                                + field.type_name(),
                              "/graph"));
    if (c.req.body.size() > max_graph_bytes && dump_json(field).size() > max_graph_bytes)
      return fail({413, "too_large",
                   "a graph document is at most " + std::to_string(max_graph_bytes) + " bytes",
                   "/graph"});
    auto result = rt_.parse_document(field);
    auto errors = result ? check_agent_graph(*result.value) : result.errors;
    if (!errors.empty()) {
      for (auto& e : errors)
        e.path = "/graph" + e.path;
      return fail(graph_errors(errors));
    }
    return result.value;
  }

  void post_agent(call& c) {
    http_error err;
    auto body = body_object(c.req, {"name", "graph", "on_busy", "node"}, err);
    if (!body)
      return reply(c.res, err);
    auto name = body->find("name");
    if (name == body->end() || !name->is_string())
      return reply(c.res, bad_request("an agent needs a \"name\" (a string)", "/name"));
    auto agent = name->get<std::string>();
    if (auto why = check_agent_name(agent); !why.empty())
      return reply(c.res, bad_request(why, "/name"));
    auto policy = busy_policy::cancel_previous;
    if (auto p = body->find("on_busy"); p != body->end() && !p->is_null())
      if (!p->is_string() || !from_string(p->get<std::string>(), policy))
        return reply(c.res, bad_request("on_busy must be \"cancel_previous\", \"queue\" or "
                                        "\"reject\"",
                                        "/on_busy"));
    std::string node;
    if (auto n = body->find("node"); n != body->end() && !n->is_null()) {
      if (!n->is_string())
        return reply(c.res, bad_request("node must be a node name (a string)", "/node"));
      node = n->get<std::string>();
      if (auto why = check_node_name(node); !why.empty())
        return reply(c.res, bad_request(why, "/node"));
    }
    auto field = body->find("graph");
    if (field == body->end())
      return reply(c.res, bad_request("an agent needs a \"graph\": a graph document or the id "
                                      "of a registered graph",
                                      "/graph"));
    auto g = agent_graph(c, *field);
    if (!g)
      return;
    auto stored = rt_.create_agent(c.user, agent, *g, policy, node);
    if (!stored)
      return reply(c.res, from_error(stored.error()));
    spdlog::info("event=agent.{} user={} agent={} on_busy={} node={}",
                 stored->second ? "created" : "replaced", c.user, stored->first.name,
                 to_string(policy), node.empty() ? "-" : node);
    reply(c.res, stored->second ? 201 : 200, agent_document(stored->first));
  }

  void list_agents(call& c) {
    auto all = db_.agents(c.user);
    if (!all)
      return reply(c.res, from_error(all.error()));
    json items = json::array();
    for (auto& ag : *all)
      items.push_back(agent_document(ag));
    reply(c.res, 200, {{"items", std::move(items)}, {"next", nullptr}});
  }

  // -- cluster (SPEC §10, §13 rule 22) -------------------------------------------------

  /// `GET /v1/nodes`: the members of the cluster, the supervisor first (this
  /// node alone, named `local`, without a cluster). Any user may read it.
  void list_nodes(call& c) {
    json items = json::array();
    for (auto& n : rt_.nodes())
      items.push_back(node_document(n));
    reply(c.res, 200, {{"items", std::move(items)}, {"next", nullptr}});
  }

  void get_agent(call& c) {
    auto ag = owned_agent(c, c.capture);
    if (!ag)
      return;
    auto entries = db_.history(c.user, ag->name);
    if (!entries)
      return reply(c.res, from_error(entries.error()));
    auto live = db_.agent_runs(c.user, ag->name);
    if (!live)
      return reply(c.res, from_error(live.error()));
    auto doc = agent_document(*ag);
    doc["history"] = json::array();
    for (auto& e : *entries)
      doc["history"].push_back(history_document(e));
    doc["runs"] = json::array();
    for (auto& r : *live)
      doc["runs"].push_back(r.first);
    reply(c.res, 200, doc);
  }

  void message_agent(call& c) {
    auto ag = owned_agent(c, c.capture);
    if (!ag)
      return;
    http_error err;
    auto body = body_object(c.req, {"message"}, err);
    if (!body)
      return reply(c.res, err);
    auto m = body->find("message");
    if (m == body->end())
      return reply(c.res, bad_request("a message to an agent needs \"message\"", "/message"));
    auto r = send(c, ag->name, std::move(*m));
    if (!r)
      return;
    spdlog::info("event=agent.message user={} agent={} status={} execution={}", c.user,
                 ag->name, r->status, r->execution_id);
    if (r->status == "busy" || r->status == "cancelled")
      return reply(c.res, {409, r->status, r->error, ""});
    if (r->execution_id.empty()) {
      // Nothing ran: the node is closing, or the agent's graph no longer
      // validates on this node.
      if (r->status == "stopped")
        return reply(c.res, {503, "shutting_down", r->error, ""});
      return reply(c.res, {409, "wrong_state", r->error, ""});
    }
    json answer = {{"reply", r->status == "completed" ? r->reply : json(nullptr)},
                   {"execution_id", r->execution_id},
                   {"status", r->status}};
    if (!r->reason.empty())
      answer["reason"] = r->reason;
    if (!r->error.empty())
      answer["error"] = r->error;
    reply(c.res, 200, answer);
  }

  /// Sends `message` to agent `name` of the caller and waits for the end of
  /// its run. The call blocks on a thread of its own, so a shutdown answers
  /// at once (503) instead of waiting for the run. Answers errors itself.
  std::optional<agent_reply> send(call& c, const std::string& name, json message) {
    struct pending {
      bool done = false;
      std::optional<caf::expected<agent_reply>> result;
    };
    auto p = std::make_shared<pending>();
    {
      std::lock_guard<std::mutex> guard{sends_mtx_};
      if (closing_ || sends_live_ >= max_agent_sends) {
        reply(c.res, closing_ ? http_error{503, "shutting_down", "the node is shutting down", ""}
                              : http_error{503, "overloaded",
                                           "too many agent messages waiting on this node", ""});
        return std::nullopt;
      }
      ++sends_live_;
    }
    auto task = [this, p, owner = c.user, name, who = "user:" + c.user,
                 message = std::move(message)]() mutable {
      std::optional<caf::expected<agent_reply>> r;
      try {
        r = rt_.send_to_agent(owner, name, std::move(message), who);
      } catch (const std::exception& ex) {
        r = caf::expected<agent_reply>{
          make_error(runtime_errc::shutting_down, std::string{"no answer: "} + ex.what())};
      }
      std::lock_guard<std::mutex> guard{sends_mtx_};
      p->result = std::move(r);
      p->done = true;
      --sends_live_;
      sends_cv_.notify_all();
    };
    try {
      std::thread{std::move(task)}.detach();
    } catch (const std::system_error& ex) {
      std::lock_guard<std::mutex> guard{sends_mtx_};
      --sends_live_;
      sends_cv_.notify_all();
      reply(c.res, {503, "overloaded", std::string{"cannot start a thread: "} + ex.what(), ""});
      return std::nullopt;
    }
    std::unique_lock<std::mutex> lock{sends_mtx_};
    sends_cv_.wait(lock, [&] { return p->done || closing_; });
    if (!p->done) {
      lock.unlock();
      reply(c.res, {503, "shutting_down",
                    "the node is shutting down: the agent's run is stopped with reason "
                    "'shutdown'",
                    ""});
      return std::nullopt;
    }
    auto r = std::move(*p->result);
    lock.unlock();
    if (!r) {
      reply(c.res, from_error(r.error()));
      return std::nullopt;
    }
    return std::move(*r);
  }

  void cancel_agent(call& c) {
    auto ag = owned_agent(c, c.capture);
    if (!ag)
      return;
    http_error err;
    if (auto body = body_object(c.req, {}, err); !body)
      return reply(c.res, err);
    auto result = rt_.cancel_agent(c.user, ag->name, "user:" + c.user);
    if (!result)
      return reply(c.res, from_error(result.error()));
    spdlog::info("event=agent.cancel user={} agent={} result={}", c.user, ag->name, *result);
    reply(c.res, 200, {{"result", *result}});
  }

  /// The 409 of a user at `quotas.live_executions`.
  http_error live_quota_exceeded(const std::string& user) const {
    auto n = std::to_string(live_quota_.limit());
    return {409, "quota_exceeded",
            "quota exceeded: user '" + user + "' has " + n + " live executions, the most "
              "quotas.live_executions allows (" + n + "); wait for one to finish or stop one",
            ""};
  }

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

// -- logging ---------------------------------------------------------------------------

void setup_logging() {
  auto logger = spdlog::stderr_logger_mt("canopy");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  spdlog::set_default_logger(logger);
  spdlog::flush_on(spdlog::level::info);
}

/// Runs the node on this thread until `stop_requested` is set.
/// @returns the exit code.
int serve(const server_options& opts, std::atomic<bool>& stop_requested, std::mutex& mtx,
          std::condition_variable& cv, pthread_t main_thread) {
  auto& cfg = opts.config;
  auto fatal = [&](int code) {
    pthread_kill(main_thread, SIGUSR1); // wake the signal thread
    return code;
  };
  std::string host;
  int port = 0;
  if (!split_host_port(cfg.listen, host, port)) {
    spdlog::error("event=config error=\"listen: expected HOST:PORT, got '{}'\"", cfg.listen);
    return fatal(2);
  }
  if (cfg.users.empty()) {
    spdlog::error("event=config error=\"no users: configure users in --config\"");
    return fatal(2);
  }
  auto m = std::make_shared<metrics>();
  runtime_options ro;
  ro.home = cfg.home.empty() ? default_home() : cfg.home;
  ro.max_parallel = cfg.max_parallel;
  ro.tools = cfg.tools;
  ro.allow_inline_commands = cfg.allow_inline_commands;
  ro.allow_graph_files = false;
  ro.on_commit = [m](double s) { m->observe_commit(s); };
  std::string cluster_host;
  if (cfg.cluster && !cfg.cluster->listen.empty()) {
    auto& cc = *cfg.cluster;
    int cluster_port = 0;
    if (!split_host_port(cc.listen, cluster_host, cluster_port)) {
      spdlog::error("event=config error=\"cluster.listen: expected HOST:PORT, got '{}'\"",
                    cc.listen);
      return fatal(2);
    }
    cluster_listen cl;
    cl.host = cluster_host;
    cl.port = static_cast<uint16_t>(cluster_port);
    cl.secret = cc.secret;
    if (cl.secret.empty())
      if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
        cl.secret = env;
    if (cl.secret.empty()) {
      spdlog::error("event=config error=\"the cluster needs a secret: cluster.secret in the "
                    "config, or $CANOPY_CLUSTER_SECRET\"");
      return fatal(2);
    }
    cl.tls = cc.tls;
    cl.heartbeat = cc.heartbeat;
    cl.timeout = cc.timeout;
    cl.log = [](const std::string& event, const std::string& node, const std::string& detail) {
      auto level = event == "joined" ? spdlog::level::info : spdlog::level::warn;
      spdlog::log(level, "event=node.{} node={} detail={}", log_value(event), log_value(node),
                  log_value(detail));
    };
    ro.cluster = std::move(cl);
  }
  auto rt = runtime::open(ro);
  if (!rt) {
    auto msg = message_of(rt.error());
    // A cluster port that cannot be opened is the node's address, not its
    // store: an unusable configuration, as an HTTP port that cannot be bound.
    if (is(rt.error(), runtime_errc::cluster_port)) {
      spdlog::error("event=cluster.listen address={} error={}", cfg.cluster->listen,
                    log_value(msg));
      return fatal(2);
    }
    spdlog::error("event=store.open home={} error=\"{}\"", ro.home, msg);
    return fatal(5);
  }
  for (auto& id : (*rt)->recovered())
    spdlog::warn("event=execution.interrupted execution={}", id);
  if (auto err = m->load(*(*rt)->db())) {
    spdlog::error("event=store.read error=\"{}\"", message_of(err));
    return fatal(5);
  }
  notifier events;
  auto db = (*rt)->db();
  auto sub = (*rt)->subscribe([m, db, &events](const event_record& e) {
    m->on_event(e, *db);
    if (e.type.compare(0, 10, "execution.") == 0 || e.type.compare(0, 5, "stop.") == 0)
      spdlog::info("event={} execution={} root={} status={} reason={}", e.type, e.execution_id,
                   e.root_id, e.status, e.reason);
    events.bump();
  });
  if (opts.resume_interrupted) {
    // Every root left interrupted, by this start's recovery or an earlier
    // one; children resume with their roots.
    execution_filter f;
    f.status = execution_status::stopped;
    auto stopped = db->list(f);
    if (!stopped) {
      spdlog::error("event=store.read error=\"{}\"", message_of(stopped.error()));
      return fatal(5);
    }
    for (auto& rec : *stopped) {
      if (rec.reason != "interrupted")
        continue;
      auto& id = rec.id;
      auto h = (*rt)->resume(id);
      // Visible as resumed before the port opens: a client that connects
      // right after `listening on` never sees it still stopped.
      if (h)
        await_resumed(*db, *h, rec);
      if (h)
        spdlog::info("event=execution.resume execution={} why=resume-interrupted", id);
      else
        spdlog::error("event=execution.resume execution={} error=\"{}\"", id,
                      message_of(h.error()));
    }
  }
  http_listener svr{http_limits{}, opts.tls};
  svr.set_payload_max_length(cfg.max_request_bytes);
  svr.set_read_timeout(30, 0);
  svr.set_write_timeout(30, 0);
  api_server api{cfg, **rt, *m, events};
  api.install(svr);
  int bound = svr.bind(host, port);
  if (bound < 0) {
    spdlog::error("event=listen address={} error=\"cannot bind\"", cfg.listen);
    sub.cancel();
    return fatal(2);
  }
  std::thread http{[&svr] { svr.listen_after_bind(); }};
  std::cout << "listening on " << host << ":" << bound << std::endl;
  spdlog::info("event=listening address={}:{} home={} tls={}", host, bound, ro.home,
               opts.tls ? "on" : "off");
  if (ro.cluster) {
    auto address = (cluster_host.find(':') != std::string::npos ? "[" + cluster_host + "]"
                                                                 : cluster_host)
                   + ":" + std::to_string((*rt)->cluster_port());
    std::cout << "cluster on " << address << std::endl;
    spdlog::info("event=cluster.listening address={} name={} tls={}", address,
                 ro.cluster->name, ro.cluster->tls ? "on" : "off");
  }
  std::optional<pruner> retention;
  retention.emplace(**rt, *m, cfg.retention);
  {
    std::unique_lock<std::mutex> lock{mtx};
    cv.wait(lock, [&] { return stop_requested.load(); });
  }
  retention.reset();
  // Shutdown sequence: stop taking requests and end the streams, then stop
  // every live execution with reason `shutdown` (snapshotted) and close the
  // store.
  spdlog::info("event=shutdown phase=http");
  events.shutdown();
  api.close();
  svr.stop();
  http.join();
  sub.cancel();
  spdlog::info("event=shutdown phase=executions live={}", (*rt)->live_executions());
  rt->reset();
  spdlog::info("event=shutdown phase=done");
  return 0;
}

} // namespace

int run_server(const server_options& opts) {
  setup_logging();
  // Signals are taken by this thread only: block them before any other thread
  // exists, so every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::atomic<bool> stop_requested{false};
  std::mutex mtx;
  std::condition_variable cv;
  std::atomic<int> code{0};
  auto self = pthread_self();
  // The node runs on its own thread; this one only waits for a signal (a
  // thread blocked in sigwait must not call into CAF, see runtime.hpp).
  std::thread node{[&] { code = serve(opts, stop_requested, mtx, cv, self); }};
  int sig = 0;
  sigwait(&set, &sig);
  if (sig != SIGUSR1)
    spdlog::info("event=signal signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  {
    std::lock_guard<std::mutex> guard{mtx};
    stop_requested = true;
  }
  cv.notify_all();
  node.join();
  return code;
}

} // namespace canopy
