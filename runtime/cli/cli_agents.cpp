// `canopy agent create|send|cancel|history|ls` (runtime/docs/reference/graph-format.md#agent-graphs): named
// agents on the local home (through the library's runtime) or, with
// `--server URL`, on a server (through its HTTP API).

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "persistence/error.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/node/error.hpp"
#include "runtime/cli/render.hpp"

namespace canopy::core::cli {

namespace {

// -- agents (runtime/docs/reference/graph-format.md#agent-graphs) ----------------------------------------------------------

/// The agents of the CLI have no owner (the HTTP API's users own theirs).
const std::string local_owner;

/// `who` of the requests this process makes, as `canopy stop` writes it.
std::string cli_who() {
  return "cli:pid " + std::to_string(::getpid());
}

/// Prints `err` for agent `name`: an unknown agent in those words (exit 4).
int agent_fail(const std::string& name, const caf::error& err) {
  if (is(err, persistence_errc::not_found)) {
    std::cerr << "error: unknown agent " << name << "\n";
    return canopy::core::exit_code_of(err);
  }
  return fail(err);
}

/// The name and `--on-busy` of `agent create`, checked before any file is
/// read. @returns 0, or the exit code after printing the error.
int check_agent_args(const agent_options& o, std::optional<busy_policy>& policy) {
  if (auto why = check_agent_name(o.name); !why.empty())
    return usage_error("agent name '" + o.name + "': " + why);
  if (!o.on_busy.empty()) {
    busy_policy p;
    if (!from_string(o.on_busy, p))
      return usage_error("--on-busy '" + o.on_busy
                         + "': expected cancel_previous, queue or reject");
    policy = p;
  }
  if (!o.node.empty())
    if (auto why = check_node_name(o.node); !why.empty())
      return usage_error("--node '" + o.node + "': " + why);
  return 0;
}

/// Parses an agent's graph file with the CLI's graph options (as `run`
/// does) and checks it can be an agent's graph (runtime/docs/reference/graph-format.md#agent-graphs). For a server
/// (`for_server`) any tool name passes: the server checks them against its
/// tools and its workers'. Every error is printed as `FILE: PATH: message`.
/// @returns the graph, or null.
std::shared_ptr<const graph> load_agent_graph(const std::string& file, bool for_server) {
  parse_options opts;
  opts.any_tool = for_server;
  auto parsed = parse_graph_file(file, opts);
  if (!parsed) {
    report_graph_errors(file, parsed);
    return nullptr;
  }
  parse_result bad;
  bad.errors = check_agent_graph(*parsed.value);
  if (!bad.errors.empty()) {
    report_graph_errors(file, bad);
    return nullptr;
  }
  return parsed.value;
}

/// Prints the outcome of `agent send` and @returns its exit code: 0
/// completed, 3 stopped or cancelled, 1 failed or busy. `resume_hint`
/// gives the command that resumes a run of that id.
int report_message(const std::string& name, const agent_reply& r, bool as_json,
                   const std::function<std::string(const std::string&)>& resume_hint) {
  if (as_json) {
    json out = {{"reply", r.reply},
                {"execution_id", r.execution_id.empty() ? json() : json(r.execution_id)},
                {"status", to_string(r.status)}};
    if (r.reason != step_reason::none)
      out["reason"] = to_string(r.reason);
    if (!r.error.empty())
      out["error"] = r.error;
    std::cout << out.dump() << "\n";
  }
  auto hint = [&] {
    if (!r.execution_id.empty())
      std::cerr << "resume with: " << resume_hint(r.execution_id) << "\n";
  };
  if (r.status == reply_status::completed) {
    if (!as_json) {
      auto text = content_text(r.reply);
      std::cout << text;
      if (text.empty() || text.back() != '\n')
        std::cout << "\n";
    }
    return exit_completed;
  }
  if (r.status == reply_status::busy) {
    std::cerr << "agent " << name << " is busy\n";
    return exit_failed;
  }
  if (r.status == reply_status::cancelled) {
    std::cerr << "the message to agent " << name << " was cancelled"
              << (r.error.empty() ? std::string{} : ": " + r.error) << "\n";
    return exit_stopped;
  }
  std::cerr << to_string(r.status)
            << (r.reason == step_reason::none ? std::string{}
                                              : std::string{" ("} + to_string(r.reason) + ")");
  if (!r.execution_id.empty())
    std::cerr << ": " << r.execution_id;
  std::cerr << "\n";
  if (!r.error.empty())
    std::cerr << "error: " << r.error << "\n";
  hint();
  return r.status == reply_status::stopped ? exit_stopped : exit_failed;
}

int cmd_agent_create(const global_options& g, const agent_options& o) {
  std::optional<busy_policy> policy;
  if (int rc = check_agent_args(o, policy))
    return rc;
  auto gr = load_agent_graph(o.graph_file, false);
  if (!gr)
    return exit_usage;
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  // Graph and policy are both replaced: without --on-busy, the default (as
  // a server does when the body has no `on_busy`).
  auto res = (*rt)->create_agent(local_owner, o.name, *gr,
                                 policy.value_or(busy_policy::cancel_previous), o.node);
  if (!res)
    return fail(res.error());
  if (o.json)
    std::cout << agent_document(res->first).dump() << "\n";
  else
    std::cout << (res->second ? "created" : "updated") << " agent " << o.name << "\n";
  return exit_completed;
}

int cmd_agent_send(const global_options& g, const agent_options& o) {
  std::optional<node_config> cfg;
  if (!o.config.empty() && !(cfg = read_run_config(o.config)))
    return exit_usage;
  interrupt_guard guard;
  auto opened = open_runtime(g, cfg ? &*cfg : nullptr);
  if (!opened)
    return fail(opened.error());
  auto& rt = **opened;
  auto who = cli_who();
  std::atomic<bool> over{false};
  // Ctrl-C cancels the agent's run; a second one forces its stop. Every call
  // into the runtime is made on a thread that ends with it.
  guard.watch([&](int n) {
    if (n == 0) {
      std::cerr << "\ncancelling the run of agent " << o.name << " (Ctrl-C again to force)\n";
      // The run may not be stored yet: ask again until it was cancelled or
      // the send is over.
      while (!over) {
        caf::expected<cancel_result> res{cancel_result::no_execution};
        std::thread([&] { res = rt.cancel_agent(local_owner, o.name, who, millis{0}); }).join();
        if (!res || *res == cancel_result::cancelled)
          return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return;
    }
    std::thread([&] {
      if (auto runs = rt.db()->agent_runs(local_owner, o.name))
        for (auto& run : *runs)
          (void) rt.stop(run.first, stop_mode::force, who);
    }).join();
  });
  auto reply = rt.send_to_agent(local_owner, o.name, json(o.text), who);
  over = true;
  guard.finish();
  if (!reply)
    return agent_fail(o.name, reply.error());
  auto home = rt.db()->home();
  return report_message(o.name, *reply, o.json, [&](const std::string& id) {
    return "canopy --home " + home + " resume " + id;
  });
}

int cmd_agent_cancel(const global_options& g, const agent_options& o) {
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  double wait_s = o.wait_s.value_or(30);
  auto res = (*rt)->cancel_agent(local_owner, o.name, cli_who(),
                                 millis{static_cast<int64_t>(wait_s * 1000)});
  if (!res)
    return agent_fail(o.name, res.error());
  std::cout << to_string(*res) << "\n";
  return exit_completed;
}

/// Prints history documents: the JSON array, or one line per entry.
void print_history(const json& docs, bool as_json) {
  if (as_json)
    std::cout << docs.dump() << "\n";
  else
    std::cout << render_history(docs);
}

int cmd_agent_history(const global_options& g, const agent_options& o) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  if (auto ag = (*db)->agent(local_owner, o.name); !ag)
    return agent_fail(o.name, ag.error());
  auto entries = (*db)->history(local_owner, o.name);
  if (!entries)
    return fail(entries.error());
  json out = json::array();
  for (auto& e : *entries)
    out.push_back(history_document(e));
  print_history(out, o.json);
  return exit_completed;
}

int cmd_agent_ls(const global_options& g, bool as_json) {
  auto db = open_listing(g, as_json);
  if (!db)
    return fail(db.error());
  json out = json::array();
  if (*db) {
    auto rows = (*db)->agents(local_owner);
    if (!rows)
      return fail(rows.error());
    for (auto& a : *rows)
      out.push_back(agent_document(a));
  }
  if (as_json)
    std::cout << out.dump() << "\n";
  else
    std::cout << render_agents(out);
  return exit_completed;
}

// -- agents on a server (--server URL) -------------------------------------------------------

int remote_agent_create(const remote_options& r, const agent_options& o) {
  std::optional<busy_policy> policy;
  if (int rc = check_agent_args(o, policy))
    return rc;
  auto gr = load_agent_graph(o.graph_file, true);
  if (!gr)
    return exit_usage;
  // A server never reads files from the sender's disk: the graph is sent as
  // one document.
  if (!gr->files.empty()) {
    std::cerr << o.graph_file << ": the graph includes other files (";
    bool first = true;
    for (auto& kv : gr->files) {
      std::cerr << (first ? "" : ", ") << kv.first;
      first = false;
    }
    std::cerr << "); a graph sent to a server must be one document: put the included "
                 "graphs inline\n";
    return exit_usage;
  }
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto res = api->create_agent(o.name, gr->document, o.on_busy, o.node);
  if (!res)
    return fail(res.error());
  if (o.json)
    std::cout << res->body.dump() << "\n";
  else
    std::cout << (res->status == 201 ? "created" : "updated") << " agent " << o.name << "\n";
  return exit_completed;
}

int remote_agent_send(const remote_options& r, const agent_options& o) {
  interrupt_guard guard;
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  guard.watch([&](int n) {
    if (n == 0)
      std::cerr << "\ncancelling the run of agent " << o.name << "\n";
    auto& client = *api;
    std::thread([&] {
      if (auto res = client.cancel_agent(o.name); !res)
        std::cerr << "error: " << message_of(res.error()) << "\n";
    }).join();
  });
  auto answer = api->send_agent_message(o.name, json(o.text));
  guard.finish();
  if (!answer)
    return fail(answer.error());
  auto url = api->options().server.text();
  return report_message(o.name, *answer, o.json, [&](const std::string& id) {
    return "POST " + url + "/v1/executions/" + id + "/resume";
  });
}

int remote_agent_cancel(const remote_options& r, const agent_options& o) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  // The server's cancel takes no wait of its own (it waits up to 30 s):
  // --wait only bounds how long this waits for its answer.
  auto wait = millis{static_cast<int64_t>(o.wait_s.value_or(30) * 1000)};
  auto res = api->cancel_agent(o.name, wait);
  if (!res)
    return fail(res.error());
  std::cout << to_string(*res) << "\n";
  return exit_completed;
}

int remote_agent_history(const remote_options& r, const agent_options& o) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto doc = api->agent(o.name);
  if (!doc)
    return fail(doc.error());
  auto history = doc->value("history", json::array());
  print_history(history.is_array() ? history : json::array(), o.json);
  return exit_completed;
}

int remote_agent_ls(const remote_options& r, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto items = api->agents();
  if (!items)
    return fail(items.error());
  json out = json::array();
  for (auto& item : *items)
    out.push_back(std::move(item));
  if (as_json)
    std::cout << out.dump() << "\n";
  else
    std::cout << render_agents(out);
  return exit_completed;
}

} // namespace

// -- wiring and dispatch ------------------------------------------------------------------

void add_agent_commands(CLI::App& app, agent_commands& cmds,
                        const std::function<void(CLI::App*)>& add_remote) {
  auto& ao = cmds.options;
  auto agent = app.add_subcommand("agent", "named agents: create, send, cancel, history, ls");
  agent->require_subcommand(1);
  auto agent_create = cmds.create =
    agent->add_subcommand("create", "create an agent, or replace its graph");
  agent_create->add_option("name", ao.name, "agent name")->required();
  agent_create->add_option("--graph", ao.graph_file, "the agent's graph file")->required();
  agent_create->add_option("--on-busy", ao.on_busy,
                           "cancel_previous (default), queue or reject");
  agent_create->add_option("--node", ao.node,
                           "the cluster node it lives on: its steps run there "
                           "(default: any node)");
  agent_create->add_flag("--json", ao.json, "print the agent document");
  add_remote(agent_create);
  auto agent_send = cmds.send = agent->add_subcommand("send", "send a message and print the reply");
  agent_send->add_option("name", ao.name, "agent name")->required();
  agent_send->add_option("text", ao.text, "the message (a JSON string)")->required();
  agent_send->add_flag("--json", ao.json, "print {reply, execution_id, status}");
  agent_send->add_option("--config", ao.config,
                         "a node config file whose tools and providers the agent's run may use");
  add_remote(agent_send);
  auto agent_cancel = cmds.cancel =
    agent->add_subcommand("cancel", "cancel the agent's live run");
  agent_cancel->add_option("name", ao.name, "agent name")->required();
  agent_cancel->add_option("--wait", ao.wait_s, "seconds to wait for the run to stop (default 30)")
    ->check(CLI::Range(0.0, 3600.0));
  add_remote(agent_cancel);
  auto agent_history = cmds.history =
    agent->add_subcommand("history", "the agent's conversation");
  agent_history->add_option("name", ao.name, "agent name")->required();
  agent_history->add_flag("--json", ao.json, "print the array of history entries");
  add_remote(agent_history);
  auto agent_ls = cmds.ls = agent->add_subcommand("ls", "list agents");
  agent_ls->add_flag("--json", ao.json, "print a JSON array of agent documents");
  add_remote(agent_ls);
}

std::optional<int> run_agent_command(const agent_commands& cmds, const global_options& g,
                                     const remote_options& r) {
  auto& ao = cmds.options;
  bool on_server = !r.server.empty();
  if (cmds.create->parsed())
    return on_server ? remote_agent_create(r, ao) : cmd_agent_create(g, ao);
  if (cmds.send->parsed()) {
    if (on_server && !ao.config.empty())
      return usage_error("--config is for a local send: a server has its own");
    return on_server ? remote_agent_send(r, ao) : cmd_agent_send(g, ao);
  }
  if (cmds.cancel->parsed())
    return on_server ? remote_agent_cancel(r, ao) : cmd_agent_cancel(g, ao);
  if (cmds.history->parsed())
    return on_server ? remote_agent_history(r, ao) : cmd_agent_history(g, ao);
  if (cmds.ls->parsed())
    return on_server ? remote_agent_ls(r, ao.json) : cmd_agent_ls(g, ao.json);
  return std::nullopt;
}

} // namespace canopy::core::cli
