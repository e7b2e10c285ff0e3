// The waits armed now, read from the store: the inbox (`open_waits`,
// `wait_document`) and the listing of executions that wait (`list_waiting`).

#include "persistence/signal_rules.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "persistence/duration.hpp"

namespace canopy::core {

namespace {

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

} // namespace

caf::expected<std::vector<open_wait>> open_waits(const store& db,
                                                 const std::optional<std::string>& user) {
  auto live = db.live();
  if (!live)
    return live.error();
  std::map<std::string, execution_record> recs;
  for (auto& r : *live)
    recs.emplace(r.id, r);
  auto record = [&](const std::string& id) -> const execution_record* {
    auto i = recs.find(id);
    if (i == recs.end()) {
      auto r = db.execution(id);
      if (!r)
        return nullptr;
      i = recs.emplace(id, std::move(*r)).first;
    }
    return &i->second;
  };
  std::vector<open_wait> out;
  for (auto& r : *live) {
    if (r.status != execution_status::running)
      continue;
    auto steps = db.steps(r.id);
    if (!steps)
      return steps.error();
    std::shared_ptr<const graph> g;
    for (auto& s : *steps) {
      if (s.status != step_status::waiting)
        continue;
      if (!g) {
        auto sg = db.graph(r.id);
        if (!sg)
          break;
        auto parsed = load_stored_graph(std::move(sg->document), sg->base_dir, sg->files);
        if (!parsed.value)
          break;
        g = parsed.value;
      }
      auto* def = g->find(s.step);
      if (def == nullptr || !def->wait)
        continue;
      auto* root = record(r.root_id.empty() ? r.id : r.root_id);
      open_wait w;
      w.execution_id = r.id;
      w.root_id = r.root_id.empty() ? r.id : r.root_id;
      w.owner = root ? root->owner : r.owner;
      if (user && (def->wait->approvers.empty() ? w.owner != *user
                                                : !contains(def->wait->approvers, *user)))
        continue;
      w.step = s.step;
      // Its path: the parent steps up to the root.
      std::string prefix;
      for (const execution_record* e = &r; e && !e->parent_id.empty(); e = record(e->parent_id))
        prefix = e->parent_step + "/" + prefix;
      w.path = prefix + s.step;
      w.prompt = s.prompt;
      w.armed_at = s.started_at;
      w.deadline = s.deadline;
      w.def = *def->wait;
      out.push_back(std::move(w));
    }
  }
  std::sort(out.begin(), out.end(), [](const open_wait& a, const open_wait& b) {
    return a.armed_at != b.armed_at ? a.armed_at < b.armed_at : a.path < b.path;
  });
  return out;
}

caf::expected<std::vector<execution_record>> list_waiting(const store& db,
                                                          const execution_filter& f) {
  auto waits = open_waits(db, std::nullopt);
  if (!waits)
    return waits.error();
  std::set<std::string> ids;
  for (auto& w : *waits)
    ids.insert(f.roots_only ? w.root_id : w.execution_id);
  std::vector<execution_record> out;
  for (auto i = ids.rbegin(); i != ids.rend(); ++i) { // ids sort by creation: newest first
    if (!f.before.empty() && *i >= f.before)
      continue;
    auto r = db.execution(*i);
    if (!r)
      continue;
    if ((f.owner && r->owner != *f.owner) || (!f.graph.empty() && r->graph != f.graph)
        || (f.created_after != 0 && r->created_at < f.created_after))
      continue;
    out.push_back(std::move(*r));
    if (f.limit != 0 && out.size() == f.limit)
      break;
  }
  return out;
}

json wait_document(const open_wait& w) {
  return {{"execution_id", w.execution_id},
          {"root_id", w.root_id},
          {"step", w.step},
          {"path", w.path},
          {"signal", w.def.signal},
          {"prompt", w.prompt.empty() ? json(nullptr) : json(w.prompt)},
          {"armed_at", w.armed_at == 0 ? json(nullptr) : json(to_rfc3339(w.armed_at))},
          {"deadline", w.deadline == 0 ? json(nullptr) : json(to_rfc3339(w.deadline))},
          {"schema", w.def.schema},
          {"options", w.def.options},
          {"on_timeout", to_string(w.def.on_timeout)},
          {"approvers", w.def.approvers}};
}

} // namespace canopy::core
