#pragma once

// The execution actor: one per live execution, a thin shell around its
// `execution_machine` (actors/execution/machine.hpp), which decides
// everything. The shell turns messages into machine inputs and carries out
// the machine's effects: it starts step runners, pooled functions and child
// execution actors, monitors what it starts, sends exits, takes slots, asks
// agents for turns, schedules timers and writes through the store writer.
//
// Durability: a step's `completed` record is committed before any step that
// needs it starts; the final status is committed before the actor quits.
//
// Handles:
//   exit from above (actors_errc::stop / stop_force, or any error from the
//     parent): the halt sequence: start nothing new, forward the stop to every
//     runner and child, wait for their downs, commit one snapshot (running and
//     queued steps back to `pending`, the execution `stopped` with its reason),
//     then quit.
//   (stop_atom, reason, force)  the same halt, for the target of a stop
//       request (or a limit); the store answers the request (`handled`) in
//       the transaction of the snapshot. Senders build it with
//       `make_stop_message` (actors/stop_protocol.hpp)
//   (request_atom, stop_record, write_batch) -> bool   an in-process stop request
//       (actors/stop_protocol.hpp): commits the request after every record
//       this execution wrote before, answers once committed, then halts like
//       (stop_atom ...); when already finished, the store answers it
//       `no_execution`
//   (deadline_atom)                      the graph's deadline passed
//   (abandon_atom, step, attempt)        a stopped function ignored its stop
//       token for the step's grace periods: the halt goes on without it
//
// Stop of a subtree: the execution a stop reaches writes `stopping`, sets its
// halt token (no descendant starts a step from then on) and forwards the stop
// as exit signals. A descendant stopped from above writes nothing: it resets
// its active steps in memory, hands its parent the records it had not yet
// written and a count of the events its snapshot stands for (one
// `step.pending` per active step, one `execution.stopped`), and quits. The
// execution the stop reached commits its own records and one `subtree_stop`
// carrying the subtree's count, with the stop request `handled`, in one
// transaction; the store resolves it for every reader (persistence/store.hpp).
// Every execution and runner quits normally; how it ended is in the store
// and in the (child_atom ...) report, never in the exit reason. Except: an
// execution stopped compactly with nothing to hand up quits with
// `make_compact_stop(events)` (actors/error.hpp) instead of reporting, and
// its parent reads the count from the down message.
//   (done_atom, step, attempt, step_outcome)   a runner or fn attempt finished
//   (started_atom, step, attempt, pid)         a runner's process started
//   (output_atom, step, attempt, lines)        output lines to log as events
//   (signalled_atom, step, attempt, signal, next, next_in_ms)
//                                              a runner's escalation signalled its
//                                              group: a `step.signalled` event
//   (grant_atom, ticket)                       a subprocess slot is free
//   (wake_atom, step, attempt)                 a `sleep` finished
//   (timeout_atom, step, attempt)              an in-process attempt timed out
//   (retry_atom, step, attempt)                the retry delay passed
//   (child_atom, step, execution_status, outputs, error, snapshot, stopped_events,
//    steps)                                    a child execution finished (`steps`:
//                                              a completed iteration's results)
//   (lost_atom, node)                          a cluster member holding its
//                                              attempts was lost
//   (armed_atom, step, attempt)                no buffered signal for a wait
//   (offer_atom, step, attempt, signal) -> bool  a signal for a wait: true once
//                                              the write that takes it is committed
//   (due_atom, step, attempt)                  a wait's deadline passed
// The typed interface below (`execution_actor`) lists the same messages.
//
// An `agent` step asks the agent's actor for a turn (the step is `queued`
// meanwhile), then runs the agent's graph as its child execution, with
// inputs `{message, history}`; its result is `{"reply": ...}`. An execution
// with `agent` set (an agent's run) appends the message and its reply to the
// agent's history in its final commit, with an `agent.reply` event.
// Sends its parent execution (child_atom, ...) before quitting.
//
// Steps reset by a stop record the execution's stop reason; its children stop
// with `parent_stopped`.
// A failed step (retries exhausted) halts its execution: running siblings go
// back to `pending` with reason `sibling_failed` (their child executions stop
// with that reason) and the execution ends `failed`/`step_failed`.

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/agent_actor.hpp"
#include "actors/cluster.hpp"
#include "actors/execution/machine.hpp"
#include "actors/fn_registry.hpp"
#include "actors/graveyard.hpp"
#include "actors/messages.hpp"
#include "actors/start_gate.hpp"
#include "actors/store_writer.hpp"
#include "actors/tree_context.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"
#include "persistence/tools.hpp"

namespace canopy::core {

/// The messages an execution actor's shared handlers take (execution_actor.cpp):
/// every message listed at the top of this header but the two that are
/// answered later. Runners on a cluster worker send `output` and `done` in
/// wire form (JSON text), over the middleman: those forms are here too.
/// `start`, `gate` and `pump` are its own (it sends them to itself, or the
/// start gate does); they are here only because its handlers take them.
using execution_handlers = caf::typed_actor<
  caf::reacts_to<start_atom>, caf::reacts_to<gate_atom>, caf::reacts_to<pump_atom>,
  caf::reacts_to<stop_atom, std::string, bool>, caf::reacts_to<deadline_atom>,
  caf::reacts_to<abandon_atom, uint64_t, int>,
  caf::reacts_to<done_atom, uint64_t, int, step_outcome>,
  caf::reacts_to<started_atom, uint64_t, int, int64_t, uint64_t>,
  caf::reacts_to<signalled_atom, uint64_t, int, int, int, int64_t>,
  caf::reacts_to<output_atom, uint64_t, int, nlohmann::json>,
  caf::reacts_to<output_atom, uint64_t, int, std::string>,
  caf::reacts_to<done_atom, uint64_t, int, std::string, std::string>,
  caf::reacts_to<lost_atom, std::string>, caf::reacts_to<grant_atom, uint64_t>,
  caf::reacts_to<wake_atom, uint64_t, int, int64_t>, caf::reacts_to<timeout_atom, uint64_t, int>,
  caf::reacts_to<retry_atom, uint64_t, int>, caf::reacts_to<armed_atom, uint64_t, int>,
  caf::reacts_to<due_atom, uint64_t, int>,
  caf::reacts_to<child_atom, std::string, execution_status, nlohmann::json, std::string,
                 write_batch, uint64_t, nlohmann::json>>;

/// The execution actor's interface: its handlers' messages, and those
/// answered once a write is committed: an in-process stop request (from an
/// actor, or from a thread with its ticket), and a signal offered to a wait
/// (actors/signal_desk.hpp), answered false at once when the wait does not
/// take it.
using execution_actor = execution_handlers::extend<
  caf::replies_to<request_atom, stop_record, write_batch>::with<bool>,
  caf::reacts_to<request_atom, stop_record, write_batch, commit_ticket>,
  caf::replies_to<offer_atom, uint64_t, int, signal_record>::with<bool>>;

/// Services every execution actor of a process shares.
struct execution_services {
  std::shared_ptr<store> db;
  store_writer_actor writer; ///< the store writer
  caf::actor slots;    ///< the subprocess slot pool
  caf::actor timer;    ///< the timer service (delays that do not pin the actor)
  caf::actor admission; ///< slots for running roots (null: unlimited); roots wait `queued`
  std::shared_ptr<fn_registry> fns;
  std::shared_ptr<fn_pool> pool;
  std::shared_ptr<execution_directory> directory;
  /// Where ended executions leave their machines, destroyed later by the
  /// memory keeper (null: at once). See actors/graveyard.hpp.
  std::shared_ptr<graveyard<execution_machine>> graves;
  /// Bounds the starts whose first write is not yet committed (null: every
  /// execution starts at once). See actors/start_gate.hpp.
  std::shared_ptr<start_gate> gate;
  /// Tools `tool` and `plan` steps may name (never null once the runtime runs).
  std::shared_ptr<const tool_table> tools;
  /// The model providers `llm` steps may name (null: none).
  std::shared_ptr<const std::map<std::string, chat_provider>> providers;
  /// A slot pool per tool with its own `max_parallel`; a tool step takes a
  /// slot here first, then one from `slots`.
  std::map<std::string, caf::actor> tool_slots;
  /// A slot pool per model provider with a `max_parallel`; an `llm` step
  /// takes a slot here and none of `slots` (a model call is no subprocess).
  std::map<std::string, caf::actor> provider_slots;
  /// Parse options for graphs created at run time (planned graphs and
  /// registered graphs named by `graph` steps): the node's inline-command
  /// rule and file loader. `fns`, `tools`, `depth` and `max_depth` are set
  /// per child.
  parse_options child_options;
  /// Finds graph `name` registered by `owner` (the HTTP API's registry) and
  /// parses it with `opts`. Null: no registry on this node.
  std::function<parse_result(const std::string& owner, const std::string& name,
                             const parse_options& opts)>
    find_graph;
  /// Finds the actor of agent `name` of `owner` (spawning it on first use).
  /// @returns the actor, or `not_found` when no such agent exists. Null: no
  /// agents on this node (`agent` steps fail).
  std::function<caf::expected<agent_actor>(const std::string& owner, const std::string& name)>
    find_agent;
  /// Remembers a root started by an actor (an agent's run), so that the
  /// node's shutdown stops it. May be null.
  std::function<void(const caf::actor&)> track_root;
  /// The cluster actor (runtime/docs/reference/config.md#cluster); null without a cluster. With one, `run`
  /// and `tool` attempts are placed through it, on this node or a worker.
  caf::actor cluster;
  /// The tools the cluster's members announce (null without a cluster).
  std::shared_ptr<member_tools> cluster_tools;
  /// The signal desk (actors/signal_desk.hpp): matches signals with the
  /// waits armed here. Null: waits end only by their deadline or a stop.
  caf::actor desk;
  /// How long a worker may take to start a step placed on it (the cluster's
  /// timeout): past it the attempt counts as lost (`node_lost`) and is
  /// placed again.
  millis cluster_timeout{5000};
  /// This node's name in step records (`local` without a cluster).
  std::string node_name = "local";
  int64_t owner_pid = 0;
  uint64_t owner_start = 0;
  /// What every execution machine of this process knows of the node (built
  /// from the fields above by `make_machine_env` once they are set; null:
  /// each execution builds its own).
  std::shared_ptr<const machine_env> machine;
};

/// The machines' view of `svc` (node name, tools, pools, functions, stop
/// requests). Threading: any thread.
std::shared_ptr<const machine_env> make_machine_env(const execution_services& svc);

/// What an execution actor starts from: its record (already committed as
/// `queued`, or an existing record on resume), its graph, and the step records
/// already stored (empty for a new execution).
struct execution_init {
  execution_record record;
  std::shared_ptr<const canopy::core::graph> graph;
  std::vector<step_record> steps;
  /// This execution's halt token (chained to its parent's), created and
  /// registered in the directory by the spawner before the actor runs.
  std::shared_ptr<halt_token> token;
  /// The parent's limit scope (null for a root).
  std::shared_ptr<limit_scope> parent_scope;
  /// A root resumed with `--budget`: the raised budget.
  std::optional<double> budget;
  /// Take its tree over with its first write (a resume: the tree's lease
  /// epoch as read before, compared at commit). A start takes it over with
  /// its `queued` batch instead (`make_queued_batch`).
  bool acquire_lease = false;
  uint64_t lease_epoch = 0;
  /// Where it sits in its tree, as the step ids that lead to it joined by
  /// `/` and ending in `/` (`review/` for the child of root step `review`;
  /// empty for a root): a wait's step path is this plus its step id.
  std::string path;
};

/// Spawns a root execution actor and registers it in the directory (with a
/// new halt token when `init.token` is null). Threading: any thread.
execution_actor spawn_execution(caf::actor_system& sys, execution_init init,
                                std::shared_ptr<const execution_services> services);

/// Builds the write batch that creates an execution record `queued`, with its
/// graph and `execution.queued` event. Used for roots and children alike; a
/// root's batch takes its new tree's lease (the process that commits it owns
/// the tree).
write_batch make_queued_batch(const execution_record& rec, const graph& g);

/// Returns the graph document an execution stores (document, folder, files).
stored_graph to_stored(const graph& g);

/// Parse options for graphs created at run time (planned, registered, agent
/// graphs) at `depth` under a scope allowing `max_depth`: the node's rules
/// (`svc.child_options`) with its functions and tools.
parse_options run_time_parse_options(const execution_services& svc, int depth, int max_depth);

} // namespace canopy::core
