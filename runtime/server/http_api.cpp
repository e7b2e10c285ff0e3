#include "runtime/server/http_api.hpp"

#include <algorithm>
#include <cctype>

#include "persistence/graph.hpp"
#include "runtime/server/assets.hpp"
#include "runtime/node/logging.hpp"
#include "runtime/node/memory.hpp"

namespace canopy::core::api {

// -- errors ---------------------------------------------------------------------

http_error bad_request(std::string message, std::string path, std::string code) {
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
  return check_graph_id(s).empty();
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

api_server::api_server(const node_config& cfg, runtime& rt, metrics& m, notifier& n)
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
  add("POST", "/v1/executions/{id}/signals/{name}", true, &api_server::post_signal);
  add("GET", "/v1/executions/{id}/signals", true, &api_server::list_signals);
  add("GET", "/v1/waits", true, &api_server::list_waits);
  add("POST", "/v1/agents", true, &api_server::post_agent);
  add("GET", "/v1/agents", true, &api_server::list_agents);
  add("GET", "/v1/agents/{name}", true, &api_server::get_agent);
  add("POST", "/v1/agents/{name}/messages", true, &api_server::message_agent);
  add("POST", "/v1/agents/{name}/cancel", true, &api_server::cancel_agent);
  add("GET", "/v1/nodes", true, &api_server::list_nodes);
}

api_server::~api_server() {
  std::unique_lock<std::mutex> lock{sends_mtx_};
  sends_cv_.wait(lock, [this] { return sends_live_ == 0; });
}

void api_server::close() {
  std::lock_guard<std::mutex> guard{sends_mtx_};
  closing_ = true;
  sends_cv_.notify_all();
}

void api_server::install(httplib::Server& svr) {
  metrics_.set_routes(routes_.labels());
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    without_brotli(req);
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

void api_server::without_brotli(const httplib::Request& req) {
  // httplib's own Request, not const (it hands hooks a const reference):
  // its Accept-Encoding decides the answer's encoding after the handler.
  auto& headers = const_cast<httplib::Headers&>(req.headers);
  auto it = headers.find("Accept-Encoding");
  if (it == headers.end() || it->second.find("br") == std::string::npos)
    return;
  std::string kept;
  size_t begin = 0;
  while (begin <= it->second.size()) {
    auto end = std::min(it->second.find(',', begin), it->second.size());
    auto token = it->second.substr(begin, end - begin);
    auto first = token.find_first_not_of(" \t");
    auto name = first == std::string::npos ? std::string{} : token.substr(first);
    name = name.substr(0, name.find_first_of(" \t;"));
    if (!name.empty() && name != "br")
      kept += (kept.empty() ? "" : ", ") + token.substr(first);
    begin = end + 1;
  }
  it->second = kept;
}

bool api_server::expects_body(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

void api_server::add(const char* method, const char* pattern, bool auth, handler fn) {
  routes_.add(method, pattern);
  handlers_.push_back({auth, fn});
}

void api_server::guarded_dispatch(const httplib::Request& req, httplib::Response& res) {
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

void api_server::dispatch(const httplib::Request& req, httplib::Response& res) {
  auto m = routes_.match(req.method, req.path);
  if (!m) {
    if (m.path_known) {
      // RFC 9110: a 405 lists the methods the resource has.
      std::string allow;
      for (const char* method : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
        if (routes_.match(method, req.path))
          allow += (allow.empty() ? "" : ", ") + std::string{method};
      res.set_header("Allow", allow);
      return reply(res, {405, "method_not_allowed",
                         "method " + req.method + " is not allowed on " + req.path
                           + " (allowed: " + allow + ")",
                         ""});
    }
    return reply(res, not_found("no route " + req.method + " " + req.path));
  }
  auto& [auth, fn] = handlers_[m.index];
  call c{req, res, {}, std::move(m.capture), std::move(m.more)};
  if (auth) {
    http_error err;
    auto user = authenticate(req, err);
    if (!user) {
      // RFC 6750: the scheme a client must use, nothing about who exists.
      if (err.status == 401)
        res.set_header("WWW-Authenticate", "Bearer realm=\"canopy\"");
      return reply(res, err);
    }
    c.user = *user;
  }
  (this->*fn)(c);
}

std::optional<std::string> api_server::authenticate(const httplib::Request& req,
                                                    http_error& err) const {
  // The values as httplib stored them: get_header_value() returns a C string,
  // which ends at a NUL (`Bearer TOKEN\0zzz` would read as `Bearer TOKEN`).
  auto [first, last] = req.headers.equal_range("Authorization");
  for (auto i = first; i != last; ++i) {
    bool control = std::any_of(i->second.begin(), i->second.end(), [](char ch) {
      auto u = static_cast<unsigned char>(ch);
      return (u < 0x20 && u != '\t') || u == 0x7f;
    });
    if (control) {
      err = bad_request("the Authorization header holds a control character");
      return std::nullopt;
    }
  }
  err = {401, "unauthorized", "missing or unknown bearer token (Authorization: Bearer TOKEN)",
         ""};
  if (first == last)
    return std::nullopt;
  auto& h = first->second;
  const std::string scheme = "bearer ";
  auto same = [](char lower, char ch) {
    return lower == std::tolower(static_cast<unsigned char>(ch));
  };
  if (h.size() <= scheme.size() || !std::equal(scheme.begin(), scheme.end(), h.begin(), same))
    return std::nullopt;
  return users_.find(h.substr(scheme.size()));
}

std::optional<execution_record> api_server::owned(call& c, const std::string& id) {
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

namespace {

/// `doc`, or nothing once its error is answered.
std::optional<json> or_answer(httplib::Response& res, caf::expected<json> doc) {
  if (!doc) {
    reply(res, from_error(doc.error()));
    return std::nullopt;
  }
  return std::move(*doc);
}

} // namespace

std::optional<json> api_server::document(call& c, const std::string& id, bool steps, bool children) {
  return or_answer(c.res, load_document(db_, id, document_options{steps, children}));
}

std::optional<json> api_server::document(call& c, execution_record rec, bool steps,
                                         bool children) {
  return or_answer(c.res, load_document(db_, std::move(rec), document_options{steps, children}));
}

caf::expected<std::shared_ptr<const graph>> api_server::parsed(const registered_graph& rg,
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

http_error api_server::graph_errors(const std::vector<graph_error>& errors) {
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

void api_server::healthz(call& c) {
  if (auto seq = db_.last_seq(); !seq)
    return reply(c.res, from_error(seq.error()));
  auto log = current_log_status();
  reply(c.res, 200,
        {{"status", "ok"}, {"log", log.stalled ? "stalled" : "ok"}, {"log_dropped", log.dropped}});
}

void api_server::get_metrics(call& c) {
  auto usage = db_.usage();
  if (!usage)
    return reply(c.res, from_error(usage.error()));
  auto executions = db_.status_counts();
  if (!executions)
    return reply(c.res, from_error(executions.error()));
  auto body = metrics_.render(rt_.live_executions(), *executions, usage->used_bytes(),
                              current_log_status().dropped);
  body += "# HELP canopy_waiting_steps Steps of this node's executions waiting for a signal.\n"
          "# TYPE canopy_waiting_steps gauge\n"
          "canopy_waiting_steps "
          + std::to_string(rt_.waiting_steps()) + "\n";
  if (heap_figures h; allocator_figures(h))
    body += "# HELP canopy_heap_bytes The server's heap in use (allocated and not freed)\n"
            "# TYPE canopy_heap_bytes gauge\n"
            "canopy_heap_bytes "
            + std::to_string(h.used_bytes) + "\n";
  c.res.status = 200;
  c.res.set_content(body, "text/plain; version=0.0.4");
}

void api_server::to_dashboard(call& c) {
  c.res.status = 302;
  c.res.set_header("Location", "/ui/");
}

void api_server::get_page(call& c) {
  std::string name = c.capture.empty() ? "index.html" : c.capture;
  std::string body;
  if (!web_dir_.empty()) {
    auto text = read_web_file(web_dir_, name);
    if (!text)
      return reply(c.res, not_found("no file /ui/" + name));
    body = std::move(*text);
  } else {
    auto a = find_asset("/ui/" + name);
    if (a == nullptr || content_type_of(name).empty())
      return reply(c.res, not_found("no file /ui/" + name));
    body = a->body();
  }
  std::string type{content_type_of(name)};
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

void api_server::get_asset(call& c) {
  auto a = find_asset(c.req.path);
  if (a == nullptr)
    return reply(c.res, not_found("no file " + c.req.path));
  c.res.status = 200;
  c.res.set_header("Cache-Control", "no-cache");
  c.res.set_content(std::string{a->body()}, std::string{content_type_of(a->path)});
}

bool api_server::page_limit(call& c, size_t& limit) {
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

http_error api_server::live_quota_exceeded(const std::string& user) const {
  auto n = std::to_string(live_quota_.limit());
  return {409, "quota_exceeded",
          "quota exceeded: user '" + user + "' has " + n + " live executions, the most "
            "quotas.live_executions allows (" + n + "); wait for one to finish or stop one",
          ""};
}

} // namespace canopy::core::api
