// `graph push` and `validate`: a graph file parsed and checked as `run` does,
// then registered on a server or reported valid.

#include <iostream>
#include <map>
#include <optional>

#include "persistence/error.hpp"
#include "runtime/cli/cli_common.hpp"

namespace canopy::core::cli {

/// `canopy graph push FILE --server URL`: validates the file as `run
/// --server` does, then registers it.
int cmd_graph_push(const std::string& file, const remote_options& remote, bool as_json) {
  if (remote.server.empty())
    return usage_error("graph push registers a graph on a server: pass --server URL (a "
                       "local run reads the graph file itself)");
  parse_options popts;
  popts.any_tool = true; // the server checks tools against its own and its workers'
  auto parsed = parse_graph_file(file, popts);
  if (!parsed)
    return report_graph_errors(file, parsed);
  return remote_graph_push(remote, file, *parsed.value, as_json);
}

/// `canopy validate [--config FILE | --server URL]`: parses the file as `run`
/// does (tool names against the config's tools, or left to the server) and
/// resolves each `graph` step naming a registered graph as its run would:
/// locally none resolves (local executions have no registry); on a server,
/// the token's user's graph of that name must exist.
int cmd_validate(const std::string& file, const std::string& config,
                 const remote_options& remote) {
  std::optional<node_config> cfg;
  if (!config.empty()) {
    if (!remote.server.empty())
      return usage_error("--config is for a local check: a server has its own");
    cfg = read_run_config(config);
    if (!cfg)
      return exit_usage;
  }
  auto opts = local_or_server_tools(cfg ? &*cfg : nullptr, remote);
  std::optional<api_client> api;
  if (!remote.server.empty()) {
    auto c = open_client(remote);
    if (!c)
      return fail(c.error());
    api.emplace(std::move(*c));
  }
  std::map<std::string, std::string> checked; // name -> what is wrong
  opts.check_graph_name = [&](const std::string& name) -> std::string {
    auto i = checked.find(name);
    if (i != checked.end())
      return i->second;
    std::string why;
    if (!api) {
      why = "unknown graph '" + name + "': a local run reads graphs from files only (a path "
            "such as './" + name + ".json'); registered graphs resolve on a server "
            "(validate with --server URL)";
    } else if (auto answer = api->get("/v1/graphs/" + url_encode(name)); !answer) {
      why = "graph '" + name + "' does not resolve on " + remote.server + ": "
            + message_of(answer.error());
    }
    return checked.emplace(name, why).first->second;
  };
  auto parsed = parse_graph_file(file, opts);
  if (!parsed)
    return report_graph_errors(file, parsed);
  std::cout << "ok: graph '" << parsed.value->name << "' with " << parsed.value->steps.size()
            << " steps\n";
  return 0;
}

} // namespace canopy::core::cli
