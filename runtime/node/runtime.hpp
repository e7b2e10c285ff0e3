#pragma once

// The runtime inside the library, the CLI and the server: a home, `fn`
// steps, executions and handles to them, in CAF's terms. Not a public
// header: programs use <canopy/canopy.hpp> (runtime/lib/), a facade over
// this class without CAF.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>
#include <string>

#include <caf/actor.hpp>
#include <caf/expected.hpp>

#include "actors/agent_actor.hpp"
#include "actors/cluster.hpp"
#include "actors/fn_registry.hpp"
#include "actors/stop_protocol.hpp"
#include "actors/store_writer.hpp"
#include "actors/process/subprocess.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/retention.hpp"
#include "persistence/signal_rules.hpp"
#include "persistence/store.hpp"
#include "persistence/tools.hpp"
#include "actors/llm/chat_client.hpp"

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace canopy::core {

/// Where and how a supervisor accepts workers.
struct cluster_listen {
  std::string host = "127.0.0.1";
  uint16_t port = 0;          ///< 0: any free port (see `runtime::cluster_port`)
  std::string secret;         ///< workers must present it
  /// Publish over TLS with these files (checked by `open`), workers
  /// authenticated by certificate; unset: plain TCP.
  std::optional<tls_files> tls;
  millis heartbeat{1000};
  millis timeout{5000};
  std::string name = "supervisor"; ///< the supervisor's node name
  /// Log lines about members: (event, node, detail).
  std::function<void(const std::string&, const std::string&, const std::string&)> log;
};

/// Options of `runtime::open`.
struct runtime_options {
  /// The store folder: `--home`, else `$CANOPY_HOME`, else `./.canopy`
  /// (see `default_home`).
  std::string home;
  /// Subprocesses running at once in this process (default 4). At least 1:
  /// `open` answers `invalid_input` for 0.
  size_t max_parallel = 4;
  /// Root executions running at once (0: unlimited); the others wait `queued`
  /// in start order.
  size_t max_running = 0;
  /// Executions whose start (first write) is not yet committed, at once: the
  /// others wait, spawned, until one is (flow control toward the store
  /// writer, actors/start_gate.hpp). At least 1: `open` answers
  /// `invalid_input` for 0.
  /// The default keeps the writer's group commits full (a start batch holds
  /// a few records per child) and the batches waiting a few MiB at most:
  /// more permits leave more in the allocator's free lists at the same start
  /// speed, fewer slow the start of a large tree
  /// (measured: runtime/docs/benchmarks.md#design-measurements).
  size_t start_permits = 256;
  /// Threads for registered `fn` functions.
  size_t fn_threads = 4;
  /// CAF scheduler threads (0: CAF's default).
  size_t scheduler_threads = 0;
  /// Tools that `tool` and `plan` steps may name (runtime/docs/reference/config.md#node-config).
  tool_table tools;
  /// Model providers that `llm` steps may name (the node config's `providers`).
  std::map<std::string, chat_provider> providers;
  /// False on a server that refuses `run` steps and argv `plan` steps.
  bool allow_inline_commands = true;
  /// False on a server: graphs may not load files from the node's disk
  /// (`graph` steps name registered graphs or hold inline ones).
  bool allow_graph_files = true;
  /// Called with the duration in seconds of every store commit (metrics).
  std::function<void(double)> on_commit;
  /// Called with the root id of every write refused because another
  /// process took its tree over (store.hpp, "Leases and fencing"), on the
  /// store writer's thread: metrics and logs. The tree's actors end their
  /// steps and write nothing more of it.
  std::function<void(const std::string& root)> on_fenced;
  /// The cluster port (runtime/docs/reference/config.md#cluster); unset: no cluster. `open` loads CAF's
  /// middleman (heartbeat and connection timeout set; with `tls`, CAF's
  /// openssl module) and publishes the cluster actor there.
  std::optional<cluster_listen> cluster;
  /// Process-wide effects of `open`: ignore SIGPIPE (a step that closes its
  /// stdin must not end the process), raise the soft open-files limit to
  /// the hard one, and glibc's mmap threshold so large freed buffers go
  /// back to the kernel (runtime/node/memory.hpp).
  bool ignore_sigpipe = true;
  bool raise_open_files_limit = true;
  bool tune_malloc = true;
};

/// Options of `runtime::start`.
struct start_options {
  /// The owning user (HTTP API); children inherit it.
  std::string owner;
  /// The registered graph version it runs (0: none).
  int graph_version = 0;
  /// Signals for its waits, `{"NAME": VALUE}`, stored with its first record
  /// (buffered until a wait arms); checked by `check_start_signals`.
  json signals = json::object();
  /// Who sends them ("user:alice", "cli:pid 42").
  std::string signals_from = "library";
};

/// `$CANOPY_HOME`, else `./.canopy`.
std::string default_home();

class subscription;

/// Subscribes `f` to the committed events of the tree `root_id` (all events
/// when empty): first the events already committed (replayed from `db`),
/// then live ones; each once, in seq order, called on an actor thread.
subscription make_subscription(caf::actor_system& sys, const store_writer_actor& writer,
                               std::shared_ptr<store> db,
                               std::function<void(const event_record&)> f, std::string root_id);

/// An event subscription; unsubscribes when destroyed.
class subscription {
public:
  subscription() = default;
  subscription(subscription&&) noexcept = default;
  subscription& operator=(subscription&&) noexcept = default;
  ~subscription();
  /// Delivers every event committed before this call, then stops the
  /// callbacks; blocks until no callback runs. After `handle.wait()`,
  /// `cancel()` guarantees the execution's final events were delivered.
  void cancel();

  /// Returns once every event committed before this call was handed to the
  /// callback (the subscription goes on). Threading: any non-actor thread
  /// but the callback's.
  void drain() const;

private:
  friend subscription make_subscription(caf::actor_system&, const store_writer_actor&,
                                        std::shared_ptr<store>,
                                        std::function<void(const event_record&)>, std::string);
  store_writer_actor writer_;
  caf::actor subscriber_;
};

class runtime;
struct execution_services;

/// What became of a signal (`runtime::signal`).
struct signal_answer {
  signal_decision decision;
  /// A wait took it (now, or before: a replay of a consumed one).
  bool consumed = false;
  std::string consumed_execution; ///< the execution of the wait that took it
  std::string consumed_step;      ///< that wait's step id
};

/// A handle to a started execution. Cheap to copy; keeps the execution's actor
/// alive while it runs.
class execution_handle {
public:
  /// The execution id.
  const std::string& id() const { return id_; }

  /// Blocks until the execution's actor is gone (completed, failed or
  /// stopped), then @returns the stored record, or the error that ended the
  /// actor before it could record its end (a failed commit: `store_busy`,
  /// `store_error`; the record then stays `running` until recovery, once
  /// this process is gone, makes it `stopped`/`interrupted`).
  caf::expected<execution_record> wait() const;

  /// Like `wait`, but gives up after `timeout`: @returns false then.
  bool wait_for(millis timeout) const;

  /// @returns the stored record (any thread, any time).
  caf::expected<execution_record> status() const;

  /// True while the execution's actor runs.
  bool running() const;

  /// Calls `f` (on an actor thread) with every committed event of this
  /// execution's tree, in seq order.
  subscription subscribe(std::function<void(const event_record&)> f) const;

  /// Requests a stop (runtime/docs/reference/statuses.md#stop; `force`: no grace periods): stored in the
  /// stop registry first, then delivered. Returns once the request is
  /// stored; `wait` (or `runtime::await_stop`) for the snapshot.
  /// @returns the ticket (`no_execution` when nothing runs), or a store error.
  caf::expected<stop_ticket> stop(stop_mode mode = stop_mode::graceful) const;

  /// What `signal` sends besides its value.
  struct signal_options {
    std::string step;    ///< only the wait at this step path (`review/approve`)
    std::string key;     ///< idempotency key: the same key and value send once
    bool failure = false; ///< fail the wait (reason `rejected`) with `message`
    std::string message;
    millis wait{5'000};  ///< how long to wait for a wait here to take it
  };

  /// Sends `value` as signal `name` to this execution's waits
  /// (`runtime::signal`, as the home's own user).
  /// @returns the answer: the decision (`store`, `replay` or why not) and
  ///          whether a wait took it; a store error.
  caf::expected<signal_answer> signal(const std::string& name, json value,
                                      const signal_options& opts) const;
  caf::expected<signal_answer> signal(const std::string& name, json value) const {
    return signal(name, std::move(value), signal_options{});
  }

private:
  friend class runtime;
  runtime* rt_ = nullptr;
  std::string id_;
  std::string root_id_;
  caf::actor actor_;
};

/// Threading: every member may be called from any thread. Observed with CAF
/// 0.17: a thread that called into the runtime and is still alive, blocked
/// (e.g. in sigwait), when the runtime is destroyed can keep the destructor
/// waiting; make such calls from threads that end before (the CLI does).
class runtime {
public:
  ~runtime();

  /// Opens the store in `opts.home`, turns executions left running by a dead
  /// process into `stopped`/`interrupted`, and starts the actor system.
  /// @returns the runtime, or the store's error (`io_error`, `store_error`).
  /// Threading: any thread; one runtime per home and process.
  static caf::expected<std::unique_ptr<runtime>> open(runtime_options opts);

  /// Registers a `fn` step function. @returns false when the name is taken.
  /// Register before starting executions that use it.
  bool register_fn(const std::string& name, fn_function f);

  /// Parse options matching this runtime (its registered functions).
  parse_options graph_options() const;

  /// Parses and validates a graph file against this runtime.
  parse_result parse_file(const std::string& path) const;

  /// Starts an execution of `g` with `inputs` (object). The `queued` record is
  /// committed before this returns.
  /// @returns the handle, `runtime_errc::invalid_input` naming a missing or
  ///          undeclared input, or a store error.
  caf::expected<execution_handle> start(std::shared_ptr<const graph> g, json inputs,
                                        const start_options& opts = {});

  /// Parses and validates a graph document against this runtime (its
  /// functions, tools and inline-command rule); relative paths are relative
  /// to the home folder. Thread-safe.
  parse_result parse_document(const json& doc) const;

  /// Registers `doc` (already validated) as the next version of graph
  /// `name` of `owner`; committed before this returns. A new name is refused
  /// when `owner` has `max_graphs` names already (0: no limit).
  /// @returns the stored version, a store error, or `quota_exceeded`.
  caf::expected<registered_graph> register_graph(const std::string& owner,
                                                 const std::string& name, json doc,
                                                 size_t max_graphs = 0);

  /// Blocks until execution `id` is neither queued, running nor stopping, or
  /// `timeout` passed. @returns true when it settled.
  bool wait_settled(const std::string& id, millis timeout);

  /// The port the cluster actor is published on (0: no cluster).
  uint16_t cluster_port() const { return cluster_port_; }

  /// The members of the cluster, the supervisor first; without a cluster,
  /// this node alone (named `local`).
  std::vector<node_info> nodes();

  /// Number of execution actors alive in this process.
  size_t live_executions() const;

  /// The steps of this node's executions that wait for a signal now (armed
  /// at its signal desk). Threading: any thread.
  size_t waiting_steps() const;

  /// Ids that `open` turned into `stopped`/`interrupted` (dead owners).
  const std::vector<std::string>& recovered() const { return recovered_; }

  /// A handle to stored execution `id`, holding its actor when it lives in
  /// this process. @returns `not_found`, or a store error.
  caf::expected<execution_handle> attach(const std::string& id);

  /// Resumes a stopped, failed or interrupted execution from its snapshot.
  /// @returns the handle; `not_found`; `wrong_state` for a running execution.
  caf::expected<execution_handle> resume(const std::string& id,
                                         std::optional<double> budget = std::nullopt);

  /// Deletes root execution `id` with its whole tree (records, steps,
  /// graphs, events, counters) in one transaction, once it is settled
  ///. @returns none; `not_found`; `wrong_state` when `id` is not
  /// a root or its tree is live (then nothing is deleted: the store checks
  /// the tree in the deleting transaction). Threading: any thread;
  /// blocks for one commit.
  caf::error delete_tree(const std::string& id);

  /// Deletes every settled root tree past its age by `rules`, as of `now`
  /// (ms since the epoch), through the store writer, at most 16 trees per
  /// transaction so that no commit holds the writer long
  /// (persistence/retention.hpp). @returns what went, or the first store
  /// error. Threading: any thread; blocks for the commits.
  caf::expected<prune_result> prune(const retention_rules& rules, int64_t now);

  // -- agents (runtime/docs/reference/graph-format.md#agent-graphs) --------------------------------------------------------

  /// Creates agent `name` of `owner` running `g` with policy `on_busy`, living
  /// on cluster node `node` (empty: its runs' subprocess steps go to any
  /// node), or replaces the graph, policy and node of the existing agent (its
  /// history is kept). Committed before this returns. Validate `g` with
  /// `check_agent_graph`, `name` with `check_agent_name` and `node` with
  /// `check_node_name` first.
  /// @returns the stored record and true when the agent is new, or a store
  ///          error. Threading: any thread.
  caf::expected<std::pair<agent_record, bool>> create_agent(const std::string& owner,
                                                            const std::string& name,
                                                            const graph& g,
                                                            busy_policy on_busy,
                                                            const std::string& node = {});

  /// Sends `message` to agent `name` of `owner` and blocks until the run it
  /// started ended, following the agent's `on_busy` policy.
  /// @returns how it ended (`status` `completed`, `failed`, `stopped`,
  ///          `busy` or `cancelled`), `not_found` for an unknown agent, or
  ///          `runtime_errc::shutting_down`. Threading: any thread.
  caf::expected<agent_reply> send_to_agent(const std::string& owner, const std::string& name,
                                           json message, const std::string& who = "library");

  /// Stops every live run of agent `name` of `owner` (each snapshotted like
  /// any stopped execution, with an `agent.cancelled` event) and waits up to
  /// `wait` for them to settle.
  /// @returns `cancelled`, or `no_execution` when no run was live;
  ///          `not_found` for an unknown agent; a store error.
  caf::expected<cancel_result> cancel_agent(const std::string& owner, const std::string& name,
                                          const std::string& who = "library",
                                          millis wait = millis{30'000});

  /// Requests a stop of execution `id` (runtime/docs/reference/statuses.md#stop, the stop protocol of
  /// `actors/stop_protocol.hpp`): the request is committed to the stop
  /// registry, then delivered to the live execution (in this process at
  /// once; another process's stop watcher finds it within 50 ms). Blocks
  /// for at most the store's write wait plus a few seconds.
  /// @returns the ticket: `no_execution` (nothing stored) when the execution
  ///          is not queued, running or stopping, else `stopping` (or
  ///          already `stopped`/`no_execution` when it settled at once);
  ///          `not_found`; a store error. Threading: any non-actor thread.
  caf::expected<stop_ticket> stop(const std::string& id, stop_mode mode = stop_mode::graceful,
                                  const std::string& who = "library");

  /// Sends a signal to the waits of execution `req.target`'s tree (the rule
  /// of persistence/signal_rules.hpp): a new one is committed with its
  /// `signal.received` event, then handed to this process's signal desk,
  /// which offers it to a wait armed for it here; a wait of a tree that
  /// another process owns finds it within `signal_poll_interval`. Decisions
  /// of this process are serialised. Blocks for at most the store's write
  /// wait plus `wait`.
  /// @returns the decision, with `consumed` set when a wait took the signal
  ///          (its write committed) within `wait`; a store error.
  ///          Threading: any non-actor thread.
  caf::expected<signal_answer> signal(signal_request req, millis wait = millis{5'000});

  /// Stops the executions of `orders` within one `wait` (`stop_all` of
  /// actors/stop_protocol.hpp). @returns one outcome per order, in order.
  /// Threading: any non-actor thread.
  std::vector<stop_outcome> stop_all(std::vector<stop_order> orders, stop_mode mode,
                                     const std::string& who, millis wait);

  /// Waits up to `wait` for a stop to settle. @returns `stopped` or
  /// `no_execution` once its target settled, else `stopping`.
  /// Threading: any non-actor thread.
  stop_result await_stop(const stop_ticket& ticket, millis wait);

  /// Calls `f` with every committed event of this process.
  subscription subscribe(std::function<void(const event_record&)> f);

  /// The store (reads from any thread).
  const std::shared_ptr<canopy::core::store>& db() const { return db_; }

  caf::actor_system& system();

private:
  runtime() = default;
  friend class execution_handle;

  /// Spawns the store writer, the pools, the timer, the memory keeper, the
  /// cluster actor (with a cluster), the signal desk and the stop watcher,
  /// and the services executions share. Part of `open`.
  void start_services();

  /// Sets the services' lookups into this runtime: registered graphs,
  /// agents' actors, live roots. Part of `start_services`.
  void add_lookups(execution_services& svc);

  /// Publishes the cluster actor on the configured port (TLS or plain).
  /// @returns `cluster_port` when the port cannot be opened. Part of `open`.
  caf::error publish_cluster();

  /// What the stop protocol needs of this runtime.
  stop_context stop_ctx() const;

  /// Remembers a live root so the destructor can stop it.
  void track(const caf::actor& root);

  /// The actor of agent `name` of `owner`, spawned on first use.
  /// @returns it, or `not_found` when the store has no such agent.
  caf::expected<agent_actor> agent_of(const std::string& owner, const std::string& name);

  runtime_options opts_;
  std::shared_ptr<canopy::core::store> db_;
  std::shared_ptr<fn_registry> fns_;
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::shared_ptr<const execution_services> svc_;
  store_writer_actor writer_;
  caf::actor slots_;
  caf::actor timer_;
  caf::actor keeper_; ///< hands free heap back to the kernel (runtime/node/memory.hpp)
  caf::actor watcher_;
  caf::actor desk_; ///< the signal desk (actors/signal_desk.hpp)
  /// How many waits are armed at the desk.
  std::shared_ptr<std::atomic<size_t>> armed_waits_ = std::make_shared<std::atomic<size_t>>(0);
  caf::actor admission_;
  caf::actor cluster_;
  uint16_t cluster_port_ = 0;
  std::mutex roots_mtx_;
  std::mutex signals_mtx_; ///< one signal decision and commit at a time
  std::vector<caf::actor> roots_;
  std::vector<std::string> recovered_;
  std::mutex register_mtx_;
  std::mutex agents_mtx_;
  std::map<std::pair<std::string, std::string>, agent_actor> agents_;
  bool closing_ = false; ///< guarded by agents_mtx_: no new agent actors
};

/// Checks `inputs` against the graph's declared inputs (runtime/docs/reference/graph-format.md#graph).
/// @returns `runtime_errc::invalid_input` naming the first missing or
///          undeclared input.
caf::error check_inputs(const graph& g, const json& inputs);

/// Turns every execution of `db` left `queued`, `running` or `stopping` by a
/// process that no longer exists into `stopped`/`interrupted` (its running
/// and queued steps back to `pending`, reason `interrupted`), and kills the
/// process groups those steps left behind (no orphans). A tree's owner is
/// its lease (store.hpp, "Leases and fencing"); a tree is taken over with a
/// compare-and-set on the epoch read, so a tree that its owner resumed or
/// wrote meanwhile is left as it is. Writes directly: call only where no
/// store writer of this process runs.
/// @returns the ids recovered, or a store error.
caf::expected<std::vector<std::string>> recover_interrupted(store& db);

/// True when interrupted root `root`'s tree held nothing but waits when its
/// owner died: every step recovery set back to `pending` (reason
/// `interrupted`) is a `wait` step. Such a tree runs nothing until a signal
/// or a deadline, so any node that starts on the home resumes it (a wait
/// takes no process, slot or cost), without `--resume-interrupted`.
/// Threading: any thread (reads only).
bool only_waits_interrupted(const store& db, const std::string& root);



} // namespace canopy::core
