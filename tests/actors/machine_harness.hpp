#pragma once

// A harness for the execution machine: graphs from JSON, a resolver over
// plain graphs, and helpers to look at effects. No CAF, no store, no clock.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/execution/machine.hpp"
#include "persistence/conversation.hpp"

namespace canopy::core::test {

/// Parses `doc` (builtin functions, one tool `t`, inline commands allowed).
inline std::shared_ptr<const graph> graph_of(const json& doc) {
  parse_options opts;
  opts.tools.insert("t");
  auto r = parse_graph(doc, "/tmp", opts);
  REQUIRE(r);
  return r.value;
}

/// Children run their inline graph; agents' runs run `agent_graph`.
class plain_resolver : public step_resolver {
public:
  std::shared_ptr<const graph> agent_graph;
  bool agent_missing = false;
  int children = 0;
  /// Children the store holds already, by id: a resume finds them.
  std::map<std::string, execution_record> stored_children;
  /// The iteration of each child made here, by id.
  std::map<std::string, int32_t> iterations;
  /// Their stored steps, by child id.
  std::map<std::string, std::vector<step_record>> stored_steps;

  /// The carried inputs each new iteration was given, in order.
  std::vector<json> carried;

  child_launch graph_child(const execution_machine& m, uint32_t idx,
                           const next_iteration* next) override {
    if (next != nullptr)
      carried.push_back(next->carry);
    auto& def = m.graph_def().steps[idx];
    if (def.kind == step_kind::llm) {
      // A turn of a tool-calling loop, over tool `t` (no parameters).
      auto history = next != nullptr ? next->carry["messages"] : def.llm->messages;
      return child(m, idx, graph_of(turn_graph(def, tool_table{}, history)), next);
    }
    return child(m, idx, def.child, next);
  }
  child_launch stored_plan(const execution_machine&, uint32_t) override { return {}; }
  child_launch planned_child(const execution_machine& m, uint32_t idx, json result) override {
    if (!result.contains("stdout")) {
      child_launch out;
      out.error = "planner output is not a graph";
      out.error_result = std::move(result);
      return out;
    }
    return child(m, idx, graph_of(json::parse(result["stdout"].get<std::string>())));
  }
  child_launch agent_step(const execution_machine&, uint32_t) override {
    child_launch out;
    if (agent_missing)
      out.error = "no agent";
    return out;
  }
  child_launch agent_run(const execution_machine& m, uint32_t idx) override {
    return child(m, idx, agent_graph);
  }

  child_launch child(const execution_machine& m, uint32_t idx, std::shared_ptr<const graph> g,
                     const next_iteration* next = nullptr) {
    child_launch out;
    if (!g) {
      out.error = "no graph";
      return out;
    }
    out.graph = std::move(g);
    auto stored = stored_children.find(m.step(idx).child_id);
    if (next == nullptr && stored != stored_children.end()) {
      out.record = stored->second; // resumed under its id: nothing queued
      if (auto s = stored_steps.find(stored->first); s != stored_steps.end())
        out.steps = s->second;
      return out;
    }
    out.record.id = m.step(idx).child_id.empty() || next != nullptr
                      ? "child-" + std::to_string(++children)
                      : m.step(idx).child_id;
    // A child run again under its id (a retry) is the same iteration.
    auto known = iterations.find(out.record.id);
    out.record.iteration = next != nullptr                     ? next->number
                           : known != iterations.end()         ? known->second
                           : is_loop(m.graph_def().steps[idx]) ? 1
                                                                : 0;
    iterations[out.record.id] = out.record.iteration;
    out.record.parent_id = m.record().id;
    out.record.root_id = m.record().root_id;
    out.record.depth = m.record().depth + 1;
    out.queued.executions.push_back(out.record);
    return out;
  }
};

/// Copies of effects (a boxed effect is copied into a new box).
struct effect_copier {
  template <class T>
  effect operator()(const boxed<T>& x) const {
    return std::make_unique<T>(*x);
  }
  template <class T>
  effect operator()(const T& x) const {
    return x;
  }
};

/// A copy of `e`.
inline effect copy_of(const effect& e) {
  return std::visit(effect_copier{}, e);
}

/// Appends a copy of every effect of `from` to `to`.
inline void append_copies(std::vector<effect>& to, const std::vector<effect>& from) {
  for (auto& e : from)
    to.push_back(copy_of(e));
}

/// One machine with everything it needs, and every effect it emitted.
struct machine_fixture {
  std::shared_ptr<machine_env> env = std::make_shared<machine_env>();
  plain_resolver resolver;
  std::unique_ptr<execution_machine> m;
  std::shared_ptr<const graph> g;
  std::vector<effect> all;
  int64_t now = 1'000'000;

  explicit machine_fixture(const json& doc, bool parent = false,
                           std::vector<step_record> stored = {}, uint64_t max_steps = 1000,
                           json inputs = json::object()) {
    g = graph_of(doc);
    machine_init init;
    init.record.id = "e1";
    init.record.root_id = parent ? "r0" : "e1";
    init.record.parent_id = parent ? "r0" : "";
    init.record.parent_step = parent ? "s" : "";
    init.record.inputs = std::move(inputs);
    init.graph = g;
    init.steps = std::move(stored);
    init.token = std::make_shared<halt_token>();
    init.scope = std::make_shared<limit_scope>("e1", nullptr, max_steps, g->limits.budget,
                                               std::nullopt, tree_counters{});
    init.own_scope = true;
    init.has_parent = parent;
    m = std::make_unique<execution_machine>(env, std::move(init), &resolver);
  }

  /// The effects of the last inputs (with their pending write).
  std::vector<effect> fx() {
    auto out = m->flush_effects();
    append_copies(all, out);
    return out;
  }

  uint32_t idx(const std::string& id) const { return static_cast<uint32_t>(g->index.at(id)); }
  const execution_machine::step_state& step(const std::string& id) const {
    return m->step(idx(id));
  }
  /// Acknowledges every write in `xs`, in order; @returns the new effects.
  std::vector<effect> ack(const std::vector<effect>& xs) {
    for (auto& e : xs)
      if (auto w = effect_as<fx::write>(e))
        m->write_acknowledged(w->completed, w->then, ++now);
    return fx();
  }
  /// Acknowledges writes until none is left; @returns every effect seen.
  std::vector<effect> settle(std::vector<effect> xs) {
    std::vector<effect> seen;
    append_copies(seen, xs);
    for (int i = 0; i < 100; ++i) {
      auto next = ack(xs);
      if (next.empty())
        break;
      append_copies(seen, next);
      xs = std::move(next);
    }
    return seen;
  }
};

template <class T>
size_t count(const std::vector<effect>& xs) {
  size_t n = 0;
  for (auto& e : xs)
    n += effect_as<T>(e) ? 1 : 0;
  return n;
}

template <class T>
const T* first(const std::vector<effect>& xs) {
  for (auto& e : xs)
    if (auto p = effect_as<T>(e))
      return p;
  return nullptr;
}

/// Every event written by the writes in `xs`, in order.
inline std::vector<event_record> written_events(const std::vector<effect>& xs) {
  std::vector<event_record> out;
  for (auto& e : xs)
    if (auto w = effect_as<fx::write>(e)) {
      auto b = w->batch;
      b.take_events(out);
    }
  return out;
}

/// Every event type written by the writes in `xs`, in order.
inline std::vector<std::string> event_types(const std::vector<effect>& xs) {
  std::vector<std::string> out;
  for (auto& ev : written_events(xs))
    out.push_back(to_string(ev.type));
  return out;
}

inline bool has_event(const std::vector<effect>& xs, const std::string& type) {
  auto types = event_types(xs);
  return std::find(types.begin(), types.end(), type) != types.end();
}

} // namespace canopy::core::test
