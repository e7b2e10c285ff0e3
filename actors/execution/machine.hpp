#pragma once

// The execution machine: everything one execution decides, as a plain C++
// object. No CAF messaging, no actor handles, no threads, no clocks: inputs
// are method calls (time comes in as `now`, ms since the epoch), outputs are
// effects appended to a list the caller drains (`take_effects`). The actor
// shell (actors/execution/execution_actor.cpp) turns messages into inputs and
// effects into sends, spawns and store writes; tests drive it directly.
//
// Phases. The execution: created → (admitting) → running → halting →
// finishing → done, or running → finishing → done when every step completed.
// Each step: idle → (waiting_turn | waiting_slot | placing | running_*) →
// completed | failed, or idle → skipped once its needs are settled and its
// `after` or `when` says so (persistence/condition.hpp); back to idle
// (retry_wait) on a retried failure, back to
// idle through `reset_to_pending` when a stop, a failure elsewhere, a lost node
// or a stopped child ends its attempt.
//
// Durability: a step's `completed` (or `skipped`) record rides on a write;
// its dependents are decided only once the write is acknowledged
// (`write_acknowledged`). The final
// record is written before the machine reports to its parent and quits.
//
// Threading: one thread at a time (the actor's). The halt token and limit
// scope it holds are thread-safe and shared with other executions.

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "actors/execution/effects.hpp"
#include "actors/execution/outcomes.hpp"
#include "actors/halt_token.hpp"
#include "actors/limit_scope.hpp"
#include "actors/llm/chat_client.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/reference.hpp"
#include "persistence/store.hpp"
#include "persistence/tools.hpp"

namespace canopy::core {

class fn_registry;

// -- phases -------------------------------------------------------------------------

/// Where an execution is.
enum class exec_phase : uint8_t {
  created,   ///< not started yet (start, admission or a stop comes next)
  admitting, ///< a root waits for an admission slot (`queued`)
  running,   ///< steps start as they become ready
  halting,   ///< a stop or failure: nothing starts, waiting for workers to end
  finishing, ///< the final record is being written
  done,      ///< reported and quit: no input has any effect
};

/// Where one step's current attempt is.
enum class step_phase : uint8_t {
  idle,           ///< pending: not started, or reset
  retry_wait,     ///< pending: a retry is due after a delay
  waiting_turn,   ///< queued: an `agent` step waits for its agent's turn
  waiting_slot,   ///< queued: waits for placement and slots
  placing,        ///< running: a worker node is asked to start the runner
  running_fn,     ///< running: a pooled function, or an `llm` step's model call
  running_sleep,  ///< running: the built-in `sleep`
  running_runner, ///< running: a step runner (run, tool, or a plan's planner)
  running_child,  ///< running: a child execution
  halted,         ///< its worker ended during a halt: reset in the snapshot
  completed,
  failed,
  skipped,        ///< its condition was false or its needs were skipped: never started
  waiting,        ///< waiting: a `wait` step armed for its signal (no worker, no slot)
};

/// The record status of a step in `p`.
step_status status_of(step_phase p);

/// True when the record status of a step in `p` is active
/// (`is_active(status_of(p))`: running, queued or waiting): a stop resets it.
bool is_active(step_phase p);

/// True when a step in `p` is settled for its dependents: completed or skipped.
inline bool is_settled(step_phase p) {
  return p == step_phase::completed || p == step_phase::skipped;
}

/// Which pool a slot grant came from: the node's, the step's own (its tool's
/// or its provider's), or one the step never asked.
enum class slot_from : uint8_t { node, own, elsewhere };

const char* to_string(exec_phase x);
const char* to_string(step_phase x);

// -- environment ------------------------------------------------------------------------

/// What a machine knows of its node: plain data shared by every execution.
struct machine_env {
  std::string node_name = "local";
  bool has_admission = false;  ///< roots wait for an admission slot
  bool has_cluster = false;    ///< subprocess attempts are placed through the cluster
  std::shared_ptr<const tool_table> tools;
  /// Tools with their own slot pool (`max_parallel`).
  std::vector<std::string> tool_pools;
  /// Model providers with their own slot pool (`max_parallel`).
  std::vector<std::string> provider_pools;
  std::shared_ptr<const fn_registry> fns;
  /// The model providers of `llm` steps, by name (the node config's `providers`).
  std::shared_ptr<const std::map<std::string, chat_provider>> providers;
};

/// What a machine starts from.
struct machine_init {
  execution_record record;
  std::shared_ptr<const canopy::core::graph> graph;
  std::vector<step_record> steps; ///< stored steps (resume), else empty
  std::shared_ptr<halt_token> token;
  std::shared_ptr<limit_scope> scope;
  bool own_scope = false;   ///< `scope` was made for this execution
  bool scope_dirty = false; ///< counters changed (a raised budget)
  bool has_parent = false;
  /// Take the tree over with the first write: the epoch read (a resume).
  bool acquire_lease = false;
  uint64_t lease_epoch = 0;
};

/// The step results a completed iteration hands to its repeating step:
/// step id → result of each completed step, null for each skipped one.
json iteration_results(const std::vector<step_record>& steps);

// -- resolver -----------------------------------------------------------------------

class execution_machine;

/// What a child step runs, as the shell resolves it (store reads, graph
/// parsing, agents): a graph and the child's record, or an error.
struct child_launch {
  std::string error;                   ///< non-empty: the attempt fails with it
  json error_result;                   ///< kept with the failure (a planner's output)
  std::shared_ptr<const canopy::core::graph> graph;  ///< null with an error (or see the call)
  execution_record record;             ///< new (with `queued`), or stored (resume)
  std::vector<step_record> steps;      ///< stored steps of a resumed child
  write_batch queued;                  ///< stores a new child; empty on resume
};

/// The next iteration of a repeating `graph` step: its number (2, 3, ...)
/// and the inputs its `carry` gives, over the step's `with`; of an `llm`
/// step's tool-calling loop: the turn and `{"messages": conversation}`.
struct next_iteration {
  int32_t number = 0;
  json carry = json::object();
};

/// Answers, synchronously, what the child steps of a machine run. The shell
/// implements it over the store, the graph registry and the agents; tests
/// implement it over plain graphs. Called from inside machine inputs.
class step_resolver {
public:
  virtual ~step_resolver() = default;
  /// A `graph` step's child: its graph (inline or registered), inputs checked;
  /// an `llm` loop's turn (persistence/conversation.hpp `turn_graph`).
  /// `next` null: the step's child (resumed when it has one; a repeating
  /// step's new child is iteration 1); else a new child, that iteration.
  virtual child_launch graph_child(const execution_machine& m, uint32_t idx,
                                   const next_iteration* next) = 0;
  /// A `plan` step's stored child (resume); no graph and no error: plan again.
  virtual child_launch stored_plan(const execution_machine& m, uint32_t idx) = 0;
  /// The child a planner printed (`result` is the planner's result).
  virtual child_launch planned_child(const execution_machine& m, uint32_t idx,
                                     json result) = 0;
  /// An `agent` step: its resumed run (graph set), a failure (error), or
  /// neither: the step asks its agent for a turn.
  virtual child_launch agent_step(const execution_machine& m, uint32_t idx) = 0;
  /// The run of an `agent` step whose agent gave it a turn.
  virtual child_launch agent_run(const execution_machine& m, uint32_t idx) = 0;
};

// -- the machine ----------------------------------------------------------------------

/// The machine is also its execution's step results (references resolve
/// against it): a completed step's result is kept in its step state.
class execution_machine : public step_results {
public:
  /// At most this many steps start in one input; the rest follow a `yield`,
  /// so a wide layer's records are committed while its later steps start.
  static constexpr size_t pump_chunk = 256;

  /// An `llm` step's attempt about to start: its resolved messages and what
  /// it reserves of the budget, or why it cannot start.
  struct llm_start {
    std::string error;
    json messages;
    double reserved = 0;
  };

  /// Per-step state: phase, reason and what the step holds, compactly.
  struct step_state {
    step_phase phase = step_phase::idle;
    step_reason reason = step_reason::none;
    uint8_t held = 0; ///< `held_*` bits
    int32_t attempt = 0;
    uint32_t remaining = 0; ///< `needs` not yet durably completed
    uint32_t ticket = 0;    ///< slot or placement ticket while held
    int64_t pid = 0;
    uint64_t pid_start = 0;
    int64_t started_at = 0;
    int64_t ended_at = 0;
    std::string node;     ///< empty: `local`
    std::string child_id; ///< the child execution of a graph, plan or agent step
    /// A wait's absolute deadline (ms since the epoch; 0: none), kept across
    /// a stop so that a resume re-arms it with the same one.
    int64_t deadline = 0;
    json error;           ///< null or the failure message
    json result;          ///< a completed step's result, or a failed attempt's output
  };
  static constexpr uint8_t held_own_pool = 1; ///< the step's tool or provider has its own pool
  static constexpr uint8_t held_own_slot = 2; ///< holds its own pool's slot
  static constexpr uint8_t held_slot = 4;      ///< holds a node pool slot
  static constexpr uint8_t held_place = 8;     ///< holds a cluster placement
  static constexpr uint8_t held_remote = 16;   ///< placed on another node

  /// @param resolver answers what child steps run (not owned; outlives the machine)
  execution_machine(std::shared_ptr<const machine_env> env, machine_init init,
                    step_resolver* resolver);

  // -- inputs (each may append effects) -------------------------------------------------

  /// The execution begins (its own start message).
  void start(int64_t now);
  /// A root's admission slot was granted.
  void admitted(int64_t now);
  /// A slot pool granted `ticket` (not 0). A step with an own pool (its
  /// tool's or its provider's) takes that slot first; a subprocess then takes
  /// one of the node's, a model call starts. Appends `return_grant` when
  /// nothing waits for it.
  void slot_granted(uint32_t ticket, slot_from from, int64_t now);
  /// The cluster placed step `idx`'s attempt on `node` (`remote`: not here).
  void placed(uint32_t idx, int32_t attempt, uint32_t ticket, const std::string& node,
              bool remote, int64_t now);
  /// A worker started the runner of a remote attempt. @returns false when the
  /// attempt is no longer wanted (the shell stops that runner).
  bool remote_started(uint32_t idx, int32_t attempt);
  /// A worker did not start a remote attempt (`spawn_failed`: it cannot).
  void remote_failed(uint32_t idx, int32_t attempt, bool spawn_failed, const std::string& why,
                     int64_t now);
  /// An attempt finished (runner, function, or a worker's runner).
  void step_done(uint32_t idx, int32_t attempt, json result, const std::string& error,
                 int64_t now);
  /// A runner's process started.
  void runner_started(uint32_t idx, int32_t attempt, int64_t pid, uint64_t pid_start);
  /// A runner's output lines.
  void output(uint32_t idx, int32_t attempt, json lines, int64_t now);
  /// A runner's escalation (a stop's or a timeout's) sent `signal` to its
  /// step's process group; `next` follows in `next_in_ms` (`next` 0: none).
  /// Writes one `step.signalled` event and changes nothing else; only for
  /// the current attempt of a running runner, while running or halting.
  void signalled(uint32_t idx, int32_t attempt, int signal, int next, int64_t next_in_ms,
                 int64_t now);
  /// A `sleep` finished.
  void wake(uint32_t idx, int32_t attempt, int64_t ms, int64_t now);
  /// An attempt's timeout passed.
  void timeout(uint32_t idx, int32_t attempt, int64_t now);
  /// A retry delay passed.
  void retry_due(uint32_t idx, int32_t attempt, int64_t now);
  /// The graph's deadline passed.
  void deadline(int64_t now);
  /// A stopped function ignored its stop token past its grace periods.
  void abandon_fn(uint32_t idx, int32_t attempt, int64_t now);
  /// Step `idx`'s worker went down without a result.
  void down(uint32_t idx, const std::string& why, int64_t now);
  /// Cluster member `node` was lost.
  void node_lost(const std::string& node, int64_t now);
  /// The child execution of step `idx` settled.
  /// `stopped_events`: the events of its subtree that a stop from above
  /// ended compactly (see `subtree_stop`), 0 unless stopped with us.
  /// `steps`: a completed iteration's step results (`iteration_results`),
  /// which a repeating step's `until` and `carry` read; null otherwise.
  void child_settled(uint32_t idx, execution_status status, json outputs,
                     const std::string& error, write_batch snapshot, int64_t now,
                     uint64_t stopped_events = 0, json steps = nullptr);
  /// A stop: `reason`, `mode`, `from_above` when the parent sent it (hand
  /// the snapshot up). A stop request that carries it is answered by the
  /// store, not the machine (runtime/docs/reference/statuses.md#stop, through `store::commit`). A stop
  /// that finds the execution finishing or done changes nothing: its request
  /// is answered `no_execution` when the final record is committed.
  void stop(step_reason reason, stop_mode mode, bool from_above, int64_t now);
  /// An in-process stop request: `batch` stores it; it is written after
  /// every earlier write, in one write with what the stop records first
  /// (`stopping`, or the snapshot), whose acknowledgement answers the caller
  /// (`write::reply`). Otherwise the same as `stop(requested, ...)`.
  /// @returns false when the execution is finishing or done (its final
  ///          record is on its way or committed): nothing is written and no
  ///          reply will come, so the caller stores the request elsewhere.
  bool stop_request(const stop_record& req, write_batch batch, int64_t now);
  /// The parent died without a stop.
  void parent_lost(int64_t now);
  /// Its own `yield`: start the next ready steps.
  void resume_pump(int64_t now);
  /// A write of `completed` steps (and `then`) was acknowledged.
  void write_acknowledged(std::vector<uint32_t> completed, after_write then, int64_t now);

  // -- waits (machine_waits.cpp) ------------------------------------------------------

  /// No signal was buffered for step `idx`'s wait when it was armed: its
  /// deadline timer starts now (a deadline already passed fires at once).
  void wait_armed(uint32_t idx, int32_t attempt, int64_t now);
  /// Signal `sig` is offered to step `idx`'s wait (the shell's signal desk
  /// matched its name). The wait takes it when it is still waiting, the
  /// execution runs, and `sig` was received before the deadline: the step
  /// completes with `{value, timed_out: false, by, at}` (or fails, reason
  /// `rejected`, for a failure signal) and the signal is marked consumed in
  /// the same write, which answers the offer (`write::reply`).
  /// @returns true when it took it; false: the desk keeps it buffered.
  bool signal_offered(uint32_t idx, int32_t attempt, const signal_record& sig, int64_t now);
  /// The deadline timer of step `idx`'s wait fired: `on_timeout` applies
  /// (a clock that stepped back re-arms it for the rest).
  void wait_due(uint32_t idx, int32_t attempt, int64_t now);

  // -- agents ---------------------------------------------------------------------------

  /// The agent answered. Appends `release_turn` when a granted turn is not used.
  void turn_answered(uint32_t idx, int32_t attempt, turn_verdict verdict, uint64_t turn,
                     int64_t now);
  /// The agent could not be asked (it is gone).
  void turn_failed(uint32_t idx, int32_t attempt, const std::string& why, int64_t now);

  // -- output ---------------------------------------------------------------------------

  /// Moves the effects appended so far out.
  std::vector<effect> take_effects();
  /// Appends pending records as a write (if any), then @returns the effects.
  std::vector<effect> flush_effects();

  // -- queries --------------------------------------------------------------------------

  exec_phase phase() const { return phase_; }
  const execution_record& record() const { return rec_; }
  const graph& graph_def() const { return *g_; }
  const step_state& step(uint32_t idx) const { return steps_[idx]; }
  /// The iteration repeating step `idx` runs or ran last (0: none yet, or
  /// not a repeating step).
  int32_t iteration(uint32_t idx) const;
  /// Wait step `idx`'s prompt as rendered when it was last armed ("": none).
  const std::string& prompt(uint32_t idx) const;
  size_t size() const { return steps_.size(); }
  const step_results& results() const { return *this; }
  /// @returns the result of step `step` once it completed, else null.
  const json* result_of(const std::string& step) const override;
  /// @returns true when step `step` was skipped.
  bool skipped(const std::string& step) const override;
  const std::shared_ptr<halt_token>& token() const { return token_; }
  const std::shared_ptr<limit_scope>& scope() const { return scope_; }
  /// True when a message about (idx, attempt) is current.
  bool current(uint32_t idx, int32_t attempt) const {
    return idx < steps_.size() && steps_[idx].attempt == attempt;
  }
  /// The step whose ticket is `ticket`, or size().
  uint32_t step_of_ticket(uint32_t ticket) const;
  /// The record of step `idx` as it would be written now.
  step_record step_record_of(uint32_t idx) const;
  execution_status final_status() const { return final_status_; }
  step_reason final_reason() const { return final_reason_; }

private:
  // -- records (machine_records.cpp) --
  write_batch& batch_or_new();
  /// Adds an event about the execution that leaves it `status`.
  void emit(event_type type, int64_t now, execution_status status,
            step_reason reason = step_reason::none, json data = nullptr);
  /// Adds an event about step `step` that leaves it `status`.
  void emit_step(event_type type, int64_t now, const std::string& step, step_status status,
                 step_reason reason = step_reason::none, json data = nullptr);
  /// Adds an event about step `step` that changes no status (output, signals).
  void emit_note(event_type type, int64_t now, const std::string& step, json data);
  void put_step(uint32_t idx);
  /// `{"attempt": attempt}`, the data of `step.started` (built without an
  /// initializer list: once per step).
  static json attempt_data(int attempt);
  void put_execution();
  /// Adds the limit scope's counters when they changed.
  void put_counters();
  /// Adds the final batches children handed up during a halt.
  void put_snapshot();
  void append_history(int64_t now);
  void stop_clock(int64_t now);
  void flush(after_write then = after_write::none);

  // -- steps (machine_steps.cpp) --
  void pump(int64_t now);
  bool start_step(uint32_t idx, int64_t now);
  void start_fn(uint32_t idx, int64_t now);
  void start_runner(uint32_t idx, int64_t now);
  void enqueue(uint32_t idx, const tool_def* tool, const std::string& tool_name, int64_t now);
  void start_plan(uint32_t idx, int64_t now);
  void release_slots(uint32_t idx);
  void mark_running(uint32_t idx, step_phase phase, int64_t now);
  void complete_step(uint32_t idx, json result, int64_t now);
  /// Decides a step whose needs are settled: @returns the reason it is
  /// skipped (`none`: it runs); `error` is set when its `when` cannot be
  /// evaluated (a reference that does not resolve or is not a boolean).
  step_reason skip_reason(uint32_t idx, std::string& error) const;
  /// Ends step `idx` `skipped` with `reason`; it never started.
  void skip_step(uint32_t idx, step_reason reason, int64_t now);
  /// Ends step `idx`'s attempt failed (retried while `retries` allow);
  /// a final failure records `why`.
  void fail_attempt(uint32_t idx, const std::string& error, json result, int64_t now,
                    step_reason why = step_reason::none);
  /// Starts step `idx`'s model call with its resolved `messages`
  /// (machine_llm.cpp).
  void start_llm(uint32_t idx, json messages, int64_t now);
  /// Step `idx`'s model call waits `queued` for a slot of its provider's pool.
  void queue_llm(uint32_t idx, int64_t now);
  /// Step `idx` got its provider's slot: its call starts.
  void start_queued_llm(uint32_t idx, int64_t now);
  /// Keeps `reserved` of the budget for `llm` step `idx`'s attempt.
  void reserve(uint32_t idx, double reserved);
  /// Gives back the reservation of `llm` step `idx`'s attempt, which left
  /// its provider's queue without calling the model.
  void unreserve(uint32_t idx);
  /// What an `llm` step's attempt needs before it is charged: the resolved
  /// messages and what it reserves, or why it cannot start (machine_llm.cpp).
  llm_start prepare_llm(uint32_t idx) const;
  /// Settles the reservation of `llm` step `idx`'s attempt, which completed
  /// with `result`, to what its usage cost; adds `spend` to the result.
  void settle_llm(uint32_t idx, json& result);
  /// Arms step `idx`'s wait (machine_waits.cpp).
  void start_wait(uint32_t idx, int64_t now);
  /// Tells the desk that step `idx` no longer waits, if it did.
  void leave_waiting(uint32_t idx);
  // -- loops (machine_loops.cpp) --
  /// Iteration `iteration(idx)` of repeating step `idx` completed with
  /// `outputs` and step results `steps`: the step completes (`until` holds),
  /// ends at `max` (`on_max`), or starts the next iteration.
  void iteration_done(uint32_t idx, json outputs, const json& steps, int64_t now);
  /// Turn `iteration(idx)` of `llm` step `idx`'s tool-calling loop completed
  /// with `outputs`: the step completes when the model asked for no tool,
  /// fails at `max_turns`, or starts the next turn.
  void turn_done(uint32_t idx, json outputs, int64_t now);

  void planned(uint32_t idx, json result, const std::string& error, int64_t now);
  void start_planner(uint32_t idx, int64_t now);
  /// Runs `c` as step `idx`'s child, adopts the result of a stored child that
  /// completed, or fails the attempt. @returns false when the attempt failed.
  bool spawn_child(uint32_t idx, child_launch c, uint64_t turn, int64_t now);
  /// What step `def` keeps of its child's `outputs` (an agent step: the reply).
  static json child_result(const step_def& def, json outputs);
  void lose_step(uint32_t idx, const std::string& why, bool worker_alive, int64_t now);
  void stop_owner(const std::string& owner, step_reason reason, int64_t now);
  const tool_def* tool_of(const step_def& def, std::string& error) const;
  /// The own slot pool of step `idx`: its tool's or its provider's (with a
  /// `max_parallel`), else the node's.
  fx::pool_ref own_pool(uint32_t idx) const;
  void finish(int64_t now);
  void on_durable(const std::vector<uint32_t>& completed, int64_t now);

  // -- halt (machine_halt.cpp) --
  void begin_halt(execution_status final_status, step_reason reason, step_reason step_why,
                  stop_mode mode, int64_t now);
  void try_complete_halt(int64_t now);
  bool halt_waiting() const;
  /// The one rule: step `idx`, running or queued, goes back to `pending`
  /// with `reason` (its slots released, its record and event written).
  /// @returns false when the step was not active.
  bool reset_to_pending(uint32_t idx, step_reason reason, int64_t now, json event_data = nullptr);
  /// Its in-memory half (a compact stop writes nothing): slots released,
  /// idle with `reason`, ended at `now`. @returns false when not active.
  bool reset_in_memory(uint32_t idx, step_reason reason, int64_t now);
  step_reason child_reason() const;
  /// The halt of an execution stopped from above: no record, no event; its
  /// active steps go back to idle in memory and the parent counts them.
  void complete_halt_compactly(int64_t now);
  void report_and_quit();

  std::shared_ptr<const machine_env> env_;
  step_resolver* resolver_;
  execution_record rec_;
  std::shared_ptr<const graph> g_;
  std::vector<step_state> steps_;
  /// Dependents of step i: dep_targets_[dep_offsets_[i] .. dep_offsets_[i+1]);
  /// both empty when no step has needs.
  std::vector<uint32_t> dep_offsets_;
  std::vector<uint32_t> dep_targets_;
  std::vector<uint32_t> ready_;
  /// What only some kinds of steps keep, by step: apart, so that a step
  /// state stays small, and allocated by the first step that keeps any.
  struct side_tables {
    std::map<uint32_t, std::string> prompts; ///< wait steps' rendered prompts
    std::map<uint32_t, int32_t> iterations;  ///< repeating steps' current iteration
    std::map<uint32_t, double> reserved;     ///< priced `llm` attempts' reservations
  };
  std::unique_ptr<side_tables> side_;
  side_tables& side() {
    if (!side_)
      side_ = std::make_unique<side_tables>();
    return *side_;
  }
  size_t durable_completed_ = 0; ///< completed or skipped, and committed
  uint32_t skipped_ = 0;         ///< steps skipped so far (stored ones too)
  uint32_t next_ticket_ = 1;
  std::unique_ptr<write_batch> batch_;       ///< allocated when a record is added
  std::vector<uint32_t> batch_completed_;    ///< steps whose completion rides on `batch_`
  std::unique_ptr<write_batch> snapshot_;    ///< children's final batches (halt)
  /// Events of descendants a stop from above ended compactly: what this
  /// execution's `subtree_stop` (or its report) stands for.
  uint64_t stopped_below_ = 0;
  std::vector<effect> effects_;
  std::shared_ptr<halt_token> token_;
  std::shared_ptr<limit_scope> scope_;
  std::string error_;
  int64_t run_started_ = 0;
  exec_phase phase_ = exec_phase::created;
  execution_status final_status_ = execution_status::stopped;
  step_reason final_reason_ = step_reason::none;
  step_reason step_reason_ = step_reason::none; ///< what reset steps record
  stop_mode mode_ = stop_mode::graceful;
  bool own_scope_ = false;
  bool scope_dirty_ = false;
  bool blocked_ = false;   ///< a limit refused a step: wait for the stop
  bool admitted_ = false;
  bool from_above_ = false;
  bool reply_pending_ = false; ///< the next write answers stop requests
  bool has_parent_ = false;
  bool child_stopped_ = false;
  bool yielded_ = false;   ///< a `yield` is on its way back (`resume_pump`)
  bool acquire_lease_ = false; ///< the next write takes the tree over
  uint64_t lease_epoch_ = 0;   ///< the epoch that take-over compares
};

} // namespace canopy::core
