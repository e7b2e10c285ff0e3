// api_client's requests on executions: the tree, the listing and stop.

#include "runtime/client/client.hpp"

#include <algorithm>

#include "runtime/client/client_detail.hpp"

namespace canopy::core {

using namespace client_detail;

// -- executions --------------------------------------------------------------------

caf::expected<json> api_client::tree(const std::string& id) const {
  auto a = get("/v1/executions/" + url_encode(id) + "/tree");
  if (!a)
    return a.error();
  if (!a->body.is_object())
    return unexpected("the tree of " + id + " is not a JSON object");
  return std::move(a->body);
}

caf::expected<std::vector<json>> api_client::executions(const execution_query& q) const {
  constexpr size_t max_page = 1000; // the server's largest `limit`
  std::string query;
  auto add = [&](const char* key, const std::string& value) {
    query += (query.empty() ? "?" : "&") + std::string{key} + "=" + url_encode(value);
  };
  if (q.all)
    add("all", "true");
  if (!q.status.empty())
    add("status", q.status);
  if (!q.graph.empty())
    add("graph", q.graph);
  if (!q.since.empty())
    add("since", q.since);
  if (q.limit != 0)
    add("limit", std::to_string(std::min(q.limit, max_page)));
  std::vector<json> out;
  std::string cursor;
  for (;;) {
    auto target = "/v1/executions" + query;
    if (!cursor.empty())
      target += (query.empty() ? "?" : "&") + std::string{"cursor="} + url_encode(cursor);
    auto a = get(target);
    if (!a)
      return a.error();
    auto& body = a->body;
    if (!body.is_object() || !body.contains("items") || !body["items"].is_array())
      return unexpected("the listing is not {\"items\": [...], \"next\": ...}");
    for (auto& item : body["items"]) {
      if (q.limit != 0 && out.size() >= q.limit)
        return out;
      out.push_back(std::move(item));
    }
    auto next = body.value("next", json());
    if (!next.is_string() || next.get<std::string>().empty()
        || (q.limit != 0 && out.size() >= q.limit))
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
  std::string result;
  if (a->body.is_object()) {
    if (auto i = a->body.find("stop"); i != a->body.end())
      result = text_of(*i, "result");
    out.execution = a->body;
    out.execution.erase("stop");
  }
  if (a->status == 202 && result.empty())
    out.result = stop_result::stopping;
  else if (!from_string(result, out.result))
    return unexpected("the stop answer has no known result: " + a->body.dump());
  return out;
}

caf::expected<api_answer> api_client::signal(const std::string& id, const std::string& name,
                                             const json& body, const std::string& step,
                                             const std::string& key) const {
  auto target = "/v1/executions/" + url_encode(id) + "/signals/" + url_encode(name);
  if (!step.empty())
    target += "?step=" + url_encode(step);
  auto a = exchange("POST", target, &body, millis{0}, key);
  if (!a)
    return a.error();
  return finish(a->first, a->second);
}

caf::expected<std::vector<json>> api_client::waits() const {
  auto a = get("/v1/waits");
  if (!a)
    return a.error();
  if (!a->body.is_object() || !a->body.contains("items") || !a->body["items"].is_array())
    return unexpected("the waits answer has no items: " + a->body.dump());
  std::vector<json> out;
  for (auto& x : a->body["items"])
    out.push_back(x);
  return out;
}

} // namespace canopy::core
