#pragma once

/// @file
/// The embeddable runtime: open a home (an LMDB store folder), register `fn`
/// step functions, start graphs, and hold `execution` handles to stop,
/// resume, wait for and follow them. Everything is durable: a state a
/// caller can observe is committed to the store before the call returns,
/// and a process that dies leaves executions its next `open` marks
/// `stopped` (reason `interrupted`) for `resume`.
///
/// Lifetimes: `execution` handles and `subscription`s must not outlive the
/// `runtime` they came from (as an LMDB transaction must not outlive its
/// environment). Destroying the runtime stops every execution it runs
/// (each is snapshotted and can be resumed by the next `open`).
///
/// Threading: every member of `runtime`, `execution` and `subscription` may
/// be called from any thread that is not inside a callback of the runtime
/// (an event callback or an `fn` function), unless it says otherwise.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <canopy/error.hpp>
#include <canopy/export.hpp>
#include <canopy/graph.hpp>
#include <canopy/records.hpp>

namespace canopy {

using millis = std::chrono::milliseconds;

/// Options of `runtime::open`.
struct options {
  /// The store folder; empty: `$CANOPY_HOME`, else `./.canopy`. Created when
  /// missing. Several processes may share a home.
  std::string home;
  /// Subprocesses (`run`, `tool` steps) running at once in this process.
  /// At least 1: `open` fails with `errc::invalid` for 0.
  size_t max_parallel = 4;
  /// Root executions running at once (0: unlimited); the others wait
  /// `queued`, in start order.
  size_t max_running = 0;
  /// Threads that run `fn` functions (a slow function never blocks the
  /// runtime's own threads).
  size_t fn_threads = 4;
  /// Threads of the actor scheduler (0: one per core).
  size_t scheduler_threads = 0;

  // -- process-wide effects of `open`, each on by default ------------------

  /// Ignore SIGPIPE, so that a step that closes its stdin early makes the
  /// write fail with EPIPE instead of killing the process. Off: the program
  /// handles SIGPIPE itself (and must not let it end the process).
  bool ignore_sigpipe = true;
  /// Raise the soft limit of open files to the hard limit: every running
  /// subprocess step holds a few descriptors. Off: the limit stays as it is.
  bool raise_open_files_limit = true;
  /// With glibc's malloc, hand large freed buffers back to the kernel at
  /// once (`mallopt(M_MMAP_THRESHOLD)`), so a burst of big events does not
  /// stay in the heap. Off: the program keeps its own allocator settings.
  bool tune_malloc = true;
};

/// What a running `fn` step sees. Valid only during the call.
class CANOPY_API fn_context {
public:
  /// The step's `with` object, references resolved.
  const json& with() const;
  const std::string& execution_id() const;
  /// The step's id.
  const std::string& step() const;
  /// The attempt number, from 1 (see the step's `retries`).
  int attempt() const;
  /// True once the execution is stopping or the attempt timed out.
  bool stop_requested() const;
  /// A cancellation point: @returns `errc::stopped` once a stop was
  /// requested, to be returned by the function; else nothing:
  ///     if (auto stop = ctx.checkpoint()) return *stop;
  std::optional<error> checkpoint() const;

  /// Internal.
  struct state;
  explicit fn_context(const state& s) : s_(&s) {}

private:
  const state* s_;
};

/// A step function: returns the step's result object (its fields are what
/// `${steps.ID.FIELD}` refers to), or an error: the step fails with the
/// error's message (`fn_fail`), or ends stopped (`checkpoint`'s error).
/// Runs on one of the runtime's `fn_threads`.
using fn = std::function<result<json>(fn_context&)>;

/// The error that fails a `fn` step with `message`: `return canopy::fn_fail("no input");`.
CANOPY_API error fn_fail(std::string message);

/// An event subscription. Events come in seq order, each once, on one of
/// the runtime's threads; the callback must not block for long and must not
/// call `subscription::cancel` or `execution::wait`. Destroying or
/// cancelling it ends the callbacks.
class CANOPY_API subscription {
public:
  subscription() = default;
  subscription(subscription&&) noexcept;
  subscription& operator=(subscription&&) noexcept;
  subscription(const subscription&) = delete;
  subscription& operator=(const subscription&) = delete;
  ~subscription();

  /// Delivers every event committed before this call, then ends the
  /// callbacks; returns once no callback runs.
  void cancel();

  /// Internal.
  struct state;
  explicit subscription(std::shared_ptr<state> s);

private:
  std::shared_ptr<state> s_;
};

/// What `execution::signal` sends besides its value.
struct signal_options {
  std::string step;     ///< only the wait at this step path (`review/approve`); empty: any wait of that name
  std::string key;      ///< idempotency key: the same key and value are stored once
  bool failure = false; ///< fail the wait (reason `rejected`) with `message` instead
  std::string message;
  millis wait{5'000};   ///< how long to wait for a wait to take it
};

/// A handle to one execution. Cheap to copy; copies share the execution.
class CANOPY_API execution {
public:
  /// The execution id.
  const std::string& id() const;

  /// True while the execution runs in this process.
  bool running() const;

  /// @returns the stored record; `errc::not_found` once it was deleted;
  ///          `errc::store_unreachable`.
  result<execution_info> status() const;

  /// Blocks until the execution settled (completed, failed or stopped) and
  /// every subscription made through this runtime that follows it was
  /// handed its final events. @returns the final record; an error when its
  /// end could not be recorded (`errc::store_busy`, `store_unreachable`,
  /// `fenced`).
  result<execution_info> wait() const;

  /// As `wait`, but gives up after `timeout`: `errc::timeout` then (the
  /// execution runs on).
  result<execution_info> wait(millis timeout) const;

  /// @returns the outputs of a completed execution; `errc::conflict` naming
  ///          its status when it did not complete (yet).
  result<json> output() const;

  /// Stops the execution and its whole tree: the request is stored first
  /// (a crash after this call cannot lose it), then every running step is
  /// ended (`mode`) and the tree's snapshot committed. Waits up to `wait`
  /// for that. @returns `stopped`, `stopping` when `wait` passed first, or
  /// `not_running` when it had settled; `errc::not_found`; a store error.
  result<stop_outcome> stop(stop_mode mode = stop_mode::graceful,
                            millis wait = std::chrono::seconds{30}) const;

  /// Resumes a stopped or failed execution from its snapshot: finished
  /// steps keep their results, the rest runs again. @returns a handle to it
  /// (for a completed execution, a handle and nothing runs again);
  /// `errc::conflict` while it is live.
  result<execution> resume() const;

  /// Calls `f` with every committed event of this execution's tree: first
  /// those already committed, then live ones.
  subscription events(std::function<void(const event&)> f) const;

  /// Sends signal `name` with `value` to the waits of this execution's tree.
  /// @returns whether it was stored and taken; `errc::not_found` (no wait
  ///          declares `name`), `errc::invalid` (the value fails the wait's
  ///          schema or is too large), `errc::conflict` (every wait ended,
  ///          two waits match and `step` picks none, or the key was used
  ///          with another value).
  result<signal_answer> signal(const std::string& name, json value,
                               const signal_options& opts = {}) const;

  /// Internal.
  struct state;
  explicit execution(std::shared_ptr<const state> s) : s_(std::move(s)) {}

private:
  std::shared_ptr<const state> s_;
};

/// A canopy runtime on one home. One per home and process.
class CANOPY_API runtime {
public:
  /// Opens (or creates) the home, marks executions left live by a dead
  /// process `stopped` (reason `interrupted`, see `recovered`) and starts
  /// the runtime's threads. @returns the runtime; `errc::invalid` for a bad
  /// option; `errc::store_unreachable` when the home cannot be opened.
  static result<std::unique_ptr<runtime>> open(options opts = {});

  /// Stops every execution this runtime runs (each is snapshotted), then
  /// ends its threads.
  ~runtime();

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  /// Registers `f` as the `fn` step function `name`.
  /// @returns `errc::conflict` when the name is taken (built-ins: `noop`,
  ///          `sleep`, `echo`, `fail`); `errc::invalid` for an empty name.
  ///          Register before starting graphs that use it.
  result<void> register_fn(const std::string& name, fn f);

  /// Starts `g` with `inputs` (an object with every declared input). The
  /// execution's first record is committed before this returns.
  /// @returns a handle; `errc::invalid` for an `fn` or tool this runtime
  ///          does not have (with the JSON path) or inputs that do not
  ///          match the graph; a store error.
  result<execution> start(const graph& g, json inputs = json::object());

  /// Starts the newest version of the graph registered as `name`.
  /// @returns as `start`; `errc::not_found` for an unknown name.
  result<execution> start(const std::string& name, json inputs = json::object());

  /// Registers `g` as the next version of graph `name` (1 to 128 of
  /// `A-Z a-z 0-9 _ . -`), committed before this returns. Graph files it
  /// includes are read again, relative to the home, when it starts.
  /// @returns the version, from 1; `errc::invalid` for a bad name.
  result<int> register_graph(const std::string& name, const graph& g);

  /// A handle to execution `id` (any status; live ones of this process can
  /// be waited for). @returns `errc::not_found`.
  result<execution> find(const std::string& id) const;

  /// Resumes execution `id` (see `execution::resume`); `budget` raises the
  /// graph's budget for the resumed run.
  result<execution> resume(const std::string& id, std::optional<double> budget = std::nullopt);

  /// Deletes settled root execution `id` with its whole tree (records,
  /// steps, events), in one transaction. @returns `errc::not_found`;
  /// `errc::conflict` when it is not a root or still live.
  result<void> remove(const std::string& id);

  /// The executions `open` found left live by a dead process and stopped.
  std::vector<std::string> recovered() const;

  /// Calls `f` with every event committed from now on, of every execution.
  subscription events(std::function<void(const event&)> f);

  /// Executions live in this process.
  size_t live_executions() const;

  // -- agents: named graphs that answer messages and keep a history ----------

  /// Creates agent `name` running `g`, or replaces its graph and policy
  /// (its history is kept). `g` must declare input `message` (and may
  /// declare `history`) and output `reply`. @returns true when it is new;
  /// `errc::invalid` for a bad name or graph.
  result<bool> create_agent(const std::string& name, const graph& g,
                            busy_policy on_busy = busy_policy::queue);

  /// Sends `message` to agent `name` and blocks until its run ended.
  /// @returns the reply; `errc::busy` when the agent refused it;
  ///          `errc::not_found` for an unknown agent.
  result<agent_reply> send(const std::string& name, json message);

  /// Stops every live run of agent `name` (each snapshotted) and waits up
  /// to `wait` for them. @returns true when a run was live.
  result<bool> cancel_agent(const std::string& name, millis wait = std::chrono::seconds{30});

  /// Internal.
  struct state;

private:
  explicit runtime(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

} // namespace canopy
