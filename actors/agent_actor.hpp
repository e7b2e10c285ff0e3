#pragma once

// The agent actor: one per agent (runtime/docs/reference/graph-format.md#agent-graphs) and process, spawned on first use.
// It is the agent's mailbox: it decides, message by message, when a run of
// the agent's graph may start, following the agent's `on_busy` policy. Runs
// themselves are ordinary executions with `agent` set in their record; their
// history entries are appended by the run itself, in its final commit.
//
// An agent is busy while it has a run that is not in the asking message's
// own tree: the turn it granted last (until that run is down), or a live run
// in the store (started by another process, or resumed). A message from a
// run's own tree (an agent messaging itself, directly or through others) is
// nested: it never waits, and `max_depth` bounds it.
//
// Handles:
//   (message_atom, json message, string who) -> agent_reply
//       a user's message: waits for a turn, starts a root run named after the
//       agent, answers when the run ended (or at once: `busy`, `cancelled`)
//   (acquire_atom, string root_id) -> (turn_verdict, uint64_t turn)
//       an `agent` step of tree `root_id` asks for a turn; verdict `granted`
//       (the step starts its child run and reports it with run_atom),
//       `nested` (no turn taken), `busy` (reject), `cancelled` (superseded)
//   (run_atom, uint64_t turn, actor run)   the granted step's run started;
//       the turn ends when `run` is down
//   (release_atom, uint64_t turn)          a granted step gave its turn back
//   (close_atom)                           the node shuts down: answer every
//       waiting message `stopped`/`shutdown` and start no more runs
// A requester that goes down gives back its turn and leaves the queue.

#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/agent_reply.hpp"
#include "actors/messages.hpp"

namespace canopy::core {

struct execution_services;

/// The agent actor's interface: the messages above. `tick_atom` is its own
/// (delivered by the timer service while another tree's run keeps it busy).
using agent_actor = caf::typed_actor<
  caf::replies_to<message_atom, json, std::string>::with<agent_reply>,
  caf::replies_to<acquire_atom, std::string>::with<turn_verdict, uint64_t>,
  caf::reacts_to<run_atom, uint64_t, caf::actor, std::string>,
  caf::reacts_to<release_atom, uint64_t>,
  caf::reacts_to<tick_atom>,
  caf::reacts_to<close_atom>>;

/// Spawns the actor of agent `name` of `owner`. The agent's record is read
/// from the store at each message (its graph and policy may change).
/// Threading: any thread.
agent_actor spawn_agent(caf::actor_system& sys, std::string owner, std::string name,
                       std::shared_ptr<const execution_services> svc);

} // namespace canopy::core
