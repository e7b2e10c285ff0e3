// `canopy stop|show|ls|events --server URL`: the commands that ask a canopy
// server over HTTP (runtime/client/client.hpp) instead of opening the local home.
// Their output and exit codes are the local commands' (runtime/docs/reference/cli.md#canopy-stop).

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "runtime/cli/cli_common.hpp"
#include "runtime/node/document.hpp"
#include "runtime/node/error.hpp"
#include "runtime/cli/render.hpp"

namespace canopy::core::cli {

namespace {

/// Prints a final status as `canopy stop` does: `stopped (requested)`.
void print_status(const json& doc) {
  auto rec = execution_of(doc);
  std::cout << status_text(rec) << "\n";
}

/// Labels of a tree document's executions, as `tree_view::label` makes them:
/// the top's graph name, and `parent-label/step` below it.
void collect_labels(const json& doc, const std::string& label,
                    std::map<std::string, std::string>& out) {
  auto rec = execution_of(doc);
  out[rec.id] = label;
  if (doc.contains("children") && doc["children"].is_array())
    for (auto& child : doc["children"])
      collect_labels(child, label + "/" + child_label(execution_of(child)), out);
}

/// Human labels of the executions of a server's tree, fetched when an
/// unknown execution shows up (a child created while following).
class remote_labels {
public:
  remote_labels(const api_client& api, std::string id) : api_(api), id_(std::move(id)) {
    refresh();
  }

  const std::string& operator()(const std::string& execution_id) {
    auto i = labels_.find(execution_id);
    if (i == labels_.end() && refreshed_for_.insert(execution_id).second) {
      refresh();
      i = labels_.find(execution_id);
    }
    if (i == labels_.end())
      i = labels_.emplace(execution_id, execution_id.substr(0, 10)).first;
    return i->second;
  }

private:
  void refresh() {
    if (auto doc = api_.tree(id_)) {
      auto graph = execution_of(*doc).graph;
      collect_labels(*doc, graph.empty() ? id_.substr(0, 10) : graph, labels_);
    }
  }

  const api_client& api_;
  std::string id_;
  std::map<std::string, std::string> labels_;
  std::set<std::string> refreshed_for_;
};

} // namespace

// -- commands against a server (--server URL) --------------------------------------------

caf::expected<api_client> open_client(const remote_options& r) {
  auto url = parse_server_url(r.server);
  if (!url)
    return url.error();
  client_options opts;
  opts.server = *url;
  opts.ca_file = r.cacert;
  opts.token = r.token;
  if (opts.token.empty())
    if (auto env = std::getenv("CANOPY_TOKEN"))
      opts.token = env;
  if (opts.token.empty())
    return make_error(runtime_errc::invalid_input,
                      "--server needs a token: pass --token TOKEN or set $CANOPY_TOKEN");
  return api_client{std::move(opts)};
}

int remote_stop(const remote_options& r, const std::string& id, bool force, double wait_s) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto answer = api->stop(id, force, wait_s);
  if (!answer)
    return fail(answer.error());
  if (answer->result == stop_result::no_execution) {
    std::cout << to_string(stop_result::no_execution) << "\n";
    return 0;
  }
  if (answer->result == stop_result::stopped) {
    print_status(answer->execution);
    return 0;
  }
  auto status = to_string(answer->execution.is_object() ? execution_of(answer->execution).status
                                                        : execution_status::stopping);
  std::cout << status << "\n";
  std::cerr << "still " << status << " after " << wait_s << " s\n";
  return 1;
}

int remote_ls_nodes(const remote_options& r, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto items = api->nodes();
  if (!items)
    return fail(items.error());
  json out = json::array();
  for (auto& item : *items)
    out.push_back(std::move(item));
  print_nodes(out, as_json);
  return exit_completed;
}

int remote_show(const remote_options& r, const std::string& id, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  return print_document(api->tree(id), as_json);
}

int remote_ls(const remote_options& r, const ls_query& q) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  execution_query query;
  query.status = q.status;
  query.graph = q.graph;
  query.since = q.since;
  query.all = q.all;
  query.limit = q.limit;
  auto items = api->executions(query);
  if (!items)
    return fail(items.error());
  json out = json::array();
  std::vector<execution_record> rows;
  for (auto& item : *items) {
    if (!q.all && item.contains("parent_id") && !item["parent_id"].is_null())
      continue; // roots only unless --all (runtime/docs/reference/cli.md#canopy-ls)
    item.erase("steps");
    item.erase("children");
    rows.push_back(execution_of(item));
    out.push_back(std::move(item));
  }
  if (q.json)
    std::cout << out.dump() << "\n";
  else
    std::cout << render_list(rows, now_ms());
  return 0;
}

int remote_events(const remote_options& r, const std::string& id, bool follow_live,
                  bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  std::optional<remote_labels> labels;
  auto print = [&](const json& doc) {
    if (as_json) {
      std::cout << doc.dump() << "\n";
    } else {
      if (!labels)
        labels.emplace(*api, id);
      auto e = event_of(doc);
      std::cout << event_line(e, (*labels)(e.execution_id)) << "\n";
    }
    std::cout << std::flush;
    return true;
  };
  if (follow_live) {
    if (auto err = api->stream_events(id, 0, print))
      return fail(err);
    return 0;
  }
  auto events = api->events(id);
  if (!events)
    return fail(events.error());
  for (auto& e : *events)
    print(e);
  return 0;
}

} // namespace canopy::core::cli
