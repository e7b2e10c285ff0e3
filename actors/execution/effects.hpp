#pragma once

// What the execution machine asks its shell to do. Each effect is a small
// struct; `effect` is their variant. The machine appends them in the order
// they must happen; the shell carries them out in that order.

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "actors/execution/outcomes.hpp"
#include "actors/runner_spec.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

/// What happens once a write is acknowledged.
enum class after_write : uint8_t {
  none,
  report, ///< the final record: report to the parent, then quit
};

/// Timers the machine schedules; each comes back as the matching input.
enum class timer_kind : uint8_t { retry, wake, timeout, deadline, abandon, wait_due };

namespace fx {

struct acquire_admission {};
/// A slot pool: the node's, or the own pool (`max_parallel`) of a tool or a
/// model provider.
struct pool_ref {
  enum class of : uint8_t { node, tool, provider };
  of kind = of::node;
  std::string name; ///< the tool's or the provider's name
};
/// Ask pool `pool` for `ticket`.
struct acquire_slot {
  uint32_t ticket;
  pool_ref pool;
};
/// Give `ticket` back to its own pool (unless `own` is the node's) and, when
/// `node`, to the node's pool.
struct release_slot {
  uint32_t ticket;
  pool_ref own;
  bool node = true;
};
/// Give an unwanted grant back to the pool that sent it.
struct return_grant {
  uint32_t ticket;
};
/// Ask the cluster for a node for the attempt.
struct place {
  uint32_t idx;
  int32_t attempt;
  uint32_t ticket;
  std::string tool;
  std::string pin;
};
/// Give a placement back.
struct release_place {
  std::string node;
  uint32_t ticket;
};
/// A tool step placed on a worker: the worker builds its argv.
struct remote_tool {
  std::string tool;
  std::string with_json;
  std::string inputs_json;
  bool grace_set = false;
};
/// Start a step runner here, or (remote) on the node the step was placed on.
struct spawn_runner {
  uint32_t idx;
  runner_spec spec;
  bool remote = false;
  remote_tool tool;
};
/// Run pooled function `name` with `with`.
struct start_fn {
  uint32_t idx;
  int32_t attempt;
  std::string name;
  json with;
};
/// Set the stop token of step `idx`'s running function.
struct set_fn_stop {
  uint32_t idx;
};
/// Deliver the matching input after `delay_ms`.
struct timer {
  timer_kind kind;
  uint32_t idx;
  int32_t attempt;
  int64_t delay_ms;
  int64_t ms; ///< `wake`: how long it slept
};
/// Spawn step `idx`'s child execution (linked, monitored) from `record`
/// (new, already in the machine's next write, or stored: resume) and `steps`.
/// `turn` (non-zero): tell the agent that its granted turn's run started.
struct spawn_child {
  uint32_t idx;
  std::shared_ptr<const canopy::core::graph> graph;
  execution_record record;
  std::vector<step_record> steps;
  uint64_t turn = 0;
};
/// Ask the step's agent for a turn.
struct request_turn {
  uint32_t idx;
  int32_t attempt;
};
/// Give a granted turn back to the step's agent.
struct release_turn {
  uint32_t idx;
  uint64_t turn;
};
/// Stop step `idx`'s worker (runner or child execution).
struct send_exit {
  uint32_t idx;
  step_reason reason;
  stop_mode mode;
};
/// Forget step `idx`'s worker (unlink, demonitor): its node was lost.
struct drop_worker {
  uint32_t idx;
};
/// Ask execution `owner` (whose limit refused) to stop with `reason`.
struct stop_owner {
  std::string owner;
  step_reason reason;
};
/// Commit `batch`; once acknowledged, feed `write_acknowledged(completed, then)`.
struct write {
  write_batch batch;
  std::vector<uint32_t> completed;
  after_write then = after_write::none;
  bool reply = false; ///< answer the stop requests this write stores
};
/// Tell the parent how this execution ended, with the subtree's snapshot.
struct report {
  std::string parent_step;
  execution_status status;
  json outputs;
  std::string error;
  write_batch snapshot;
  /// Events of the executions of this subtree that a stop from above ended
  /// compactly (none of their records is in `snapshot`): the parent counts
  /// them into its `subtree_stop`.
  uint64_t stopped_events = 0;
  /// A completed iteration's step results (`iteration_results`); else null.
  json steps;
};
/// Call step `idx`'s model with `messages` (its `llm.messages`, resolved) on
/// a thread of its own; the text streams back as output lines `{stream:
/// "model", text}`, the result as `done`. `set_fn_stop` cancels the call.
struct start_llm {
  uint32_t idx;
  int32_t attempt;
  json messages;
};
/// Register step `idx`'s wait for signal `signal` with the signal desk,
/// which offers it a buffered signal (`signal_offered`) or says there is
/// none (`wait_armed`).
struct arm_wait {
  uint32_t idx;
  int32_t attempt;
  std::string signal;
};
/// Step `idx` no longer waits: the desk forgets it.
struct disarm_wait {
  uint32_t idx;
};
/// The execution is over.
struct quit {};
/// Feed `resume_pump` on a message of its own: the steps started so far
/// are written (and their writes committed) while the next ones start.
struct yield {};

} // namespace fx

/// The large effects travel boxed, so that an `effect` stays small (~90
/// bytes, not ~480): a halt appends one per worker, and every input's
/// effects are one allocation.
template <class T>
using boxed = std::unique_ptr<T>;

using effect = std::variant<fx::acquire_admission, fx::acquire_slot, fx::release_slot,
                            fx::return_grant, fx::place, fx::release_place,
                            boxed<fx::spawn_runner>, fx::start_fn, fx::start_llm,
                            fx::set_fn_stop, fx::timer, boxed<fx::spawn_child>, fx::request_turn, fx::release_turn,
                            fx::send_exit, fx::drop_worker, fx::stop_owner, boxed<fx::write>,
                            boxed<fx::report>, fx::arm_wait, fx::disarm_wait, fx::quit,
                            fx::yield>;

/// True for the effects that travel boxed.
template <class T>
constexpr bool is_boxed_v = std::is_same_v<T, fx::spawn_runner>
                            || std::is_same_v<T, fx::spawn_child>
                            || std::is_same_v<T, fx::write> || std::is_same_v<T, fx::report>;

/// The effect `e` as a `T`, boxed or not; null when it is another one.
template <class T>
const T* effect_as(const effect& e) {
  if constexpr (is_boxed_v<T>) {
    auto p = std::get_if<boxed<T>>(&e);
    return p ? p->get() : nullptr;
  } else {
    return std::get_if<T>(&e);
  }
}

template <class T>
T* effect_as(effect& e) {
  return const_cast<T*>(effect_as<T>(static_cast<const effect&>(e)));
}

} // namespace canopy::core
