// `canopy run FILE --server URL`, `resume ID --server URL` and `graph push|ls
// --server URL`: a graph file registered on a server as one document, an
// execution started or resumed there and followed as a local run is
// (foreground_view.hpp): the live tree from the server's event stream, Ctrl-C
// a stop on the server, the same output and exit codes (runtime/docs/reference/cli.md).

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <caf/sec.hpp>

#include "persistence/error.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/node/error.hpp"
#include "runtime/cli/foreground_view.hpp"
#include "runtime/cli/render.hpp"

namespace canopy::core::cli {

namespace {

// -- a graph file as one document ---------------------------------------------------------

/// `g`'s document with the graph of every `graph` step given inline: a file
/// it names is replaced by that file's document, recursively (a server never
/// reads the sender's files). A file's graph without a `name` gets the one a
/// local run gives it, the file's stem.
json inline_document(const graph& g) {
  json doc = g.document;
  auto steps = doc.find("steps");
  if (steps == doc.end() || !steps->is_object())
    return doc;
  for (auto& def : g.steps) {
    if (def.kind != step_kind::graph || !def.child)
      continue; // a registered graph's name stays a name
    auto step = steps->find(def.id);
    if (step == steps->end() || !step->is_object() || !step->contains("graph"))
      continue;
    auto& slot = (*step)["graph"];
    auto child = inline_document(*def.child);
    if (slot.is_string() && child.is_object() && !child.contains("name"))
      child["name"] = def.child->name;
    slot = std::move(child);
  }
  return doc;
}

/// Registers `parsed` (read from `file`) on the server under the name a
/// local run gives it, as one document.
/// @returns the answer `{id, version}`, or an error: a name the server
///          cannot take or a document over its size limit (exit 2, before
///          anything is sent), or `register_graph`'s.
caf::expected<json> register_file(const api_client& api, const std::string& file,
                                  const graph& parsed) {
  if (auto why = check_graph_id(parsed.name); !why.empty())
    return make_error(runtime_errc::invalid_input,
                      file + ": graph name '" + parsed.name + "' cannot be a server's graph id ("
                        + why + "): set \"name\" in the file");
  auto doc = inline_document(parsed);
  doc["name"] = parsed.name;
  auto size = doc.dump().size();
  if (size > max_graph_bytes)
    return make_error(runtime_errc::invalid_input,
                      file + ": with the graph files it includes put inline, the graph is "
                        + std::to_string(size) + " bytes, over the "
                        + std::to_string(max_graph_bytes) + " a server accepts");
  return api.register_graph(doc);
}

// -- the tree of an execution on a server -------------------------------------------------

/// Execution records and graph documents of a tree on a server, for a
/// `tree_view`. Each execution is read once (`GET /v1/executions/{id}`); its
/// graph is the registered graph it ran (a root), or the graph its parent's
/// step gives inline or by name (a child). Without one (an agent's run), its
/// steps are those of its document. Not thread-safe: the view's thread only.
class remote_tree_source {
public:
  explicit remote_tree_source(api_client api) : api_(std::move(api)) {
  }

  std::optional<execution_record> execution(const std::string& id) {
    auto doc = document(id);
    if (!doc)
      return std::nullopt;
    return execution_of(*doc);
  }

  std::optional<json> graph_document(const std::string& id) {
    if (auto i = graphs_.find(id); i != graphs_.end())
      return i->second;
    auto& out = graphs_[id]; // also ends a (malformed) cycle of parents
    auto doc = document(id);
    if (!doc)
      return std::nullopt;
    auto rec = execution_of(*doc);
    auto version = doc->value("graph_version", json());
    if (rec.parent_id.empty()) {
      out = registered(rec.graph, version);
    } else if (auto parent = graph_document(rec.parent_id)) {
      auto steps = parent->value("steps", json::object());
      auto step = steps.is_object() ? steps.value(rec.parent_step, json::object()) : json();
      auto g = step.is_object() ? step.value("graph", json()) : json();
      if (g.is_object())
        out = std::move(g);
      else if (g.is_string())
        out = registered(g.get<std::string>(), version);
    }
    if (!out && doc->contains("steps") && (*doc)["steps"].is_object()) {
      json steps = json::object();
      for (auto& kv : (*doc)["steps"].items())
        steps[kv.key()] = json::object();
      out = json{{"steps", std::move(steps)}};
    }
    return graphs_[id];
  }

private:
  /// The execution document of `id`, read once; null when it cannot be read.
  const json* document(const std::string& id) {
    auto i = docs_.find(id);
    if (i == docs_.end()) {
      auto answer = api_.get("/v1/executions/" + url_encode(id));
      std::optional<json> doc;
      if (answer && answer->body.is_object())
        doc = std::move(answer->body);
      i = docs_.emplace(id, std::move(doc)).first;
    }
    return i->second ? &*i->second : nullptr;
  }

  /// The document of registered graph `name` at `version` (null: the newest).
  std::optional<json> registered(const std::string& name, const json& version) {
    if (name.empty())
      return std::nullopt;
    auto target = "/v1/graphs/" + url_encode(name);
    if (version.is_number_integer())
      target += "?version=" + std::to_string(version.get<int64_t>());
    auto answer = api_.get(target);
    if (!answer || !answer->body.is_object() || !answer->body.contains("graph"))
      return std::nullopt;
    return std::move(answer->body["graph"]);
  }

  api_client api_;
  std::map<std::string, std::optional<json>> docs_;
  std::map<std::string, std::optional<json>> graphs_;
};

/// A `tree_source` asking the server of `api`.
tree_source server_source(const api_client& api) {
  auto source = std::make_shared<remote_tree_source>(api);
  tree_source out;
  out.execution = [source](const std::string& id) { return source->execution(id); };
  out.graph_document = [source](const std::string& id) { return source->graph_document(id); };
  return out;
}

// -- following an execution on a server ---------------------------------------------------

/// Follows execution `id` on the server in the foreground, as a local run
/// is (foreground_view.hpp), from the server's event stream until the
/// execution settled (its end ends the stream); Ctrl-C through `guard` is a
/// stop there (`POST .../stop`, no wait: the stream shows it). `history`
/// (the events before a resume) builds the tree without being shown.
/// @returns the exit code.
int follow_remote(const global_options& g, const remote_options& r, const api_client& api,
                  interrupt_guard& guard, const std::string& id, bool as_json,
                  const std::vector<json>& history) {
  auto on_server = " --server " + r.server;
  uint64_t after = 0;
  for (auto& doc : history)
    after = std::max(after, event_of(doc).seq);
  foreground_view view{g, server_source(api), id, as_json, after,
                       "canopy resume " + id + on_server};
  view.watch(guard, [api, id](bool force) {
    auto answer = api.stop(id, force, 0);
    return answer ? caf::error{} : answer.error();
  });
  for (auto& doc : history)
    view.apply(event_of(doc));
  auto err = api.stream_events(id, after, [&view](const json& doc) {
    view.apply(event_of(doc));
    return true;
  });
  view.end();
  if (err) {
    int rc = fail(err);
    std::cerr << "the execution may still run on the server: canopy show " << id << on_server
              << "\n";
    return rc;
  }
  auto doc = api.tree(id);
  if (!doc)
    return fail(doc.error());
  auto rec = execution_of(*doc);
  if (!is_terminal(rec.status)) {
    std::cerr << "error: the event stream of " << id << " ended while it is "
              << to_string(rec.status) << "; see canopy show " << id << on_server << "\n";
    return exit_failed;
  }
  return view.finish(rec, *doc);
}

} // namespace

// -- commands -----------------------------------------------------------------------------

int remote_run(const global_options& g, const remote_options& r, const std::string& file,
               const graph& parsed, json inputs, bool as_json, bool detach, json signals) {
  // Before any thread: a Ctrl-C from here on stops the execution once it
  // started. A detached start is not followed: Ctrl-C ends it at once.
  std::optional<interrupt_guard> guard;
  if (!detach)
    guard.emplace();
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto registered = register_file(*api, file, parsed);
  if (!registered)
    return fail(registered.error());
  // This version, not whatever was pushed since.
  json body = {{"inputs", std::move(inputs)}, {"version", (*registered)["version"]}};
  if (!signals.empty())
    body["signals"] = std::move(signals);
  auto started = api->post("/v1/graphs/" + url_encode((*registered)["id"].get<std::string>())
                             + "/executions",
                           body);
  if (!started)
    return fail(started.error());
  auto id = started->body.is_object() ? started->body.value("id", std::string{}) : std::string{};
  if (id.empty())
    return fail(make_error(caf::sec::unexpected_response,
                           "the server's answer to a start has no execution id"));
  if (detach) {
    if (as_json)
      std::cout << json{{"id", id}}.dump() << "\n";
    else
      std::cout << id << "\n";
    return exit_completed;
  }
  return follow_remote(g, r, *api, *guard, id, as_json, {});
}

int remote_resume(const global_options& g, const remote_options& r, const std::string& id,
                  bool as_json, std::optional<double> budget) {
  interrupt_guard guard;
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  // What happened before the resume builds the tree; only what follows it
  // is printed (as a local resume does).
  auto history = api->events(id);
  if (!history)
    return fail(history.error());
  json body = json::object();
  if (budget)
    body["budget"] = *budget;
  auto resumed = api->post("/v1/executions/" + url_encode(id) + "/resume", body);
  if (!resumed)
    return fail(resumed.error());
  return follow_remote(g, r, *api, guard, id, as_json, *history);
}

int remote_graph_push(const remote_options& r, const std::string& file, const graph& parsed,
                      bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto registered = register_file(*api, file, parsed);
  if (!registered)
    return fail(registered.error());
  if (as_json)
    std::cout << registered->dump() << "\n";
  else
    std::cout << (*registered)["id"].get<std::string>() << "\n";
  return exit_completed;
}

int remote_graph_ls(const remote_options& r, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto items = api->graphs();
  if (!items)
    return fail(items.error());
  json out = json::array();
  for (auto& item : *items)
    out.push_back(std::move(item));
  if (as_json) {
    std::cout << out.dump() << "\n";
    return exit_completed;
  }
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%-32s  %7s  %s\n", "ID", "VERSION", "CREATED");
  std::cout << buf;
  for (auto& item : out) {
    auto text = [&](const char* key) {
      auto i = item.find(key);
      return i != item.end() && i->is_string() ? i->get<std::string>() : std::string{"-"};
    };
    auto version = item.value("version", json());
    std::snprintf(buf, sizeof(buf), "%-32s  %7s  %s\n", text("id").c_str(),
                  version.is_number_integer() ? std::to_string(version.get<int64_t>()).c_str()
                                              : "-",
                  text("created_at").c_str());
    std::cout << buf;
  }
  return exit_completed;
}

} // namespace canopy::core::cli
