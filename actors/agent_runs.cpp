#include "actors/agent_runs.hpp"

#include "actors/execution/execution_actor.hpp"

namespace canopy::core {

caf::expected<json> make_agent_inputs(const graph& g, const json& message, const store& db,
                                      const std::string& owner, const std::string& name) {
  json inputs = json::object();
  for (auto& in : g.inputs) {
    if (in == "message") {
      inputs["message"] = message;
    } else if (in == "history") {
      auto entries = db.history(owner, name);
      if (!entries)
        return entries.error();
      json h = json::array();
      for (auto& e : *entries)
        h.push_back(history_document(e));
      inputs["history"] = std::move(h);
    }
  }
  return inputs;
}

event_record make_agent_event(const execution_record& rec, event_type type, json data) {
  return make_event(rec, type, now_ms(), std::move(data));
}

parse_result parse_agent_graph(const agent_record& ag, const execution_services& svc,
                               int depth, int max_depth) {
  auto opts = run_time_parse_options(svc, depth, max_depth);
  return parse_graph_bundle(ag.graph.document, ag.graph.base_dir, ag.graph.files, opts);
}

} // namespace canopy::core
