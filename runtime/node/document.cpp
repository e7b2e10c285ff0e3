#include "runtime/node/document.hpp"

#include "persistence/duration.hpp"

namespace canopy::core {

namespace {

json time_or_null(int64_t ms) {
  return ms == 0 ? json(nullptr) : json(to_rfc3339(ms));
}

json reason_or_null(step_reason r) {
  return r == step_reason::none ? json(nullptr) : json(to_string(r));
}

json str_or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

json step_document(const step_record& s) {
  json j = {{"status", to_string(s.status)},
            {"attempt", s.attempt},
            {"result", s.result},
            {"node", s.node},
            {"started_at", time_or_null(s.started_at)},
            {"ended_at", time_or_null(s.ended_at)},
            {"error", s.error},
            {"reason", reason_or_null(s.reason)}};
  if (!s.child_id.empty())
    j["child_id"] = s.child_id;
  if (s.deadline != 0)
    j["deadline"] = to_rfc3339(s.deadline);
  if (!s.prompt.empty())
    j["prompt"] = s.prompt;
  if (s.pid != 0)
    j["pid"] = s.pid;
  return j;
}

/// The kind key of a graph document's step (`run`, `tool`, ...), or null.
json kind_of(const json& def) {
  if (def.is_object())
    for (auto* k : {"run", "tool", "graph", "plan", "agent", "fn", "wait", "llm"})
      if (def.contains(k))
        return k;
  return nullptr;
}

/// The `needs` of a graph document's step: its step names.
json needs_of(const json& def) {
  json out = json::array();
  if (def.is_object())
    if (auto i = def.find("needs"); i != def.end() && i->is_array())
      for (auto& n : *i)
        if (n.is_string())
          out.push_back(n);
  return out;
}

} // namespace

json stop_summary(const stop_record* req, const std::string& result, const std::string& mode) {
  return {{"id", req ? json(req->id) : json(nullptr)},
          {"result", result},
          {"mode", mode},
          {"requested_at", req ? time_or_null(req->requested_at) : json(nullptr)},
          {"handled_at", req && req->handled ? time_or_null(req->handled_at) : json(nullptr)}};
}

json execution_summary(const execution_record& rec) {
  return {{"id", rec.id},
          {"graph", rec.graph},
          {"status", to_string(rec.status)},
          {"reason", reason_or_null(rec.reason)},
          {"error", str_or_null(rec.error)},
          {"parent_id", str_or_null(rec.parent_id)},
          {"root_id", rec.root_id},
          {"depth", rec.depth},
          {"parent_step", str_or_null(rec.parent_step)},
          {"inputs", rec.inputs},
          {"outputs", rec.status == execution_status::completed ? rec.outputs : json(nullptr)},
          {"created_at", time_or_null(rec.created_at)},
          {"started_at", time_or_null(rec.started_at)},
          {"ended_at", time_or_null(rec.ended_at)},
          {"graph_version", rec.graph_version > 0 ? json(rec.graph_version) : json(nullptr)},
          {"agent", str_or_null(rec.agent)},
          {"node", str_or_null(rec.node)},
          {"iteration", rec.iteration > 0 ? json(rec.iteration) : json(nullptr)}};
}

namespace {

/// Adds the model calls of `doc` and its descendants to `calls`, `in`,
/// `out` and `spend`: every step whose result carries a `usage`.
void add_model_use(const json& doc, int64_t& calls, int64_t& in, int64_t& out, double& spend,
                   bool& priced) {
  if (auto steps = doc.find("steps"); steps != doc.end() && steps->is_object())
    for (auto& s : *steps) {
      auto r = s.find("result");
      if (r == s.end() || !r->is_object())
        continue;
      auto u = r->find("usage");
      if (u == r->end() || !u->is_object())
        continue;
      ++calls;
      in += u->value("prompt_tokens", int64_t{0});
      out += u->value("completion_tokens", int64_t{0});
      if (auto x = r->find("spend"); x != r->end() && x->is_number()) {
        spend += x->get<double>();
        priced = true;
      }
    }
  if (auto kids = doc.find("children"); kids != doc.end() && kids->is_array())
    for (auto& c : *kids)
      add_model_use(c, calls, in, out, spend, priced);
}

caf::expected<json> load_tree(const store& db, execution_record rec, document_options opts);

} // namespace

json model_totals(const json& tree) {
  int64_t calls = 0, in = 0, out = 0;
  double spend = 0;
  bool priced = false;
  add_model_use(tree, calls, in, out, spend, priced);
  if (calls == 0)
    return nullptr;
  return {{"calls", calls},
          {"prompt_tokens", in},
          {"completion_tokens", out},
          {"tokens", in + out},
          {"spend", priced ? json(spend) : json(nullptr)}};
}

caf::expected<json> load_document(const store& db, const std::string& id,
                                  document_options opts) {
  auto rec = db.execution(id);
  if (!rec)
    return rec.error();
  return load_document(db, std::move(*rec), opts);
}

caf::expected<json> load_document(const store& db, execution_record rec,
                                  document_options opts) {
  auto doc = load_tree(db, std::move(rec), opts);
  if (doc && opts.steps && opts.children)
    if (auto totals = model_totals(*doc); !totals.is_null())
      (*doc)["model"] = std::move(totals);
  return doc;
}

namespace {

caf::expected<json> load_tree(const store& db, execution_record rec, document_options opts) {
  const auto id = rec.id;
  auto doc = execution_summary(rec);
  if (opts.steps) {
    auto steps = db.steps(id);
    if (!steps)
      return steps.error();
    json out = json::object();
    // Every step of the graph, started or not, then anything else; each with
    // its kind and needs from the graph (a reader orders them with these).
    json defs = json::object();
    if (auto g = db.graph(id); g && g->document.contains("steps")
                                 && g->document["steps"].is_object())
      defs = std::move(g->document["steps"]);
    for (auto& kv : defs.items()) {
      step_record pending;
      pending.step = kv.key();
      out[kv.key()] = step_document(pending);
    }
    for (auto& s : *steps)
      out[s.step] = step_document(s);
    for (auto& kv : out.items()) {
      auto def = defs.find(kv.key());
      kv.value()["kind"] = def != defs.end() ? kind_of(*def) : json(nullptr);
      kv.value()["needs"] = def != defs.end() ? needs_of(*def) : json::array();
      // A wait step names its signal (what `canopy signal` must send).
      if (def != defs.end() && def->is_object())
        if (auto w = def->find("wait"); w != def->end() && w->is_object()
                                        && w->contains("signal") && (*w)["signal"].is_string())
          kv.value()["signal"] = (*w)["signal"];
    }
    doc["steps"] = std::move(out);
  }
  if (opts.children) {
    auto kids = db.children(id);
    if (!kids)
      return kids.error();
    json children = json::array();
    for (auto& kid : *kids) {
      auto kid_rec = db.execution(kid);
      if (!kid_rec)
        return kid_rec.error();
      auto child = load_tree(db, std::move(*kid_rec), opts);
      if (!child)
        return child.error();
      children.push_back(std::move(*child));
    }
    doc["children"] = std::move(children);
  }
  return doc;
}

} // namespace

} // namespace canopy::core
