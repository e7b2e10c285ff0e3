// `canopy ls`: the executions of the local home or of a server (`--server`),
// newest first, with filters, and `ls --nodes`.
//
// Filters: `--status S`, `--graph NAME`, `--since AGE` (created within that
// long before now: 10m, 2h, 1d) and `--limit N` (the newest N; default all,
// on a terminal too, so that the table and `-o json` always list the same
// rows). On a server they are the query of `GET /v1/executions` (`status`,
// `graph`, `since`, and `limit` as the page size, the client stopping at N).

#include <iostream>

#include "persistence/error.hpp"
#include "persistence/retention.hpp"
#include "persistence/signal_rules.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/node/document.hpp"
#include "runtime/cli/render.hpp"
#include "runtime/node/worker.hpp"

namespace canopy::core::cli {

void add_ls_command(CLI::App& app, ls_options& o,
                    const std::function<void(CLI::App*)>& add_remote) {
  o.cmd = app.add_subcommand("ls", "list executions, newest first");
  o.cmd->add_option("--status", o.status, "only this status");
  o.cmd->add_option("--graph", o.graph, "only executions of this graph");
  o.cmd->add_option("--since", o.since,
                    "only executions created within this long before now, e.g. 10m, 2h, 1d");
  o.cmd->add_option("--limit", o.limit, "the newest N only (default: all)");
  o.cmd->add_flag("--all", o.all, "include child executions");
  o.cmd->add_option("-o,--output", o.output, "json or table (default table)");
  o.cmd->add_flag("--json", o.json, "print a JSON array (same as -o json)");
  o.cmd->add_flag("--nodes", o.nodes, "list the cluster's nodes instead of executions");
  add_remote(o.cmd);
}

namespace {

/// `--json`/`-o`: true for JSON. @returns it, or nullopt after a usage error.
std::optional<bool> json_output(const ls_options& o) {
  if (o.output.empty())
    return o.json;
  if (o.output != "json" && o.output != "table") {
    usage_error("-o '" + o.output + "': expected json or table");
    return std::nullopt;
  }
  if (o.json && o.output == "table") {
    usage_error("--json and -o table disagree (--json is -o json)");
    return std::nullopt;
  }
  return o.output == "json";
}

/// The checked query of `o`. @returns it, or nullopt after a usage error.
std::optional<ls_query> query_of(const ls_options& o, bool as_json) {
  ls_query q;
  q.json = as_json;
  q.all = o.all;
  q.graph = o.graph;
  if (!o.status.empty()) {
    execution_status s;
    if (o.status != "waiting" && !from_string(o.status, s)) {
      usage_error("--status: unknown status '" + o.status
                  + "' (queued, running, stopping, stopped, completed, failed, or waiting:"
                    " running with a step that waits)");
      return std::nullopt;
    }
    q.status = o.status;
  }
  if (o.cmd->count("--graph") > 0 && o.graph.empty()) {
    usage_error("--graph: expected a graph name");
    return std::nullopt;
  }
  if (o.cmd->count("--limit") > 0) {
    auto& t = o.limit;
    bool digits = !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoul(t) == 0) {
      usage_error("--limit '" + t + "': expected a whole number of at least 1");
      return std::nullopt;
    }
    q.limit = std::stoul(t);
  }
  if (o.cmd->count("--since") > 0) {
    auto age = parse_age(o.since);
    if (!age) {
      usage_error("--since: " + message_of(age.error()));
      return std::nullopt;
    }
    q.since = o.since;
    q.created_after = std::max<int64_t>(1, now_ms() - age->count());
  }
  return q;
}

/// `canopy ls --nodes` on the local home: this process's runtime alone (the
/// node `local`); a cluster's members are listed by its server (`--server`).
int cmd_ls_nodes(const global_options& g, bool as_json) {
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  json out = json::array();
  for (auto& n : (*rt)->nodes())
    out.push_back(node_document(n));
  print_nodes(out, as_json);
  return exit_completed;
}

int cmd_ls(const global_options& g, const ls_query& q) {
  execution_filter f;
  f.roots_only = !q.all;
  if (!q.status.empty() && q.status != "waiting") {
    execution_status s;
    from_string(q.status, s);
    f.status = s;
  }
  f.graph = q.graph;
  f.created_after = q.created_after;
  f.limit = q.limit;
  auto db = open_listing(g, q.json);
  if (!db)
    return fail(db.error());
  std::vector<execution_record> rows;
  if (*db) {
    auto listed = q.status == "waiting" ? list_waiting(**db, f) : (*db)->list(f);
    if (!listed)
      return fail(listed.error());
    rows = std::move(*listed);
  }
  if (q.json) {
    json out = json::array();
    for (auto& r : rows)
      out.push_back(execution_summary(r));
    std::cout << out.dump() << "\n";
  } else {
    std::cout << render_list(rows, now_ms());
  }
  return 0;
}

} // namespace

int run_ls(const global_options& g, const remote_options& r, const ls_options& o) {
  auto as_json = json_output(o);
  if (!as_json)
    return exit_usage;
  bool on_server = !r.server.empty();
  if (o.nodes) {
    for (auto* flag : {"--status", "--all", "--graph", "--limit", "--since"})
      if (o.cmd->count(flag) > 0)
        return usage_error(std::string{"--nodes lists nodes: it takes no "} + flag);
    return on_server ? remote_ls_nodes(r, *as_json) : cmd_ls_nodes(g, *as_json);
  }
  auto q = query_of(o, *as_json);
  if (!q)
    return exit_usage;
  return on_server ? remote_ls(r, *q) : cmd_ls(g, *q);
}

} // namespace canopy::core::cli
