// The graphs a runtime knows: registered functions, the parse options of this
// node, graph documents parsed and registered.

#include "runtime/node/runtime.hpp"

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"
#include "runtime/node/runtime_detail.hpp"

namespace canopy::core {

using runtime_detail::commit_bound;

// -- graphs ----------------------------------------------------------------------

bool runtime::register_fn(const std::string& name, fn_function f) {
  return fns_->add(name, std::move(f));
}

parse_options runtime::graph_options() const {
  parse_options opts;
  opts.fns = fns_->names();
  for (auto& kv : opts_.tools)
    opts.tools.insert(kv.first);
  // With a cluster, a tool that a worker announces is known too.
  if (svc_ && svc_->cluster_tools)
    for (auto& name : svc_->cluster_tools->names())
      opts.tools.insert(name);
  opts.allow_inline = opts_.allow_inline_commands;
  if (!opts_.allow_graph_files)
    opts.load_file = [](const std::string&) -> caf::expected<json> {
      return make_error(persistence_errc::invalid_graph,
                        "graph files cannot be read on this node: name a registered graph "
                        "or give the graph inline");
    };
  return opts;
}

parse_result runtime::parse_document(const json& doc) const {
  return parse_graph(doc, db_->home(), graph_options());
}

caf::expected<registered_graph> runtime::register_graph(const std::string& owner,
                                                        const std::string& name, json doc,
                                                        size_t max_graphs) {
  // Registrations of this process are serialised, so the version read here
  // is the one committed (a server owns its home).
  std::lock_guard<std::mutex> guard{register_mtx_};
  registered_graph x;
  x.owner = owner;
  x.name = name;
  x.document = std::move(doc);
  x.created_at = now_ms();
  auto newest = db_->registered(owner, name);
  if (newest)
    x.version = newest->version + 1;
  else if (!is(newest.error(), persistence_errc::not_found))
    return newest.error();
  else if (max_graphs > 0) {
    auto count = db_->registered_count(owner);
    if (!count)
      return count.error();
    if (*count >= max_graphs)
      return make_error(runtime_errc::quota_exceeded,
                        "quota exceeded: user '" + owner + "' has " + std::to_string(*count)
                          + " graphs registered, the most quotas.graphs allows ("
                          + std::to_string(max_graphs) + "); register a new version of one "
                          "of them instead, or raise the quota");
    x.version = 1;
  } else {
    x.version = 1;
  }
  write_batch batch;
  batch.registered.push_back(x);
  if (auto err = commit_and_wait(writer_, commit_bound(*db_), std::move(batch)))
    return err;
  return x;
}

parse_result runtime::parse_file(const std::string& path) const {
  return parse_graph_file(path, graph_options());
}

} // namespace canopy::core
