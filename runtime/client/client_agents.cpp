// api_client's requests on agents, registered graphs and nodes, and the paged
// listings they share.

#include "runtime/client/client.hpp"

#include "persistence/error.hpp"
#include "runtime/client/client_detail.hpp"
#include "runtime/node/error.hpp"

namespace canopy::core {

using namespace client_detail;

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

caf::expected<agent_reply>
api_client::send_agent_message(const std::string& name, const json& message) const {
  json body = {{"message", message}};
  // The answer comes when the agent's run ended, however long it takes; a
  // server that goes away drops the connection, which ends the wait.
  constexpr millis a_week{7LL * 24 * 3600 * 1000};
  auto a = exchange("POST", "/v1/agents/" + url_encode(name) + "/messages", &body, a_week);
  if (!a)
    return a.error();
  auto [status, text] = *a;
  agent_reply out;
  if (status == 409) {
    auto doc = parse_answer(text);
    auto e = !doc.is_discarded() && doc.is_object() ? doc.value("error", json()) : json();
    if (!from_string(text_of(e, "code"), out.status)
        || (out.status != reply_status::busy && out.status != reply_status::cancelled))
      return error_of_answer(status, text);
    out.error = text_of(e, "message");
    return out;
  }
  auto fin = finish(status, text);
  if (!fin)
    return fin.error();
  auto& doc = fin->body;
  if (!doc.is_object())
    return unexpected("the answer to a message is not a JSON object");
  out.status = reply_status::completed; // a server that only sends {reply, execution_id}
  if (auto s = text_of(doc, "status"); !s.empty() && !from_string(s, out.status))
    return unexpected("the answer to a message has an unknown status: " + s);
  out.reply = doc.value("reply", json());
  out.execution_id = text_of(doc, "execution_id");
  from_string(text_of(doc, "reason"), out.reason);
  out.error = text_of(doc, "error");
  return out;
}

caf::expected<cancel_result> api_client::cancel_agent(const std::string& name,
                                                    millis wait) const {
  json body = json::object();
  millis extra = wait;
  auto a = post("/v1/agents/" + url_encode(name) + "/cancel", body, extra);
  if (!a)
    return a.error();
  cancel_result result;
  if (!from_string(text_of(a->body, "result"), result))
    return unexpected("the cancel answer has no known result: " + a->body.dump());
  return result;
}

} // namespace canopy::core
