#pragma once

// What a run of an agent needs, shared by the agent's mailbox
// (actors/agent_actor.hpp), which starts runs for users' messages, and the
// execution shell (actors/execution/step_launch.cpp), which starts them for
// `agent` steps: the run's inputs, its events and its graph. Plain functions
// over the store; no actors.

#include <string>

#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

struct execution_services;

/// The inputs of a run of `g` for `message`: `message`, and `history` (the
/// agent's history documents, oldest first) when the graph declares it.
/// @returns the inputs, or a store error.
caf::expected<json> make_agent_inputs(const graph& g, const json& message, const store& db,
                                      const std::string& owner, const std::string& name);

/// An `agent.*` event about run `rec` of agent `rec.agent`, now.
event_record make_agent_event(const execution_record& rec, event_type type, json data);

/// Parses the graph of agent `ag` for a run at `depth` below a scope allowing
/// `max_depth`, with the node's rules (functions, tools, inline commands).
parse_result parse_agent_graph(const agent_record& ag, const execution_services& svc,
                               int depth, int max_depth);

} // namespace canopy::core
