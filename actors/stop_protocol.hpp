#pragma once

// The stop protocol (runtime/docs/reference/statuses.md#stop), written once: request durably, deliver,
// await settled. The library (`runtime::stop`, `execution_handle::stop`),
// the CLI (`canopy stop`, Ctrl-C), the agent actor (`cancel_previous`,
// `agent cancel`), the stop watcher and the HTTP server all go through it.
//
// 1. Request: a stop of an execution that is not queued, running or
//    stopping answers `no_execution` and stores nothing (runtime/docs/reference/statuses.md#stop-results).
//    Otherwise the request is stored in the stop registry with its
//    `stop.requested` event before anything else is said about it. Its halt
//    token is set first when the execution lives in this process, so from
//    that moment nothing in its subtree starts a step.
// 2. Deliver: a live execution of this process receives the request itself
//    and commits it behind every record it wrote before (the log shows every
//    step started before the request and none after it); an execution of
//    another process gets it from that process's stop watcher.
// 3. Settle: the store answers every request (`store::commit`): once its
//    target is terminal the request is `handled` in the same transaction,
//    `stopped` or `no_execution`. A request that races with its target's
//    completion is therefore answered too, never left pending.
//
// No call here waits without a bound: a reply or a down that never comes
// (seen with CAF 0.17 when a request met an actor that was quitting) costs at
// most the bound, and the request is then stored through the store writer
// instead (storing it twice does nothing).
//
// Written once: steps 1 and 2 begin in one function for every requester;
// an actor then sends the request and takes the answer in a handler
// (`request_stop_async`), a thread sends it with a ticket that the
// execution (or the writer) answers, and waits for it within its bound
// (`request_stop`); step 3 is one polling loop (`await_stop` on a store),
// which the in-process `await_stop` enters once the live target is down;
// `stop_all` stops many executions within one deadline.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/message.hpp>

#include "actors/agent_actor.hpp"
#include "actors/execution/outcomes.hpp"
#include "actors/store_writer.hpp"
#include "actors/tree_context.hpp"
#include "persistence/duration.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

// (`stop_mode` and `stop_result` are in persistence/outcomes.hpp.)

/// A stop request and where it stands.
struct stop_ticket {
  /// The stored request; `id` is empty when nothing was stored.
  stop_record request;
  stop_result result = stop_result::stopping;
};

// -- building blocks --------------------------------------------------------------

/// Builds a new request (a fresh id, `requested_at` now) to stop `target`,
/// and the batch that stores it. The store writes its `stop.requested` event.
std::pair<stop_record, write_batch> make_stop_request(const execution_record& target,
                                                      stop_mode mode, const std::string& who);

/// Reads where `ticket`'s request stands in `db`: its stored result once
/// handled, else `stopping`. A ticket without a stored request keeps its
/// result. Threading: any thread.
stop_result read_stop_result(const store& db, const stop_ticket& ticket);

/// What the protocol needs of the process that owns executions.
struct stop_context {
  std::shared_ptr<store> db;
  store_writer_actor writer;                      ///< the store writer
  std::shared_ptr<execution_directory> directory; ///< live executions here
};

/// The stop message of an execution actor (actors/execution/execution_actor.hpp):
/// `(stop_atom, reason, force)`, a halt with `reason`. Every sender builds
/// it here.
caf::message make_stop_message(stop_reason reason, stop_mode mode = stop_mode::graceful);

/// Delivers stored request `req` to its target when that execution lives in
/// this process: sets its halt token and sends it the stop. @returns true
/// when delivered. Threading: any thread.
bool deliver_stop(const execution_directory& dir, const stop_record& req);

// -- from inside an actor ---------------------------------------------------------

/// Requests a stop of `target` (steps 1 and 2) with `extra` committed in the
/// same transaction as the request (e.g. `agent.cancelled`); never blocks.
/// The request goes to the live target here, which stores it behind its own
/// records; when there is none, or it does not acknowledge within a short
/// bound, the store writer stores it. `done` is called (in `self`'s context)
/// once it is committed, with the error if it could not be; never from
/// within this call, and not at all when nothing was requested.
/// @returns the ticket: `no_execution` with nothing stored when `target` is
///          not queued, running or stopping, else the request (`stopping`).
/// Threading: `self`'s handlers only.
stop_ticket request_stop_async(caf::event_based_actor* self, const stop_context& ctx,
                               const execution_record& target, stop_mode mode,
                               const std::string& who, write_batch extra,
                               std::function<void(const caf::error&)> done = {});

/// `request_stop_async` from an agent (its `cancel_previous` policy).
stop_ticket request_stop_async(agent_actor::pointer self, const stop_context& ctx,
                               const execution_record& target, stop_mode mode,
                               const std::string& who, write_batch extra,
                               std::function<void(const caf::error&)> done = {});

// -- from a thread of the owning process (library, HTTP handlers) -----------------

/// Requests a stop of execution `id`, as `request_stop_async` does, and
/// blocks until the request is stored: at most the acknowledgement bound
/// (a couple of seconds) plus the store's write wait and a few seconds.
/// @returns the ticket (`no_execution` when nothing was stored, `stopped`
///          when the target settled already), `not_found`, or a store error
///          (`store_busy`, `store_error`). Threading: any non-actor thread.
caf::expected<stop_ticket> request_stop(const stop_context& ctx, const std::string& id,
                                        stop_mode mode, const std::string& who,
                                        write_batch extra = {});

/// Waits up to `wait` for `ticket`'s target to settle (step 3): for its
/// actor to be down when it lives here, then for the store's answer.
/// @returns `stopped` or `no_execution` once settled, else `stopping`.
/// Threading: any non-actor thread.
stop_result await_stop(const stop_context& ctx, const stop_ticket& ticket, millis wait);

/// One execution for `stop_all` to stop.
struct stop_order {
  std::string id;
  write_batch extra; ///< committed with its request (e.g. `agent.cancelled`)
};

/// What became of one execution of `stop_all`.
struct stop_outcome {
  std::string id;
  caf::error error;   ///< why nothing was requested (`not_found`, a store error)
  stop_ticket ticket; ///< as `request_stop` answered it
  /// Where it stood by the deadline: the ticket's result when nothing was
  /// stored; else `stopped` or `no_execution` once settled, `stopping` when
  /// not (also when the deadline passed before its turn: it is not read).
  stop_result result = stop_result::stopping;
};

/// Stops the executions of `orders` within one `wait`: requests every stop
/// first, in order (so all of them halt at once), then awaits each stored
/// request with what is left of `wait`. With `give_up_on_error`, the first
/// request that fails ends the call at once: its outcome is the last one,
/// and nothing is awaited.
/// @returns one outcome per order requested, in order.
/// Threading: any non-actor thread.
std::vector<stop_outcome> stop_all(const stop_context& ctx, std::vector<stop_order> orders,
                                   stop_mode mode, const std::string& who, millis wait,
                                   bool give_up_on_error = false);

// -- from another process on the same home (`canopy stop`) -------------------------

/// Stores a stop request for execution `id` directly in `db` (the process
/// that owns the execution delivers it; runtime/docs/reference/statuses.md#stop).
/// @returns the ticket, `not_found`, or a store error. Threading: the
///          caller's thread; this process runs no store writer.
caf::expected<stop_ticket> request_stop(store& db, const std::string& id, stop_mode mode,
                                        const std::string& who);

/// Polls `db` until `ticket` settles or `wait` passes, calling `between`
/// (e.g. recovery of a dead owner) between two reads. The one polling loop
/// of the protocol: the pauses grow from 1 ms to 20 ms.
/// @returns the result, or a store error. Threading: the caller's thread.
caf::expected<stop_result> await_stop(store& db, const stop_ticket& ticket, millis wait,
                                      const std::function<caf::error()>& between = {});

} // namespace canopy::core
