#pragma once

// Inside the execution actor's shell (not a public header): its state, and
// the functions its files share. The shell holds what the machine must not:
// actor handles (parent, workers, worker nodes, agents), functions' stop
// flags, the response promise of an in-process stop request.

#include <atomic>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/execution/execution_actor.hpp"
#include "actors/execution/machine.hpp"

namespace canopy::core {

/// A few handles keyed by step index; executions hold one per running step at most.
template <class T>
class step_map {
public:
  T* find(uint32_t idx) {
    for (auto& kv : items_)
      if (kv.first == idx)
        return &kv.second;
    return nullptr;
  }
  void set(uint32_t idx, T x) {
    if (auto p = find(idx))
      *p = std::move(x);
    else
      items_.emplace_back(idx, std::move(x));
  }
  void erase(uint32_t idx) {
    for (auto i = items_.begin(); i != items_.end(); ++i)
      if (i->first == idx) {
        items_.erase(i);
        return;
      }
  }
  std::vector<std::pair<uint32_t, T>>& items() { return items_; }

private:
  std::vector<std::pair<uint32_t, T>> items_;
};

/// Resolves child steps over the store, the registry and the agents.
struct execution_shell_state;
using execution_shell = execution_actor::stateful_base<execution_shell_state>;

class shell_resolver : public step_resolver {
public:
  void bind(execution_shell* self) { self_ = self; }
  execution_shell* self() const { return self_; }
  child_launch graph_child(const execution_machine& m, uint32_t idx,
                           const next_iteration* next) override;
  child_launch stored_plan(const execution_machine& m, uint32_t idx) override;
  child_launch planned_child(const execution_machine& m, uint32_t idx, json result) override;
  child_launch agent_step(const execution_machine& m, uint32_t idx) override;
  child_launch agent_run(const execution_machine& m, uint32_t idx) override;

private:
  execution_shell* self_ = nullptr;
};

/// A function or a model call running on a thread of its own: a stop sets
/// the function's flag, or cancels the model call (which closes its
/// connection at once); its `done` follows either way.
struct running_call {
  std::shared_ptr<std::atomic<bool>> flag;
  std::shared_ptr<chat_call> model;
  void stop() {
    if (flag)
      flag->store(true, std::memory_order_release);
    if (model)
      model->cancel();
  }
};

struct execution_shell_state {
  /// Counts the execution out of the directory, which sweeps its entry later
  /// (its state goes as it quits, just before its attachables run: no
  /// attachable of its own).
  ~execution_shell_state();
  /// Gives the start gate's permit (or place) back, if it holds one.
  void leave_gate();
  std::shared_ptr<const execution_services> svc;
  execution_actor parent;
  shell_resolver resolver; ///< held by value: no allocation per execution
  /// Its own allocation, so that the ended execution buries it in one move
  /// (`execution_services::graves`).
  std::unique_ptr<execution_machine> m;
  step_map<caf::actor> workers; ///< step runners and child executions
  step_map<caf::actor> nodes;   ///< the worker node a step was placed on
  step_map<agent_actor> agents; ///< the agent an `agent` step asked for a turn
  step_map<running_call> calls; ///< running functions and model calls
  /// In-process stop requests' answers, for the next write that says
  /// `reply` (rare: allocated when one comes).
  std::unique_ptr<std::vector<commit_waiter>> replies;
  /// Its place in its tree (`execution_init::path`): a wait's step path
  /// is this plus the step id.
  std::string path;
  /// Why it quits: normal, or a compact stop's report (`make_compact_stop`).
  caf::error exit_reason;
  /// Its place at the start gate, from its start until its first write is
  /// committed (null before and after, and without a gate).
  std::shared_ptr<start_gate::ticket> gate_ticket;
  static const char* name;
};

/// Carries out every effect the machine appended (and its pending write).
void run_effects(execution_shell* self);

/// Submits pooled function `e.name` of step `e.idx` to the function pool.
void start_pooled_fn(execution_shell* self, fx::start_fn& e);

/// Starts the model call of `llm` step `e.idx` on a thread of its own
/// (llm_launch.cpp).
void start_llm_call(execution_shell* self, fx::start_llm& e);

/// The behavior of an execution actor (`parent` null for a root).
execution_actor::behavior_type execution_behavior(execution_shell* self, execution_init init,
                                                  std::shared_ptr<const execution_services> svc,
                                                  execution_actor parent);

} // namespace canopy::core
