// The `canopy` command line: `cli_main` wires every command with CLI11 and
// dispatches; the commands that work on the local home are here. With
// `--server URL` they run on a server (cli_remote.cpp); `canopy agent` is in
// cli_agents.cpp; what these files share is in cli_common.hpp.

#include "runtime/cli.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>

#include "actors/execution/execution_actor.hpp"
#include "persistence/error.hpp"
#include "persistence/suggest.hpp"
#include "runtime/cli_common.hpp"
#include "runtime/cli_help.hpp"
#include "runtime/cluster_transport.hpp"
#include "runtime/http_tls.hpp"
#include "runtime/config.hpp"
#include "runtime/document.hpp"
#include "runtime/error.hpp"
#include "runtime/render.hpp"
#include "runtime/runtime.hpp"
#include "runtime/server.hpp"
#include "runtime/worker.hpp"

extern char** environ;

namespace canopy::cli {

namespace {

// -- commands --------------------------------------------------------------------------

struct run_options {
  std::string file;
  std::vector<std::string> inputs;
  bool json = false;
  bool detach = false;
  int detached_fd = -1; ///< internal: the detached child reports its id here
};

/// `run --detach`: re-executes this program in a session of its own and
/// prints the id the child reports.
int run_detached(const global_options& g, const run_options& o, const char* self_exe) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return usage_error(std::string{"pipe: "} + std::strerror(errno));
  std::vector<std::string> args = {self_exe, "--home", home_of(g), "--max-parallel",
                                   std::to_string(g.max_parallel), "run", o.file,
                                   "--detached-fd", "3"};
  for (auto& i : o.inputs) {
    args.push_back("--input");
    args.push_back(i);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 3);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::string log = home_of(g) + "/detached.log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return usage_error(std::string{"cannot start background process: "} + std::strerror(rc));
  }
  std::string id;
  char buf[64];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0)
    id.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  while (!id.empty() && id.back() == '\n')
    id.pop_back();
  if (id.empty()) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::cerr << "error: the background run did not start (see " << log << ")\n";
    return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : exit_failed;
  }
  // The child runs on in its own session; init reaps it when it exits.
  if (o.json)
    std::cout << json{{"id", id}}.dump() << "\n";
  else
    std::cout << id << "\n";
  return exit_completed;
}

int cmd_run(const global_options& g, const run_options& o, const remote_options& remote,
            const char* self_exe) {
  auto inputs = parse_inputs(o.inputs);
  if (!inputs)
    return fail(inputs.error());
  // Validate before anything is stored (and before a detached child starts).
  // A server checks tool names against its own tools and its workers'.
  parse_options popts;
  popts.any_tool = !remote.server.empty();
  auto parsed = parse_graph_file(o.file, popts);
  if (!parsed)
    return report_graph_errors(o.file, parsed);
  if (auto err = check_inputs(*parsed.value, *inputs))
    return fail(err);
  if (!remote.server.empty())
    return remote_run(g, remote, o.file, *parsed.value, std::move(*inputs), o.json, o.detach);
  if (o.detach)
    return run_detached(g, o, self_exe);
  interrupt_guard guard;
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  auto h = (*rt)->start(parsed.value, std::move(*inputs));
  if (!h)
    return fail(h.error());
  if (o.detached_fd >= 0) {
    auto line = h->id() + "\n";
    (void) !::write(o.detached_fd, line.data(), line.size());
    ::close(o.detached_fd);
  }
  return follow(g, **rt, *h, guard, o.json);
}

int cmd_resume(const global_options& g, const remote_options& remote, const std::string& id,
               bool as_json, std::optional<double> budget) {
  if (!remote.server.empty())
    return remote_resume(g, remote, id, as_json, budget);
  interrupt_guard guard;
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  auto before = (*rt)->db()->last_seq();
  if (!before)
    return fail(before.error());
  auto h = (*rt)->resume(id, budget);
  if (!h)
    return fail(h.error());
  return follow(g, **rt, *h, guard, as_json, *before);
}

/// `canopy stop`: stores the request (the stop protocol; the process that
/// owns the execution delivers it), then waits, polling the store and
/// recovering a dead owner meanwhile, until the execution settled.
int cmd_stop(const global_options& g, const std::string& id, bool force, double wait_s) {
  auto db = open_store(g, store_use::write);
  if (!db)
    return fail(db.error());
  auto mode = force ? stop_mode::force : stop_mode::graceful;
  auto ticket = request_stop(**db, id, mode, "cli:pid " + std::to_string(::getpid()));
  if (!ticket)
    return fail(ticket.error());
  if (ticket->result == stop_result::no_execution && ticket->request.id.empty()) {
    std::cout << "no_execution\n";
    return 0;
  }
  auto wait = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  auto result = await_stop(**db, *ticket, wait, [&]() -> caf::error {
    auto r = recover_interrupted(**db);
    return r ? caf::error{} : r.error();
  });
  if (!result)
    return fail(result.error());
  auto now = (*db)->execution(id);
  if (!now)
    return fail(now.error());
  if (*result == stop_result::stopping) {
    std::cout << to_string(now->status) << "\n";
    std::cerr << "still " << to_string(now->status) << " after " << wait_s << " s\n";
    return 1;
  }
  std::cout << to_string(now->status);
  if (!now->reason.empty())
    std::cout << " (" << now->reason << ")";
  std::cout << "\n";
  return 0;
}

int cmd_show(const global_options& g, const std::string& id, bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  return print_document(load_document(**db, id), as_json);
}

/// Prints one event of a local tree: a JSON line, or a human line.
void print_event(const event_record& e, tree_view& view, bool as_json) {
  if (as_json)
    std::cout << event_document(e).dump() << "\n";
  else
    std::cout << event_line(e, view.label(e.execution_id)) << "\n";
}

/// `canopy events ID [--follow]` on the local home: the events of `id`'s
/// subtree; with `follow_live`, keeps reading the store (another process
/// writes it) until `id` is terminal and every event up to that was printed.
int cmd_events(const global_options& g, const std::string& id, bool follow_live,
               bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  auto rec = (*db)->execution(id);
  if (!rec)
    return fail(rec.error());
  // Of a child, only its subtree: the ids known now, and those that join.
  bool whole_tree = id == rec->root_id;
  std::set<std::string> inside, outside;
  if (!whole_tree) {
    auto ids = (*db)->subtree_ids(id);
    if (!ids)
      return fail(ids.error());
    inside = std::move(*ids);
  }
  auto in_subtree = [&](const event_record& e) {
    if (whole_tree || inside.count(e.execution_id))
      return true;
    if (outside.count(e.execution_id))
      return false;
    // A new execution belongs when its parent does (lineage never changes).
    auto parent = e.parent_id;
    if (parent.empty())
      if (auto r = (*db)->execution(e.execution_id))
        parent = r->parent_id;
    bool in = !parent.empty() && inside.count(parent) > 0;
    (in ? inside : outside).insert(e.execution_id);
    return in;
  };
  tree_view view{**db, id};
  auto err = follow_store(**db, id, rec->root_id, follow_live,
                          [&](const execution_record&, const std::vector<event_record>& events) {
                            for (auto& e : events)
                              if (in_subtree(e))
                                print_event(e, view, as_json);
                            std::cout << std::flush;
                            return false;
                          });
  return err ? fail(err) : 0;
}

// -- serve ----------------------------------------------------------------------------------

/// Flags of `canopy serve`; each overrides the config file.
struct serve_flags {
  std::string config;  ///< empty: no file, SPEC §12 defaults
  std::string listen;  ///< empty: the file's (default 127.0.0.1:8080)
  std::string cluster; ///< empty: the file's (default: no cluster port)
  bool resume_interrupted = false;
};

/// `canopy serve`: reads the config, applies the flags over it, and runs
/// the server until SIGTERM/SIGINT. `max_parallel_given` says whether
/// `--max-parallel` was on the command line.
int cmd_serve(const global_options& g, bool max_parallel_given, const serve_flags& f) {
  server_options opts;
  if (!f.config.empty()) {
    auto parsed = load_node_config(f.config);
    if (!parsed) {
      for (auto& e : parsed.errors) {
        // `error: PATH: MESSAGE`; without a path, the file is the place.
        auto where = !e.path.empty() ? e.path + ": "
                     : e.message.find(f.config) == std::string::npos ? f.config + ": "
                                                                     : std::string{};
        std::cerr << "error: " << where << e.message << "\n";
      }
      if (parsed.errors.empty())
        std::cerr << "error: " << f.config << ": unusable configuration\n";
      return exit_usage;
    }
    opts.config = std::move(*parsed.value);
  }
  auto& cfg = opts.config;
  if (!f.listen.empty()) {
    std::string host;
    int port = 0;
    if (!split_host_port(f.listen, host, port))
      return usage_error("--listen '" + f.listen + "': expected HOST:PORT");
    cfg.listen = f.listen;
  }
  if (!f.cluster.empty()) {
    std::string host;
    int port = 0;
    if (!split_host_port(f.cluster, host, port))
      return usage_error("--cluster '" + f.cluster + "': expected HOST:PORT");
    if (!cfg.cluster)
      cfg.cluster.emplace();
    cfg.cluster->listen = f.cluster;
  }
  // A cluster port needs the cluster secret (SPEC §13 rule 22).
  if (cfg.cluster && !cfg.cluster->listen.empty() && cfg.cluster->secret.empty()) {
    if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
      cfg.cluster->secret = env;
    else
      return usage_error("the cluster port " + cfg.cluster->listen
                         + " needs a secret that workers present: put \"cluster\": "
                           "{\"secret\": \"...\"} in the file of --config FILE, or set "
                           "$CANOPY_CLUSTER_SECRET");
  }
  // TLS files that load, and no cleartext cluster port off loopback unless
  // the config says `"tls": false` (issue #13).
  if (cfg.cluster && !cfg.cluster->listen.empty()) {
    std::string host;
    int port = 0;
    split_host_port(cfg.cluster->listen, host, port);
    auto errors = check_cluster_transport(
      cfg.cluster, host, "the cluster port " + cfg.cluster->listen,
      f.config.empty() ? std::string{"a file passed with --config FILE"}
                       : "the file of --config (" + f.config + ")");
    for (auto& e : errors)
      std::cerr << "error: " << e.path << ": " << e.message << "\n";
    if (!errors.empty())
      return exit_usage;
  }
  // HTTPS files that load, and no plain HTTP off loopback unless the config
  // says `"insecure_http": true` (issue #14).
  {
    std::string host;
    int port = 0;
    split_host_port(cfg.listen, host, port);
    auto transport = load_http_transport(
      cfg, host,
      f.config.empty() ? std::string{"a file passed with --config FILE"}
                       : "the file of --config (" + f.config + ")");
    for (auto& e : transport.errors)
      std::cerr << "error: " << e.path << ": " << e.message << "\n";
    if (!transport.errors.empty())
      return exit_usage;
    opts.tls = std::move(transport.tls);
  }
  if (max_parallel_given)
    cfg.max_parallel = g.max_parallel;
  // --home, else the file's home, else $CANOPY_HOME, else ./.canopy.
  if (!g.home.empty())
    cfg.home = g.home;
  else if (cfg.home.empty())
    cfg.home = default_home();
  if (cfg.users.empty())
    if (auto token = std::getenv("CANOPY_TOKEN"); token && *token)
      cfg.users["default"] = token;
  if (cfg.users.empty())
    return usage_error("no users: every request needs a token; add "
                       "\"users\": {\"NAME\": {\"token\": \"...\"}} to the file of "
                       "--config FILE, or set $CANOPY_TOKEN for a user named 'default'");
  opts.resume_interrupted = f.resume_interrupted;
  return run_server(opts);
}

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

/// `canopy validate [--server URL]`: parses the file as `run` does and
/// resolves each `graph` step naming a registered graph as its run would:
/// locally none resolves (local executions have no registry); on a server,
/// the token's user's graph of that name must exist.
int cmd_validate(const std::string& file, const remote_options& remote) {
  parse_options opts;
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

} // namespace

} // namespace canopy::cli

namespace canopy {

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
  run->add_flag("--json", ro.json, "print the execution document as JSON");
  run->add_flag("--detach", ro.detach, "run in the background and print the id");
  run->add_option("--detached-fd", ro.detached_fd)->group("");

  std::string id;
  bool as_json = false;
  auto resume = app.add_subcommand("resume", "resume a stopped, failed or interrupted execution");
  resume->add_option("id", id, "execution id")->required();
  std::optional<double> budget;
  resume->add_option("--budget", budget, "raise the tree's budget")->check(CLI::Range(0.0, 1e12));
  resume->add_flag("--json", as_json, "print the execution document as JSON");

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
    return cmd_resume(g, remote, id, as_json, budget);
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

} // namespace canopy
