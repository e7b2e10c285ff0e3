#include "runtime/server/http_api.hpp"

#include <algorithm>

#include "persistence/retention.hpp"

namespace canopy::core::api {

void api_server::post_graph(call& c) {
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

std::optional<registered_graph> api_server::owned_graph(call& c, const std::string& id, int version) {
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

void api_server::list_graphs(call& c) {
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

void api_server::get_graph(call& c) {
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

void api_server::start_execution(call& c) {
  http_error err;
  auto body = body_object(c.req, {"inputs", "version", "signals"}, err);
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
  if (auto sig = body->find("signals"); sig != body->end()) {
    auto bad = check_start_signals(**g, *sig);
    if (!bad.empty())
      return reply(c.res, bad_request(bad.front().message, bad.front().path, "invalid_input"));
    opts.signals = *sig;
    opts.signals_from = "user:" + c.user;
  }
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

std::pair<int, json> api_server::stop_one(call& c, const execution_record& rec, stop_mode mode,
                              double wait) {
  auto ticket = rt_.stop(rec.id, mode, "user:" + c.user);
  if (!ticket) {
    auto e = from_error(ticket.error());
    return {e.status, error_body(e)};
  }
  // Nothing stored: `no_execution` at once. Else `wait` 0 answers 202 as
  // runtime/docs/reference/http.md says, however fast the target settled.
  auto result = ticket->request.id.empty() ? ticket->result : stop_result::stopping;
  if (result == stop_result::stopping && wait > 0)
    result = rt_.await_stop(*ticket, millis{static_cast<int64_t>(wait * 1000)});
  spdlog::info("event=stop.request user={} execution={} mode={} stop={} result={}", c.user,
               rec.id, to_string(mode), ticket->request.id, to_string(result));
  // The answer is the execution document (runtime/docs/reference/http.md), the stop's own
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

bool api_server::stop_body(call& c, stop_mode& mode, double& wait) {
  http_error err;
  auto body = body_object(c.req, {"mode", "wait"}, err);
  if (!body || !stop_options(*body, mode, wait, err)) {
    reply(c.res, err);
    return false;
  }
  return true;
}

void api_server::stop_execution(call& c) {
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

void api_server::stop_graph(call& c) {
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
  std::vector<stop_order> orders;
  for (auto& r : targets)
    orders.push_back({r.id, {}});
  // Within one `wait` for all of them; those not settled by then are
  // `pending`, and the answer is 202 (as a single stop's with `wait` 0).
  // A stop that failed, or found its target ended, is in neither list.
  auto outcomes = rt_.stop_all(std::move(orders), mode, "user:" + c.user,
                               millis{static_cast<int64_t>(wait * 1000)});
  json stopped = json::array();
  json pending = json::array();
  for (auto& o : outcomes) {
    if (o.error || o.ticket.result == stop_result::no_execution)
      continue;
    stopped.push_back(o.id);
    if (o.result == stop_result::stopping)
      pending.push_back(o.id);
  }
  spdlog::info("event=graph.stop user={} graph={} stopped={} pending={}", c.user, rg->name,
               stopped.size(), pending.size());
  reply(c.res, pending.empty() ? 200 : 202, {{"stopped", stopped}, {"pending", pending}});
}

void api_server::list_executions(call& c) {
  execution_filter f;
  f.owner = c.user;
  bool waiting = false;
  if (c.req.has_param("status") && !c.req.get_param_value("status").empty()) {
    execution_status s;
    auto text = c.req.get_param_value("status");
    waiting = text == "waiting";
    if (!waiting && !from_string(text, s))
      return reply(c.res, bad_request("unknown status '" + text + "' (queued, running, "
                                      "stopping, stopped, completed, failed, waiting)"));
    if (!waiting)
      f.status = s;
  }
  if (c.req.has_param("graph"))
    f.graph = c.req.get_param_value("graph");
  if (c.req.has_param("since")) {
    auto text = c.req.get_param_value("since");
    auto age = parse_age(text);
    if (!age)
      return reply(c.res, bad_request("since: " + message_of(age.error())));
    f.created_after = std::max<int64_t>(1, now_ms() - age->count());
  }
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
  auto recs = waiting ? list_waiting(db_, f) : db_.list(f);
  if (!recs)
    return reply(c.res, from_error(recs.error()));
  json items = json::array();
  for (auto& r : *recs)
    items.push_back(execution_summary(r));
  json next = recs->size() == f.limit ? json(recs->back().id) : json(nullptr);
  reply(c.res, 200, {{"items", std::move(items)}, {"next", next}});
}

void api_server::delete_execution(call& c) {
  auto rec = owned(c, c.capture);
  if (!rec)
    return;
  if (auto err = rt_.delete_tree(rec->id))
    return reply(c.res, from_error(err));
  spdlog::info("event=execution.deleted user={} execution={}", c.user, rec->id);
  c.res.status = 204;
}

void api_server::get_execution(call& c) {
  if (auto rec = owned(c, c.capture))
    if (auto doc = document(c, std::move(*rec), true, false))
      reply(c.res, 200, *doc);
}

void api_server::get_tree(call& c) {
  if (auto rec = owned(c, c.capture))
    if (auto doc = document(c, std::move(*rec), true, true))
      reply(c.res, 200, *doc);
}

void api_server::resume_execution(call& c) {
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

} // namespace canopy::core::api
