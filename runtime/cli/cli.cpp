// The `canopy` command line: `cli_main` declares every command with CLI11,
// parses, and dispatches to the files that run them (cli_run.cpp, cli_inspect.cpp,
// cli_serve.cpp, cli_graph.cpp, cli_ls.cpp, cli_logs.cpp, cli_agents.cpp,
// cli_prune.cpp; with `--server URL`, cli_remote.cpp and cli_remote_run.cpp);
// what these files share is in cli_common.hpp.

#include "runtime/cli/cli.hpp"

#include <functional>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "persistence/suggest.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/cli/cli_help.hpp"
#include "runtime/node/worker.hpp"

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

using namespace cli; // the commands' options, declarations and runners

/// Every command's options, and the handles that tell which command was given.
struct command_line {
  cli::global_options g;
  CLI::Option* max_parallel_opt = nullptr;
  cli::remote_options remote;
  std::function<void(CLI::App*)> add_remote; ///< adds `--server`, `--token`, `--cacert`
  // shared by several commands
  std::string id;
  std::string file;
  bool as_json = false;
  // run, resume, stop, events
  cli::run_options ro;
  std::optional<double> budget;
  std::string resume_config;
  std::string validate_config;
  bool force = false;
  double wait_s = 30;
  bool follow_live = false;
  // the commands declared by the files that run them
  cli::ls_options lo;
  cli::logs_options logs;
  cli::serve_flags sf;
  worker_flags wf;
  CLI::Option* slots_opt = nullptr;
  cli::agent_commands agents;
  cli::signal_commands signals;
  cli::prune_options po;
  std::string shell;
  CLI::App* run = nullptr;
  CLI::App* resume = nullptr;
  CLI::App* stop = nullptr;
  CLI::App* show = nullptr;
  CLI::App* events = nullptr;
  CLI::App* serve = nullptr;
  CLI::App* worker = nullptr;
  CLI::App* graph_push = nullptr;
  CLI::App* graph_ls = nullptr;
  CLI::App* validate = nullptr;
  CLI::App* version = nullptr;
  CLI::App* completion = nullptr;
};

void add_global_options(CLI::App& app, command_line& c) {
  app.add_option("--home", c.g.home, "store folder (default: $CANOPY_HOME, else ./.canopy)");
  app.add_option("--color", c.g.color,
                 "colour the live tree: auto (a terminal without $NO_COLOR), always, never")
    ->check(CLI::IsMember({"auto", "always", "never"}));
  c.max_parallel_opt =
    app.add_option("--max-parallel", c.g.max_parallel, "subprocesses at once (default 4)")
      ->check(CLI::Range(1, 4096));
  c.add_remote = [&remote = c.remote](CLI::App* cmd) {
    cmd->add_option("--server", remote.server,
                    "a canopy server, http://HOST:PORT or https://HOST:PORT");
    cmd->add_option("--token", remote.token, "bearer token for --server (default $CANOPY_TOKEN)");
    cmd->add_option("--cacert", remote.cacert,
                    "PEM file of the CA that signed an https --server's certificate "
                    "(default: the system's CAs)");
  };
}

/// `run`, `resume` and `stop`.
void add_run_commands(CLI::App& app, command_line& c) {
  auto& ro = c.ro;
  c.run = app.add_subcommand("run", "start an execution and follow it");
  c.run->add_option("file", ro.file, "graph file")->required();
  c.run->add_option("--input", ro.inputs, "input K=V (string) or K:=JSON");
  c.run->add_option("--signal", ro.signals,
                    "signal NAME=JSON for a wait of the graph, stored with the execution");
  c.run->add_flag("--json", ro.json, "print the execution document as JSON");
  c.run->add_flag("--detach", ro.detach, "run in the background and print the id");
  c.run->add_option("--detached-fd", ro.detached_fd)->group("");
  c.run->add_option("--config", ro.config,
                    "a node config file whose tools and providers the run may use");
  c.add_remote(c.run);

  c.resume = app.add_subcommand("resume", "resume a stopped, failed or interrupted execution");
  c.resume->add_option("id", c.id, "execution id")->required();
  c.resume->add_option("--budget", c.budget, "raise the tree's budget")
    ->check(CLI::Range(0.0, 1e12));
  c.resume->add_flag("--json", c.as_json, "print the execution document as JSON");
  c.resume->add_option("--config", c.resume_config,
                       "a node config file whose tools and providers the run may use");
  c.add_remote(c.resume);

  c.stop = app.add_subcommand("stop", "stop an execution running in another process");
  c.stop->add_option("id", c.id, "execution id")->required();
  c.stop->add_flag("--force", c.force, "no grace periods: SIGKILL at once");
  c.stop->add_option("--wait", c.wait_s, "seconds to wait for the snapshot (default 30)")
    ->check(CLI::Range(0.0, 3600.0));
  c.add_remote(c.stop);
}

/// `show`, `ls`, `events` and `logs`.
void add_inspect_commands(CLI::App& app, command_line& c) {
  c.show = app.add_subcommand("show", "an execution, its steps and descendants");
  c.show->add_option("id", c.id, "execution id")->required();
  c.show->add_flag("--json", c.as_json, "print the document as JSON");
  c.add_remote(c.show);
  add_ls_command(app, c.lo, c.add_remote);
  c.events = app.add_subcommand("events", "the event log of an execution's tree");
  c.events->add_option("id", c.id, "execution id")->required();
  c.events->add_flag("--follow", c.follow_live, "keep printing until the tree stops running");
  c.events->add_flag("--json", c.as_json, "one JSON event per line");
  c.add_remote(c.events);
  add_logs_command(app, c.logs, c.add_remote);
}

/// `serve` and `worker`.
void add_node_commands(CLI::App& app, command_line& c) {
  auto& sf = c.sf;
  c.serve = app.add_subcommand("serve", "run a supervisor node with the HTTP API");
  c.serve->add_option("--listen", sf.listen, "HOST:PORT of the HTTP API (default 127.0.0.1:8080)");
  c.serve->add_option("--cluster", sf.cluster, "HOST:PORT of the cluster port");
  c.serve->add_option("--config", sf.config, "node configuration file (JSON)");
  c.serve->add_flag("--resume-interrupted", sf.resume_interrupted,
                    "resume the executions a dead process left interrupted");
  auto& wf = c.wf;
  c.worker = app.add_subcommand("worker", "run a node that runs steps for a supervisor");
  c.worker->add_option("--join", wf.join, "HOST:PORT of the supervisor's cluster port")
    ->required();
  c.slots_opt = c.worker->add_option("--slots", wf.slots, "subprocess steps at once (default 4)")
                  ->check(CLI::Range(1, 4096));
  c.worker->add_option("--tools", wf.tools_file,
                       "tools file (JSON: tools; cluster: secret, heartbeat, timeout)");
  c.worker->add_option("--name", wf.name, "node name (default: the host name)");
  c.worker->add_option("--heartbeat", wf.heartbeat,
                       "ping interval, e.g. 500ms (default: the tools file's cluster.heartbeat, "
                       "else 1s)");
  c.worker->add_option("--timeout", wf.timeout,
                       "the supervisor is lost after this much silence (default: the tools "
                       "file's cluster.timeout, else 5s)");
}

/// `graph push`, `graph ls` and `validate`.
void add_graph_commands(CLI::App& app, command_line& c) {
  auto graph_cmd = app.add_subcommand("graph", "graphs registered on a server");
  graph_cmd->require_subcommand(1);
  c.graph_push = graph_cmd->add_subcommand("push", "validate a graph file and register it "
                                                   "(its next version) on a server");
  c.graph_push->add_option("file", c.file, "graph file")->required();
  c.graph_push->add_flag("--json", c.as_json, "print {\"id\", \"version\"}");
  c.add_remote(c.graph_push);
  c.graph_ls = graph_cmd->add_subcommand("ls", "the graphs registered on a server, the "
                                               "newest version of each");
  c.graph_ls->add_flag("--json", c.as_json, "print a JSON array");
  c.add_remote(c.graph_ls);
  c.validate = app.add_subcommand("validate", "check a graph file");
  c.validate->add_option("file", c.file, "graph file")->required();
  c.validate->add_option("--config", c.validate_config,
                         "a node config file whose tools the graph may use (as run --config)");
  c.add_remote(c.validate);
}

/// Declares every command, in the order `--help` lists them within their headings.
void declare_commands(CLI::App& app, command_line& c) {
  add_global_options(app, c);
  add_run_commands(app, c);
  add_inspect_commands(app, c);
  add_node_commands(app, c);
  add_agent_commands(app, c.agents, c.add_remote);
  add_signal_commands(app, c.signals, c.add_remote);
  add_prune_command(app, c.po);
  add_graph_commands(app, c);
  c.version = app.add_subcommand("version", "print canopy's version");
  app.set_version_flag("--version", std::string{"canopy "} + CANOPY_VERSION);
  c.completion = add_completion_command(app, c.shell);
  group_commands(app);
}

/// Parses the command line. @returns the exit code when parsing ends the
/// program (help, version, a usage error), else nothing.
std::optional<int> parse(CLI::App& app, int argc, char** argv) {
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
      return cli::exit_usage;
    }
    std::cerr << "error: " << e.what() << "\n" << "run 'canopy --help' for usage\n";
    return cli::exit_usage;
  }
  return std::nullopt;
}

/// `worker`: `--max-parallel` is an alias of `--slots`.
int worker_command(command_line& c) {
  if (c.max_parallel_opt->count() > 0) {
    if (c.slots_opt->count() > 0 && c.wf.slots != c.g.max_parallel)
      return cli::usage_error("--slots " + std::to_string(c.wf.slots) + " and --max-parallel "
                              + std::to_string(c.g.max_parallel) + " disagree (one is an alias "
                              "of the other)");
    c.wf.slots = c.g.max_parallel;
  }
  return run_worker(c.wf);
}

/// Runs the command that was given. @returns the exit code.
int dispatch(CLI::App& app, command_line& c, const char* argv0) {
  using namespace cli;
  auto& remote = c.remote;
  if (c.version->parsed()) {
    std::cout << "canopy " << CANOPY_VERSION << "\n";
    return 0;
  }
  if (c.completion->parsed())
    return print_completion(app, c.shell);
  if (!remote.token.empty() && remote.server.empty())
    return usage_error("--token needs --server URL");
  if (!remote.cacert.empty() && remote.server.rfind("https://", 0) != 0)
    return usage_error("--cacert needs --server https://HOST:PORT");
  if (c.run->parsed())
    return cmd_run(c.g, c.ro, remote, argv0);
  if (c.resume->parsed())
    return cmd_resume(c.g, remote, c.id, c.as_json, c.budget, c.resume_config);
  if (c.graph_push->parsed())
    return cmd_graph_push(c.file, remote, c.as_json);
  if (c.graph_ls->parsed()) {
    if (remote.server.empty())
      return usage_error("graph ls lists the graphs registered on a server: pass --server URL");
    return remote_graph_ls(remote, c.as_json);
  }
  bool on_server = !remote.server.empty();
  if (c.stop->parsed())
    return on_server ? remote_stop(remote, c.id, c.force, c.wait_s)
                     : cmd_stop(c.g, c.id, c.force, c.wait_s);
  if (c.show->parsed())
    return on_server ? remote_show(remote, c.id, c.as_json) : cmd_show(c.g, c.id, c.as_json);
  if (c.lo.cmd->parsed())
    return run_ls(c.g, remote, c.lo);
  if (c.events->parsed())
    return on_server ? remote_events(remote, c.id, c.follow_live, c.as_json)
                     : cmd_events(c.g, c.id, c.follow_live, c.as_json);
  if (c.logs.cmd->parsed())
    return on_server ? remote_logs(remote, c.logs) : cmd_logs(c.g, c.logs);
  if (auto rc = run_signal_command(c.signals, c.g, remote))
    return *rc;
  if (auto rc = run_agent_command(c.agents, c.g, remote))
    return *rc;
  if (c.serve->parsed())
    return cmd_serve(c.g, c.max_parallel_opt->count() > 0, c.sf);
  if (c.validate->parsed())
    return cmd_validate(c.file, c.validate_config, remote);
  if (c.po.cmd->parsed())
    return cmd_prune(c.g, c.po);
  if (c.worker->parsed())
    return worker_command(c);
  return exit_usage;
}

} // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"canopy: run agent graphs as supervised actor trees"};
  app.require_subcommand(1);
  app.fallthrough();
  command_line c;
  declare_commands(app, c);
  if (auto rc = parse(app, argc, argv))
    return *rc;
  return dispatch(app, c, argv[0]);
}

} // namespace canopy::core
