// The `canopy` command line: `cli_main` wires every command with CLI11 and
// dispatches to the files that run them (cli_run.cpp, cli_inspect.cpp,
// cli_serve.cpp, cli_graph.cpp, cli_ls.cpp, cli_logs.cpp, cli_agents.cpp,
// cli_prune.cpp; with `--server URL`, cli_remote.cpp and cli_remote_run.cpp);
// what these files share is in cli_common.hpp.

#include "runtime/cli.hpp"

#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "persistence/suggest.hpp"
#include "runtime/cli_common.hpp"
#include "runtime/cli_help.hpp"
#include "runtime/worker.hpp"

namespace canopy::core {

namespace {

/// The names of `app`'s subcommands.
std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> out;
  for (auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    out.push_back(sub->get_name());
  return out;
}

/// The first word of the command line when it is where a command goes but
/// names none (`canopy lst`); global options and their values are skipped.
std::optional<std::string> unknown_command(CLI::App& app, int argc, char** argv) {
  auto names = command_names(app);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--home" || a == "--max-parallel" || a == "--color") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-')
      continue;
    if (std::find(names.begin(), names.end(), a) != names.end())
      return std::nullopt;
    return a;
  }
  return std::nullopt;
}

} // namespace

int cli_main(int argc, char** argv) {
  using namespace cli;
  CLI::App app{"canopy: run agent graphs as supervised actor trees"};
  app.require_subcommand(1);
  app.fallthrough();
  global_options g;
  app.add_option("--home", g.home, "store folder (default: $CANOPY_HOME, else ./.canopy)");
  app.add_option("--color", g.color,
                 "colour the live tree: auto (a terminal without $NO_COLOR), always, never")
    ->check(CLI::IsMember({"auto", "always", "never"}));
  auto max_parallel_opt =
    app.add_option("--max-parallel", g.max_parallel, "subprocesses at once (default 4)")
      ->check(CLI::Range(1, 4096));

  run_options ro;
  auto run = app.add_subcommand("run", "start an execution and follow it");
  run->add_option("file", ro.file, "graph file")->required();
  run->add_option("--input", ro.inputs, "input K=V (string) or K:=JSON");
  run->add_option("--signal", ro.signals,
                  "signal NAME=JSON for a wait of the graph, stored with the execution");
  run->add_flag("--json", ro.json, "print the execution document as JSON");
  run->add_flag("--detach", ro.detach, "run in the background and print the id");
  run->add_option("--detached-fd", ro.detached_fd)->group("");
  run->add_option("--config", ro.config,
                  "a node config file whose tools and providers the run may use");

  std::string id;
  bool as_json = false;
  auto resume = app.add_subcommand("resume", "resume a stopped, failed or interrupted execution");
  resume->add_option("id", id, "execution id")->required();
  std::optional<double> budget;
  resume->add_option("--budget", budget, "raise the tree's budget")->check(CLI::Range(0.0, 1e12));
  resume->add_flag("--json", as_json, "print the execution document as JSON");
  std::string resume_config;
  resume->add_option("--config", resume_config,
                     "a node config file whose tools and providers the run may use");

  // `--server URL` and `--token TOKEN` on the commands that can use a server.
  remote_options remote;
  auto add_remote = [&remote](CLI::App* cmd) {
    cmd->add_option("--server", remote.server,
                    "a canopy server, http://HOST:PORT or https://HOST:PORT");
    cmd->add_option("--token", remote.token, "bearer token for --server (default $CANOPY_TOKEN)");
    cmd->add_option("--cacert", remote.cacert,
                    "PEM file of the CA that signed an https --server's certificate "
                    "(default: the system's CAs)");
  };

  add_remote(run);
  add_remote(resume);

  bool force = false;
  double wait_s = 30;
  auto stop = app.add_subcommand("stop", "stop an execution running in another process");
  stop->add_option("id", id, "execution id")->required();
  stop->add_flag("--force", force, "no grace periods: SIGKILL at once");
  stop->add_option("--wait", wait_s, "seconds to wait for the snapshot (default 30)")
    ->check(CLI::Range(0.0, 3600.0));
  add_remote(stop);

  auto show = app.add_subcommand("show", "an execution, its steps and descendants");
  show->add_option("id", id, "execution id")->required();
  show->add_flag("--json", as_json, "print the document as JSON");
  add_remote(show);

  ls_options lo;
  add_ls_command(app, lo, add_remote);

  bool follow_live = false;
  auto events = app.add_subcommand("events", "the event log of an execution's tree");
  events->add_option("id", id, "execution id")->required();
  events->add_flag("--follow", follow_live, "keep printing until the tree stops running");
  events->add_flag("--json", as_json, "one JSON event per line");
  add_remote(events);

  logs_options logs;
  add_logs_command(app, logs, add_remote);

  serve_flags sf;
  auto serve = app.add_subcommand("serve", "run a supervisor node with the HTTP API");
  serve->add_option("--listen", sf.listen, "HOST:PORT of the HTTP API (default 127.0.0.1:8080)");
  serve->add_option("--cluster", sf.cluster, "HOST:PORT of the cluster port");
  serve->add_option("--config", sf.config, "node configuration file (JSON)");
  serve->add_flag("--resume-interrupted", sf.resume_interrupted,
                  "resume the executions a dead process left interrupted");

  worker_flags wf;
  auto worker = app.add_subcommand("worker", "run a node that runs steps for a supervisor");
  worker->add_option("--join", wf.join, "HOST:PORT of the supervisor's cluster port")
    ->required();
  auto slots_opt = worker->add_option("--slots", wf.slots, "subprocess steps at once (default 4)")
                     ->check(CLI::Range(1, 4096));
  worker->add_option("--tools", wf.tools_file, "tools file (JSON: tools; cluster: secret, heartbeat, timeout)");
  worker->add_option("--name", wf.name, "node name (default: the host name)");
  worker->add_option("--heartbeat", wf.heartbeat,
                     "ping interval, e.g. 500ms (default: the tools file's cluster.heartbeat, "
                     "else 1s)");
  worker->add_option("--timeout", wf.timeout,
                     "the supervisor is lost after this much silence (default: the tools "
                     "file's cluster.timeout, else 5s)");

  agent_commands agents;
  add_agent_commands(app, agents, add_remote);

  signal_commands signals;
  add_signal_commands(app, signals, add_remote);

  prune_options po;
  add_prune_command(app, po);

  std::string file;
  auto graph_cmd = app.add_subcommand("graph", "graphs registered on a server");
  graph_cmd->require_subcommand(1);
  auto graph_push = graph_cmd->add_subcommand("push", "validate a graph file and register it "
                                                      "(its next version) on a server");
  graph_push->add_option("file", file, "graph file")->required();
  graph_push->add_flag("--json", as_json, "print {\"id\", \"version\"}");
  add_remote(graph_push);
  auto graph_ls = graph_cmd->add_subcommand("ls", "the graphs registered on a server, the "
                                                  "newest version of each");
  graph_ls->add_flag("--json", as_json, "print a JSON array");
  add_remote(graph_ls);

  auto validate = app.add_subcommand("validate", "check a graph file");
  validate->add_option("file", file, "graph file")->required();
  add_remote(validate);

  auto version = app.add_subcommand("version", "print canopy's version");
  app.set_version_flag("--version", std::string{"canopy "} + CANOPY_VERSION);

  std::string shell;
  auto completion = add_completion_command(app, shell);
  group_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (auto word = unknown_command(app, argc, argv)) {
      std::cerr << "error: unknown command '" << *word << "'";
      if (auto near = nearest(*word, command_names(app)))
        std::cerr << ": did you mean '" << *near << "'?";
      std::cerr << "\nrun 'canopy --help' for the commands\n";
      return exit_usage;
    }
    std::cerr << "error: " << e.what() << "\n" << "run 'canopy --help' for usage\n";
    return exit_usage;
  }
  if (version->parsed()) {
    std::cout << "canopy " << CANOPY_VERSION << "\n";
    return 0;
  }
  if (completion->parsed())
    return print_completion(app, shell);
  if (!remote.token.empty() && remote.server.empty())
    return usage_error("--token needs --server URL");
  if (!remote.cacert.empty() && remote.server.rfind("https://", 0) != 0)
    return usage_error("--cacert needs --server https://HOST:PORT");
  if (run->parsed())
    return cmd_run(g, ro, remote, argv[0]);
  if (resume->parsed())
    return cmd_resume(g, remote, id, as_json, budget, resume_config);
  if (graph_push->parsed())
    return cmd_graph_push(file, remote, as_json);
  if (graph_ls->parsed()) {
    if (remote.server.empty())
      return usage_error("graph ls lists the graphs registered on a server: pass --server URL");
    return remote_graph_ls(remote, as_json);
  }
  bool on_server = !remote.server.empty();
  if (stop->parsed())
    return on_server ? remote_stop(remote, id, force, wait_s) : cmd_stop(g, id, force, wait_s);
  if (show->parsed())
    return on_server ? remote_show(remote, id, as_json) : cmd_show(g, id, as_json);
  if (lo.cmd->parsed())
    return run_ls(g, remote, lo);
  if (events->parsed())
    return on_server ? remote_events(remote, id, follow_live, as_json)
                     : cmd_events(g, id, follow_live, as_json);
  if (logs.cmd->parsed())
    return on_server ? remote_logs(remote, logs) : cmd_logs(g, logs);
  if (auto rc = run_signal_command(signals, g, remote))
    return *rc;
  if (auto rc = run_agent_command(agents, g, remote))
    return *rc;
  if (serve->parsed())
    return cmd_serve(g, max_parallel_opt->count() > 0, sf);
  if (validate->parsed())
    return cmd_validate(file, remote);
  if (po.cmd->parsed())
    return cmd_prune(g, po);
  if (worker->parsed()) {
    // `--max-parallel` is an alias of `--slots` (SPEC §13 rule 15).
    if (max_parallel_opt->count() > 0) {
      if (slots_opt->count() > 0 && wf.slots != g.max_parallel)
        return usage_error("--slots " + std::to_string(wf.slots) + " and --max-parallel "
                           + std::to_string(g.max_parallel) + " disagree (one is an alias "
                           "of the other)");
      wf.slots = g.max_parallel;
    }
    return run_worker(wf);
  }
  return exit_usage;
}

} // namespace canopy::core
