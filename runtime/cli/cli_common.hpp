#pragma once

// Internal to the `canopy` binary: what the CLI's files share (cli.cpp,
// cli_run.cpp, cli_remote.cpp, cli_agents.cpp, ...). Not installed; not part of
// the library API.

#include <atomic>
#include <csignal>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "persistence/graph.hpp"
#include "runtime/node/config.hpp"
#include "runtime/client/client.hpp"
#include "runtime/node/runtime.hpp"

/// The command line's internals, shared by its files; nothing outside the
/// `canopy` binary uses them.
namespace canopy::core::cli {

// -- exit codes (runtime/docs/reference/cli.md) ------------------------------------------------------

constexpr int exit_completed = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_stopped = 3;

/// The exit code of an execution that ended with status `s`: 0 completed,
/// 3 stopped, 1 otherwise (runtime/docs/reference/cli.md).
int exit_code_of(execution_status s);

/// Prints `err` and returns its exit code.
int fail(const caf::error& err);

/// Prints `msg` as an error and returns `exit_usage`.
int usage_error(const std::string& msg);

/// Prints the errors of a graph file as `FILE: PATH: message`.
/// @returns `exit_usage`.
int report_graph_errors(const std::string& file, const parse_result& r);

/// Parses `--input K=V` (string) and `--input K:=JSON` (JSON value).
/// @returns the inputs object, or `invalid_input` naming the bad item.
caf::expected<json> parse_inputs(const std::vector<std::string>& items);

/// Parses `--signal NAME=JSON` items into `{"NAME": VALUE}`.
/// @returns it, or `runtime_errc::invalid_input` naming the bad item.
caf::expected<json> parse_signals(const std::vector<std::string>& items);

// -- options shared by commands ------------------------------------------------------

/// `--home` and `--max-parallel`, the options of every command.
struct global_options {
  std::string home;
  size_t max_parallel = 4;
  std::string color = "auto"; ///< `--color auto|always|never`
};

/// Whether the live tree is coloured: `--color always` yes, `never` no,
/// `auto` on a terminal unless `$NO_COLOR` is set and not empty
/// (no-color.org).
bool use_colour(const global_options& g, bool tty);

/// `--server URL` and `--token TOKEN` of the commands that can use a server.
struct remote_options {
  std::string server; ///< empty: the local home
  std::string token;  ///< empty: `$CANOPY_TOKEN`
  std::string cacert; ///< `--cacert`: the CA of an https server; empty: the system's
};

// -- watching an execution in the foreground ----------------------------------------

/// Blocks SIGINT and SIGTERM in every thread (call before any thread starts)
/// and turns them into stops on a thread of their own: the first is graceful,
/// the second forces.
class interrupt_guard {
public:
  interrupt_guard();

  /// Calls `on_signal(n)` on the guard's thread for the n-th SIGINT or
  /// SIGTERM (from 0). `on_signal` makes its calls into CAF on threads that
  /// end before it returns: a thread that called into CAF and is still alive
  /// (blocked in sigwait) when the runtime is destroyed kept ~actor_system
  /// waiting forever (seen with CAF 0.17).
  void watch(std::function<void(int)> on_signal);

  /// Ends the watch: no signal is handled after this returns. Call it before
  /// the runtime that `on_signal` uses is destroyed.
  void finish();

  ~interrupt_guard();

private:
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// Follows `h` in the foreground (`run`, `resume` on the local home) as
/// `foreground_view` shows it (the live tree, Ctrl-C through `guard`, which
/// it watches and finishes, as stops of `h`; events after seq `after` only),
/// then prints the end and @returns the exit code. In cli_follow.cpp.
int follow(const global_options& g, runtime& rt, const execution_handle& h,
           interrupt_guard& guard, bool as_json, uint64_t after = 0);

// -- the local home and a server ----------------------------------------------------

/// The local home: `--home`, else `$CANOPY_HOME`, else `./.canopy`.
std::string home_of(const global_options& g);

/// Opens the runtime on the local home with the global options.
caf::expected<std::unique_ptr<runtime>> open_runtime(const global_options& g);

/// The same with the tools and providers of `run --config` (null: none).
caf::expected<std::unique_ptr<runtime>> open_runtime(const global_options& g,
                                                     const node_config* cfg);

/// Reads `run|resume --config FILE`. @returns the config, or nullopt after
/// printing each error with its JSON path (the command exits 2).
std::optional<node_config> read_run_config(const std::string& file);

/// What a command does with the local store.
enum class store_use {
  read,  ///< reads only: recovery is best effort
  write, ///< writes: a store busy for over 5 s fails it (exit 5)
};

/// Opens the local store and runs recovery. For `store_use::read` a home
/// without a store is `not_found` naming the folder, and nothing is created.
/// @returns the store, or an error of `store::open` or `recover`.
caf::expected<std::shared_ptr<store>> open_store(const global_options& g, store_use use);

/// Opens the local store for a listing (`ls`, `agent ls`). A home where
/// nothing ran lists nothing and is not created: its folder is named on
/// stderr unless `as_json` (stdout holds the bare `[]` then).
/// @returns the store, nullptr for such a home, or an error of `open_store`.
caf::expected<std::shared_ptr<store>> open_listing(const global_options& g, bool as_json);

/// Recovery for a reading command that follows a store (`events --follow`,
/// `logs --follow`): turns executions of dead owners into stopped ones; a
/// busy store is no error (it warns once and reads on).
caf::error recover_reading(store& db);

/// What `follow_store` hands its caller after each read: the execution as
/// read first, then the events of its tree after the last read.
/// @returns true when the caller has seen enough (stop following).
using store_read_handler =
  std::function<bool(const execution_record& now, const std::vector<event_record>& events)>;

/// Reads execution `id` and the events of tree `root_id` from the local
/// store, once, or with `follow` until `id` is terminal or `on_read` says
/// enough (`events --follow`, `logs --follow`). Another process writes the
/// store: it is polled, quickly while events arrive, backing off while
/// quiet, and an owner that died is recovered now and then. The status is
/// read before the events, so the read after `id` turned terminal holds
/// every event up to its terminal commit.
/// @returns none, or the first error of a read or a recovery.
caf::error follow_store(store& db, const std::string& id, const std::string& root_id,
                        bool follow, const store_read_handler& on_read);

/// A client for `r`, or a usage error (bad URL, no token).
caf::expected<api_client> open_client(const remote_options& r);

// -- output shared by local and server commands ---------------------------------------

/// Prints an execution document (`show`): JSON or the rendered tree.
int print_document(const caf::expected<json>& doc, bool as_json);

/// Prints node documents: the JSON array, or the table.
void print_nodes(const json& docs, bool as_json);

// -- commands against a server (cli_remote.cpp) ---------------------------------------

/// `canopy stop ID --server URL`: the server stops and waits; the output and
/// exit code are the local stop's (runtime/docs/reference/cli.md#canopy-stop).
int remote_stop(const remote_options& r, const std::string& id, bool force, double wait_s);

/// `canopy ls --nodes --server URL`: the server's cluster nodes.
int remote_ls_nodes(const remote_options& r, bool as_json);

/// `canopy show ID --server URL`.
int remote_show(const remote_options& r, const std::string& id, bool as_json);

/// What `canopy ls` lists, checked (cli_ls.cpp).
struct ls_query {
  std::string status;       ///< empty: any
  std::string graph;        ///< empty: any
  std::string since;        ///< `--since` as given; empty: any age
  int64_t created_after = 0; ///< `since` as a time (ms); 0: any
  size_t limit = 0;         ///< 0: all
  bool all = false;         ///< children too
  bool json = false;        ///< `-o json` / `--json`
};

/// `canopy ls --server URL`: the server's executions matching `q`.
int remote_ls(const remote_options& r, const ls_query& q);

/// `canopy events ID [--follow] --server URL`: the events of `id`'s tree;
/// with `follow_live`, streamed until the tree stops running.
int remote_events(const remote_options& r, const std::string& id, bool follow_live,
                  bool as_json);

// -- runs on a server (cli_remote_run.cpp) ------------------------------------------------

/// `canopy run FILE --server URL`: `g` (parsed from `file` and checked
/// against `inputs` as a local run does) is registered on the server as one
/// document (the files it includes put inline), started with `inputs`, and
/// followed as a local run: the live tree from the server's event stream,
/// Ctrl-C stops the execution on the server (a second forces), the same
/// final output and exit codes. `detach`: prints the id and returns.
int remote_run(const global_options& g, const remote_options& r, const std::string& file,
               const graph& parsed, json inputs, bool as_json, bool detach,
               json signals = json::object());

/// `canopy resume ID --server URL [--budget X]`: resumes on the server and
/// follows as `remote_run` does, printing the events after the resume only.
int remote_resume(const global_options& g, const remote_options& r, const std::string& id,
                  bool as_json, std::optional<double> budget);

/// `canopy graph push FILE --server URL`: registers `parsed` (from `file`)
/// as `remote_run` does and prints its id (`{"id", "version"}` with `as_json`).
int remote_graph_push(const remote_options& r, const std::string& file, const graph& parsed,
                      bool as_json);

/// `canopy graph ls --server URL`: the token's user's graphs, the newest
/// version of each (the JSON array of the server's items with `as_json`).
int remote_graph_ls(const remote_options& r, bool as_json);

// -- ls (cli_ls.cpp) ---------------------------------------------------------------------

/// Arguments of `canopy ls`, as parsed.
struct ls_options {
  CLI::App* cmd = nullptr;
  std::string status;
  std::string graph;
  std::string limit;  ///< checked by run_ls: a whole number from 1
  std::string since;  ///< checked by run_ls: an age such as 10m, 2h, 1d
  std::string output; ///< `-o json|table`; empty: table unless --json
  bool all = false;
  bool json = false;
  bool nodes = false;
};

/// Adds `canopy ls [--status S] [--graph NAME] [--since AGE] [--limit N]
/// [--all] [-o json|table] [--json] [--nodes]`; `add_remote` adds `--server`.
void add_ls_command(CLI::App& app, ls_options& o,
                    const std::function<void(CLI::App*)>& add_remote);

/// Checks the arguments and lists the local home's executions (or nodes),
/// or a server's with `r.server`. @returns the exit code.
int run_ls(const global_options& g, const remote_options& r, const ls_options& o);

// -- logs (cli_logs.cpp) -------------------------------------------------------------------

/// Arguments of `canopy logs ID [STEP] [--follow] [--tail N] [--stderr|--stdout]`.
struct logs_options {
  CLI::App* cmd = nullptr;
  std::string id;
  std::string step;               ///< empty: every step of the tree; `a/b`: b of a's child
  bool follow = false;
  std::optional<size_t> tail;     ///< the last N lines (then follow)
  std::string stream;             ///< "stdout", "stderr" or empty (both)
};

/// Adds `canopy logs`; `add_remote` adds `--server` and its options.
void add_logs_command(CLI::App& app, logs_options& o,
                      const std::function<void(CLI::App*)>& add_remote);

/// `canopy logs` on the local home. @returns the exit code.
int cmd_logs(const global_options& g, const logs_options& o);

/// `canopy logs --server URL`: the same from a server's event log and its
/// live stream. @returns the exit code.
int remote_logs(const remote_options& r, const logs_options& o);

// -- agents (cli_agents.cpp) ----------------------------------------------------------

/// Arguments of `canopy agent ...`.
struct agent_options {
  std::string name;
  std::string graph_file;                 ///< create
  std::string on_busy;                    ///< create; empty: not given
  std::string node;                       ///< create; empty: any node
  std::string text;                       ///< send
  std::string config;                     ///< send: `--config FILE`, its tools and providers
  std::optional<double> wait_s;           ///< cancel; nullopt: not given
  bool json = false;
};

/// The `canopy agent` subcommands and the options they parse into. Not
/// movable once wired: CLI11 holds references to `options`.
struct agent_commands {
  agent_options options;
  CLI::App* create = nullptr;
  CLI::App* send = nullptr;
  CLI::App* cancel = nullptr;
  CLI::App* history = nullptr;
  CLI::App* ls = nullptr;
};

/// Adds `canopy agent create|send|cancel|history|ls` to `app`, wiring them
/// into `cmds`; `add_remote` adds `--server` and `--token` to a subcommand.
void add_agent_commands(CLI::App& app, agent_commands& cmds,
                        const std::function<void(CLI::App*)>& add_remote);

/// Runs the agent subcommand that was parsed, on the local home or, when
/// `r.server` is set, on a server.
/// @returns its exit code, or nullopt when no agent subcommand was parsed.
std::optional<int> run_agent_command(const agent_commands& cmds, const global_options& g,
                                     const remote_options& r);

// -- signals and waits (cli_signals.cpp) -------------------------------------------------

/// The options of `canopy signal`, `approve`, `reject` and `waits`.
struct signal_commands {
  CLI::App* signal = nullptr;
  CLI::App* approve = nullptr;
  CLI::App* reject = nullptr;
  CLI::App* waits = nullptr;
  std::string id;
  std::string name;
  std::string value;   ///< `--value JSON`
  std::string fail;    ///< `--fail MESSAGE`
  std::string step;    ///< `--step PATH`
  std::string key;     ///< `--key K` (Idempotency-Key)
  std::string message; ///< approve/reject `--message M`
  double wait_s = 5;   ///< how long to wait for a wait to take it
  bool json = false;
};

/// Adds `canopy signal|approve|reject|waits` to `app`; `add_remote` adds
/// `--server` and `--token` to each.
void add_signal_commands(CLI::App& app, signal_commands& cmds,
                         const std::function<void(CLI::App*)>& add_remote);

/// Runs the signal subcommand that was parsed, on the local home or, when
/// `r.server` is set, on a server.
/// @returns its exit code, or nullopt when none was parsed.
std::optional<int> run_signal_command(const signal_commands& cmds, const global_options& g,
                                      const remote_options& r);

// -- prune (cli_prune.cpp) -------------------------------------------------------------

struct prune_options {
  CLI::App* cmd = nullptr;
  std::string older_than;
  std::string config; ///< `--config FILE`: its `retention` rules instead of --older-than
  std::string status;
  bool dry_run = false;
  bool json = false;
};

/// Adds `canopy prune (--older-than D [--status S] | --config FILE) [--dry-run] [--json]`.
void add_prune_command(CLI::App& app, prune_options& o);

/// Deletes the local home's settled trees past the age.
/// @returns the exit code.
int cmd_prune(const global_options& g, const prune_options& o);

// -- run, resume, stop on the local home (cli_run.cpp) ------------------------------

/// Arguments of `canopy run`, as parsed.
struct run_options {
  std::string file;
  std::string config; ///< `--config FILE`: its tools and providers; empty: none
  std::vector<std::string> inputs;
  std::vector<std::string> signals; ///< `--signal NAME=JSON`, for its waits
  bool json = false;
  bool detach = false;
  int detached_fd = -1; ///< internal: the detached child reports its id here
};

/// `canopy run FILE`: checks the graph and inputs, then runs it in the
/// foreground, detached (`--detach`), or on a server (`--server`).
/// @returns the exit code.
int cmd_run(const global_options& g, const run_options& o, const remote_options& remote,
            const char* self_exe);

/// `canopy resume ID`: on the local home, followed in the foreground, or on
/// a server. @returns the exit code.
int cmd_resume(const global_options& g, const remote_options& remote, const std::string& id,
               bool as_json, std::optional<double> budget, const std::string& config = {});

/// `canopy stop ID` on the local home. @returns the exit code.
int cmd_stop(const global_options& g, const std::string& id, bool force, double wait_s);

// -- show, events on the local home (cli_inspect.cpp) ---------------------------------

/// `canopy show ID` on the local home. @returns the exit code.
int cmd_show(const global_options& g, const std::string& id, bool as_json);

/// `canopy events ID [--follow]` on the local home. @returns the exit code.
int cmd_events(const global_options& g, const std::string& id, bool follow_live,
               bool as_json);

// -- serve (cli_serve.cpp) -------------------------------------------------------------

/// Flags of `canopy serve`; each overrides the config file.
struct serve_flags {
  std::string config;  ///< empty: no file, runtime/docs/reference/config.md#node-config defaults
  std::string listen;  ///< empty: the file's (default 127.0.0.1:8080)
  std::string cluster; ///< empty: the file's (default: no cluster port)
  bool resume_interrupted = false;
};

/// `canopy serve`: runs the server until SIGTERM/SIGINT. @returns the exit code.
int cmd_serve(const global_options& g, bool max_parallel_given, const serve_flags& f);

// -- graph push, validate (cli_graph.cpp) ----------------------------------------------

/// `canopy graph push FILE --server URL`. @returns the exit code.
int cmd_graph_push(const std::string& file, const remote_options& remote, bool as_json);

/// `canopy validate FILE [--config FILE | --server URL]`. @returns the exit code.
int cmd_validate(const std::string& file, const std::string& config,
                 const remote_options& remote);

/// What `run` and `validate` check tool names against: `cfg`'s tools for a
/// local check (with a hint naming `--config` for a name it lacks); any
/// name for a server, which checks them against its own and its workers'.
parse_options local_or_server_tools(const node_config* cfg, const remote_options& remote);

} // namespace canopy::core::cli
