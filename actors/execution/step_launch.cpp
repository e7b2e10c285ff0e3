// The execution shell's part of launching steps: what a child step runs
// (registered graphs, stored graphs on resume, planner output, agent runs,
// each read from the store or parsed here) and pooled function attempts.

#include <algorithm>

#include "actors/agent_runs.hpp"
#include "actors/execution/shell.hpp"
#include "actors/messages.hpp"
#include "persistence/conversation.hpp"
#include "persistence/error.hpp"
#include "persistence/reference.hpp"

namespace canopy::core {

namespace {

/// Parse options for a graph created at run time below `m`.
parse_options child_parse_options(const execution_services& svc, const execution_machine& m) {
  return run_time_parse_options(svc, m.record().depth + 1, m.scope()->max_depth());
}

/// Parse options for a child's stored graph (resume): on a cluster node any
/// tool is accepted, since the workers that have it may not have joined yet.
parse_options stored_parse_options(const execution_services& svc, const execution_machine& m) {
  auto opts = child_parse_options(svc, m);
  opts.any_tool = svc.cluster != nullptr;
  return opts;
}

/// The stored graph of child `id`, loaded without validating it again (the
/// store validated it when it stored it); null when gone or unusable.
std::shared_ptr<const graph> stored_graph_of(const execution_services& svc,
                                             const execution_machine& m, const std::string& id) {
  if (id.empty())
    return nullptr;
  auto stored = svc.db->graph(id);
  if (!stored)
    return nullptr;
  auto parsed = load_stored_graph(std::move(stored->document), stored->base_dir, stored->files,
                                  stored_parse_options(svc, m));
  return parsed ? parsed.value : nullptr;
}

child_launch failure(std::string error, json result = nullptr) {
  child_launch out;
  out.error = std::move(error);
  out.error_result = std::move(result);
  return out;
}

/// The child of step `idx` running `g`: the existing child (`child_id`,
/// resumed under its id) or a new one with `inputs` (a run of `agent` when
/// not empty) pinned to `node` (empty: any); always a new one, iteration
/// `iteration`, when `iteration` > 1.
child_launch make_child(const execution_services& svc, const execution_machine& m, uint32_t idx,
                        std::shared_ptr<const graph> g, json inputs, const std::string& agent,
                        const std::string& node, int iteration = 0) {
  child_launch out;
  auto& parent = m.record();
  auto& def = m.graph_def().steps[idx];
  auto& child_id = m.step(idx).child_id;
  auto existing = child_id.empty() || iteration > 1
                    ? caf::expected<execution_record>{make_error(
                                       persistence_errc::not_found, "new child")}
                                   : svc.db->execution(child_id);
  if (existing) {
    out.record = std::move(*existing);
    if (auto steps = svc.db->steps(child_id))
      out.steps = std::move(*steps);
  } else {
    auto& r = out.record;
    r.id = make_execution_id();
    r.graph = g->name;
    r.parent_id = parent.id;
    r.root_id = parent.root_id;
    r.depth = parent.depth + 1;
    r.parent_step = def.id;
    r.inputs = std::move(inputs);
    r.created_at = now_ms();
    r.owner_pid = svc.owner_pid;
    r.owner_start = svc.owner_start;
    r.owner = parent.owner;
    r.agent = agent;
    r.node = node;
    r.iteration = iteration;
    out.queued = make_queued_batch(r, *g);
    if (!agent.empty())
      out.queued.events.push_back(make_agent_event(
        r, event_type::agent_message,
        {{"agent", agent}, {"message", r.inputs.value("message", json{})},
         {"who", "execution:" + parent.id + "/" + def.id}}));
  }
  out.graph = std::move(g);
  return out;
}

/// A `graph` or `plan` step running `g` with its resolved `with` as inputs;
/// a repeating step's next iteration takes `next`'s carried inputs over them.
child_launch child_of(const execution_services& svc, const execution_machine& m, uint32_t idx,
                      std::shared_ptr<const graph> g, const next_iteration* next = nullptr) {
  auto& def = m.graph_def().steps[idx];
  reference_scope scope{&m.record().inputs, &m.results(), nullptr};
  auto with = resolve(def.with, scope);
  if (!with)
    return failure(message_of(with.error()));
  if (next != nullptr)
    for (auto& kv : next->carry.items())
      (*with)[kv.key()] = kv.value();
  for (auto& name : g->inputs)
    if (!with->contains(name))
      return failure("child graph input '" + name + "' is missing");
  for (auto& kv : with->items())
    if (std::find(g->inputs.begin(), g->inputs.end(), kv.key()) == g->inputs.end())
      return failure("child graph does not declare input '" + kv.key() + "'");
  int iteration = next != nullptr ? next->number : def.repeat ? 1 : 0;
  return make_child(svc, m, idx, std::move(g), std::move(*with), {}, m.record().node, iteration);
}

std::string errors_text(const std::vector<graph_error>& errors) {
  std::string msg;
  for (auto& e : errors)
    msg += " " + to_string(e) + ";";
  return msg;
}

/// A turn of `llm` step `idx`'s tool-calling loop: the stored current one
/// (`next` null, resumed), else a new one over the conversation: the step's
/// own messages (turn 1, references resolved) or `next`'s.
child_launch turn_of(const execution_services& svc, const execution_machine& m, uint32_t idx,
                     const next_iteration* next) {
  auto& def = m.graph_def().steps[idx];
  auto& child_id = m.step(idx).child_id;
  if (next == nullptr && !child_id.empty()) {
    if (auto g = stored_graph_of(svc, m, child_id))
      return make_child(svc, m, idx, std::move(g), json::object(), {}, m.record().node, 1);
    // A turn's graph holds the conversation so far: without it the stored
    // turn cannot be resumed, and turn 1 must not run in its place.
    if (svc.db->execution(child_id))
      return failure("the graph of the loop's current turn (" + child_id
                     + ") cannot be loaded from the store");
  }
  json history;
  if (next != nullptr) {
    history = next->carry.value("messages", json::array());
  } else {
    reference_scope scope{&m.record().inputs, &m.results(), nullptr};
    auto messages = resolve_messages(def.llm->messages, scope);
    if (!messages)
      return failure(message_of(messages.error()));
    history = std::move(*messages);
  }
  static const tool_table no_tools;
  auto doc = turn_graph(def, svc.tools ? *svc.tools : no_tools, history);
  auto parsed = parse_graph(doc, m.graph_def().base_dir, child_parse_options(svc, m));
  if (!parsed)
    return failure("turn " + std::to_string(next ? next->number : 1)
                   + " is not a valid graph:" + errors_text(parsed.errors));
  return make_child(svc, m, idx, parsed.value, json::object(), {}, m.record().node,
                    next ? next->number : 1);
}

} // namespace

// -- resolver ---------------------------------------------------------------------------

child_launch shell_resolver::graph_child(const execution_machine& m, uint32_t idx,
                                         const next_iteration* next) {
  auto& svc = *self_->state.svc;
  auto& def = m.graph_def().steps[idx];
  if (def.kind == step_kind::llm)
    return turn_of(svc, m, idx, next);
  auto g = def.child;
  if (!g) {
    // A registered graph named by the step: on resume the child's stored
    // graph (what it ran; the next iteration too), else the owner's newest
    // version.
    g = stored_graph_of(svc, m, m.step(idx).child_id);
    if (!g && svc.find_graph) {
      auto found = svc.find_graph(m.record().owner, def.target, child_parse_options(svc, m));
      if (!found && !found.errors.empty())
        return failure("graph '" + def.target + "':" + errors_text(found.errors));
      g = found.value;
    }
    if (!g)
      return failure("graph '" + def.target + "' is not registered on this node");
  }
  return child_of(svc, m, idx, std::move(g), next);
}

child_launch shell_resolver::stored_plan(const execution_machine& m, uint32_t idx) {
  auto& svc = *self_->state.svc;
  auto g = stored_graph_of(svc, m, m.step(idx).child_id);
  if (!g)
    return {}; // the planned graph is gone: plan again
  return child_of(svc, m, idx, std::move(g));
}

child_launch shell_resolver::planned_child(const execution_machine& m, uint32_t idx,
                                           json result) {
  auto& svc = *self_->state.svc;
  auto doc = parse_json_text(result.value("stdout", std::string{}));
  if (!doc)
    return failure("planner output is not a graph: " + message_of(doc.error()),
                   std::move(result));
  auto parsed = parse_graph(*doc, m.graph_def().base_dir, child_parse_options(svc, m));
  if (!parsed)
    return failure("planner output is not a valid graph:" + errors_text(parsed.errors),
                   std::move(result));
  return child_of(svc, m, idx, parsed.value);
}

child_launch shell_resolver::agent_step(const execution_machine& m, uint32_t idx) {
  auto& st = self_->state;
  auto& svc = *st.svc;
  auto& def = m.graph_def().steps[idx];
  // Resume the run this step started, under its id, with its stored graph.
  if (auto g = stored_graph_of(svc, m, m.step(idx).child_id))
    return make_child(svc, m, idx, std::move(g), json::object(), def.target, {});
  if (!svc.find_agent)
    return failure("agents are not available on this node");
  auto agent = svc.find_agent(m.record().owner, def.target);
  if (!agent)
    return failure(message_of(agent.error()));
  reference_scope scope{&m.record().inputs, &m.results(), nullptr};
  auto message = resolve(def.message, scope);
  if (!message)
    return failure(message_of(message.error()));
  st.agents.set(idx, std::move(*agent));
  return {}; // ask the agent for a turn
}

child_launch shell_resolver::agent_run(const execution_machine& m, uint32_t idx) {
  auto& svc = *self_->state.svc;
  auto& def = m.graph_def().steps[idx];
  auto& owner = m.record().owner;
  auto ag = svc.db->agent(owner, def.target);
  if (!ag)
    return failure(message_of(ag.error()));
  auto parsed = parse_agent_graph(*ag, svc, m.record().depth + 1, m.scope()->max_depth());
  if (!parsed)
    return failure("the graph of agent '" + def.target
                   + "' does not validate:" + errors_text(parsed.errors));
  reference_scope scope{&m.record().inputs, &m.results(), nullptr};
  auto message = resolve(def.message, scope);
  if (!message)
    return failure(message_of(message.error()));
  auto inputs = make_agent_inputs(*parsed.value, *message, *svc.db, owner, def.target);
  if (!inputs)
    return failure(message_of(inputs.error()));
  return make_child(svc, m, idx, parsed.value, std::move(*inputs), def.target, ag->node);
}

// -- functions --------------------------------------------------------------------------

void start_pooled_fn(execution_shell* self, fx::start_fn& e) {
  auto& st = self->state;
  auto fn = st.svc->fns ? st.svc->fns->find(e.name) : nullptr;
  auto flag = std::make_shared<std::atomic<bool>>(false);
  st.calls.set(e.idx, running_call{flag, nullptr});
  auto& m = *st.m;
  auto ctx = std::make_shared<fn_context>(std::move(e.with), m.record().id,
                                          m.graph_def().steps[e.idx].id, e.attempt, flag);
  auto me = caf::actor_cast<caf::actor>(self);
  auto idx = static_cast<uint64_t>(e.idx);
  int attempt = e.attempt;
  st.svc->pool->submit([me, ctx, fn, idx, attempt] {
    step_outcome out;
    try {
      auto r = (*fn)(*ctx);
      if (r)
        out.result = std::move(*r);
      else
        out.error = message_of(r.error());
    } catch (const std::exception& e) {
      out.error = std::string{"exception: "} + e.what();
    } catch (...) {
      out.error = "unknown exception";
    }
    caf::anon_send(me, done_atom::value, idx, attempt, std::move(out));
  });
}

} // namespace canopy::core
