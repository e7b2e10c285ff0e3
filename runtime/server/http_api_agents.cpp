#include "runtime/server/http_api.hpp"

namespace canopy::core::api {

std::optional<agent_record> api_server::owned_agent(call& c, const std::string& name) {
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

std::shared_ptr<const graph> api_server::agent_graph(call& c, const json& field) {
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

void api_server::post_agent(call& c) {
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

void api_server::list_agents(call& c) {
  auto all = db_.agents(c.user);
  if (!all)
    return reply(c.res, from_error(all.error()));
  json items = json::array();
  for (auto& ag : *all)
    items.push_back(agent_document(ag));
  reply(c.res, 200, {{"items", std::move(items)}, {"next", nullptr}});
}

void api_server::list_nodes(call& c) {
  json items = json::array();
  for (auto& n : rt_.nodes())
    items.push_back(node_document(n));
  reply(c.res, 200, {{"items", std::move(items)}, {"next", nullptr}});
}

void api_server::get_agent(call& c) {
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

void api_server::message_agent(call& c) {
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
               ag->name, to_string(r->status), r->execution_id);
  if (r->status == reply_status::busy || r->status == reply_status::cancelled)
    return reply(c.res, {409, to_string(r->status), r->error, ""});
  if (r->execution_id.empty()) {
    // Nothing ran: the node is closing, or the agent's graph no longer
    // validates on this node.
    if (r->status == reply_status::stopped)
      return reply(c.res, {503, "shutting_down", r->error, ""});
    return reply(c.res, {409, "wrong_state", r->error, ""});
  }
  json answer = {{"reply", r->status == reply_status::completed ? r->reply : json(nullptr)},
                 {"execution_id", r->execution_id},
                 {"status", to_string(r->status)}};
  if (r->reason != step_reason::none)
    answer["reason"] = to_string(r->reason);
  if (!r->error.empty())
    answer["error"] = r->error;
  reply(c.res, 200, answer);
}

std::optional<agent_reply> api_server::send(call& c, const std::string& name, json message) {
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

void api_server::cancel_agent(call& c) {
  auto ag = owned_agent(c, c.capture);
  if (!ag)
    return;
  http_error err;
  if (auto body = body_object(c.req, {}, err); !body)
    return reply(c.res, err);
  auto result = rt_.cancel_agent(c.user, ag->name, "user:" + c.user);
  if (!result)
    return reply(c.res, from_error(result.error()));
  spdlog::info("event=agent.cancel user={} agent={} result={}", c.user, ag->name,
               to_string(*result));
  reply(c.res, 200, {{"result", to_string(*result)}});
}

} // namespace canopy::core::api
