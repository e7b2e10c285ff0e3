#pragma once

// Every atom and message type of the actor layer, in one place. Each actor's
// header lists the messages it handles.

#include <future>
#include <memory>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/response_promise.hpp>
#include <nlohmann/json.hpp>

#include "actors/agent_reply.hpp"
#include "actors/execution/outcomes.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

// -- atoms ---------------------------------------------------------------------

using write_atom = caf::atom_constant<caf::atom("write")>;         ///< store writer: commit a batch
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>; ///< store writer: live events
using unsubscribe_atom = caf::atom_constant<caf::atom("unsubscr")>;
using sync_atom = caf::atom_constant<caf::atom("sync")>; ///< writer: answered after sending every committed event
using events_atom = caf::atom_constant<caf::atom("events")>;     ///< committed events, to subscribers
using acquire_atom = caf::atom_constant<caf::atom("acquire")>;   ///< slot pool: ask for a slot
using grant_atom = caf::atom_constant<caf::atom("grant")>;       ///< slot pool: a slot is yours
using release_atom = caf::atom_constant<caf::atom("release")>;   ///< slot pool: give a slot back
using output_atom = caf::atom_constant<caf::atom("output")>;   ///< runner: output lines
using started_atom = caf::atom_constant<caf::atom("started")>;   ///< runner: subprocess started
using done_atom = caf::atom_constant<caf::atom("done")>;         ///< runner/fn/child: finished
using poll_atom = caf::atom_constant<caf::atom("poll")>;         ///< runner: poll the process
using recheck_atom = caf::atom_constant<caf::atom("recheck")>; ///< runner: the slow poll of a watched process
using escalate_atom = caf::atom_constant<caf::atom("escalate")>; ///< runner: next signal
using signalled_atom = caf::atom_constant<caf::atom("signalled")>; ///< runner: a signal was sent
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;   ///< a step attempt timed out
using wake_atom = caf::atom_constant<caf::atom("wake")>;         ///< a `sleep` fn finished
using retry_atom = caf::atom_constant<caf::atom("retry")>;       ///< start the next attempt
using flush_atom = caf::atom_constant<caf::atom("flush")>;       ///< writer: commit now
using child_atom = caf::atom_constant<caf::atom("child")>;       ///< child execution finished
using stop_atom = caf::atom_constant<caf::atom("stop")>;         ///< stop an execution
using start_atom = caf::atom_constant<caf::atom("start")>;       ///< an execution begins
using deadline_atom = caf::atom_constant<caf::atom("deadline")>; ///< a deadline passed
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;   ///< give up on a stopped fn
using request_atom = caf::atom_constant<caf::atom("request")>;   ///< store and handle a stop request
using schedule_atom = caf::atom_constant<caf::atom("schedule")>; ///< timer: deliver a message later
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;     ///< timer: forget a receiver's timers
using tick_atom = caf::atom_constant<caf::atom("tick")>;         ///< a periodic or timer wake-up
using message_atom = caf::atom_constant<caf::atom("message")>;   ///< agent: a user's message
using run_atom = caf::atom_constant<caf::atom("run")>;           ///< agent: a granted turn's run
using close_atom = caf::atom_constant<caf::atom("close")>;       ///< agent: the node shuts down
using pump_atom = caf::atom_constant<caf::atom("pump")>;         ///< execution: start more ready steps
using idle_atom = caf::atom_constant<caf::atom("idle")>;         ///< writer: idle-time work
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;       ///< timer: drop ended receivers' timers
using gate_atom = caf::atom_constant<caf::atom("gate")>;         ///< execution: the start gate let it in
using arm_atom = caf::atom_constant<caf::atom("arm")>;           ///< signal desk: a wait is armed
using disarm_atom = caf::atom_constant<caf::atom("disarm")>;     ///< signal desk: a wait ended
using armed_atom = caf::atom_constant<caf::atom("armed")>;       ///< execution: no buffered signal for its wait
using offer_atom = caf::atom_constant<caf::atom("offer")>;       ///< execution: a signal for its wait
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;   ///< signal desk: a signal was stored
using due_atom = caf::atom_constant<caf::atom("due")>;           ///< execution: a wait's deadline passed

/// A thread's wait for one write through the store writer (not an actor:
/// an HTTP handler, the library's caller). The writer sets it once, after
/// the write's commit: no error when committed, else why not. A writer that
/// drops the write unanswered (it is gone) breaks it.
using commit_ticket = std::shared_ptr<std::promise<caf::error>>;

/// Who waits for a write's commit: an actor's request (answered `true`, or
/// the error) or a thread's ticket (set to no error, or the error).
struct commit_waiter {
  caf::response_promise rp;
  commit_ticket ticket;

  /// Answers once the write is committed (`err` unset) or has failed.
  void answer(const caf::error& err) {
    if (ticket)
      ticket->set_value(err);
    else if (err)
      rp.deliver(err);
    else
      rp.deliver(true);
  }
};

/// Committed events, shared by every subscriber that receives them.
using event_list = std::shared_ptr<const std::vector<event_record>>;

/// What a finished step attempt produced: a result object, and an error
/// message when it failed (a failed `run` step keeps its result too).
struct step_outcome {
  nlohmann::json result;
  std::string error; ///< empty: success
};

/// Serialises a stop request (it may cross the middleman).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stop_record& x) {
  return f(caf::meta::type_name("stop_record"), x.id, x.target, x.force, x.handled, x.result,
           x.requested_at, x.handled_at, x.who);
}

} // namespace canopy::core

// Local-only message types. They never cross the middleman: the store writer
// and the execution actors live in the process that owns the store.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(nlohmann::json)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(canopy::core::write_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(canopy::core::signal_record)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(canopy::core::step_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(canopy::core::agent_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<canopy::core::event_record>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const std::vector<canopy::core::event_record>>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(canopy::core::commit_ticket)
