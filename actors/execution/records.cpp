// Records and documents the execution role builds for others: a new
// execution's `queued` batch, the graph document it stores, and parse
// options for graphs created at run time.

#include "actors/execution/execution_actor.hpp"

namespace canopy::core {

parse_options run_time_parse_options(const execution_services& svc, int depth, int max_depth) {
  parse_options opts = svc.child_options;
  if (svc.fns)
    opts.fns = svc.fns->names();
  if (svc.tools)
    for (auto& kv : *svc.tools)
      opts.tools.insert(kv.first);
  if (svc.cluster_tools)
    for (auto& name : svc.cluster_tools->names())
      opts.tools.insert(name);
  opts.depth = depth;
  opts.max_depth = max_depth;
  return opts;
}

stored_graph to_stored(const graph& g) {
  stored_graph out;
  out.document = g.document;
  out.base_dir = g.base_dir;
  out.files = json::object();
  for (auto& kv : g.files)
    out.files[kv.first] = kv.second;
  return out;
}

write_batch make_queued_batch(const execution_record& rec, const graph& g) {
  write_batch b;
  b.executions.push_back(rec);
  b.encoded_graphs.emplace_back(rec.id, encode_graph(g.document, g.base_dir, g.files));
  b.events.push_back(make_execution_event(rec, event_type::execution_queued, now_ms(),
                                          execution_status::queued));
  if (rec.id == rec.root_id) {
    b.lease.root = rec.id;
    b.lease.acquire = true; // of a tree never leased: epoch 0
  }
  return b;
}

} // namespace canopy::core
