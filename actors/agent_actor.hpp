#pragma once

// The agent actor: one per agent (SPEC §9) and process, spawned on first use.
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

#include "actors/execution/outcomes.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

struct execution_services;

/// How a message to an agent ended (SPEC §13 rule 21).
struct agent_reply {
  /// The run's final status (`completed`, `failed`, `stopped`), or
  /// `busy` (rejected, nothing ran) or `cancelled` (superseded by a newer
  /// message before its run started).
  std::string status;
  std::string reason;        ///< the run's reason, e.g. `requested`
  json reply;                ///< the run's `reply` output; null unless completed
  std::string execution_id;  ///< empty when no run started
  std::string error;         ///< why it failed, or was refused
};

/// Spawns the actor of agent `name` of `owner`. The agent's record is read
/// from the store at each message (its graph and policy may change).
/// Threading: any thread.
caf::actor spawn_agent(caf::actor_system& sys, std::string owner, std::string name,
                       std::shared_ptr<const execution_services> svc);

/// The inputs of a run of `g` for `message`: `message`, and `history` (the
/// agent's history documents, oldest first) when the graph declares it.
/// @returns the inputs, or a store error.
caf::expected<json> make_agent_inputs(const graph& g, const json& message, const store& db,
                                      const std::string& owner, const std::string& name);

/// An `agent.*` event about run `rec` of agent `rec.agent`.
event_record make_agent_event(const execution_record& rec, const char* type, json data);

/// Parses the graph of agent `ag` for a run at `depth` below a scope allowing
/// `max_depth`, with the node's rules (functions, tools, inline commands).
parse_result parse_agent_graph(const agent_record& ag, const execution_services& svc,
                               int depth, int max_depth);

} // namespace canopy::core
