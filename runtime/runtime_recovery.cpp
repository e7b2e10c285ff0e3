// Recovering the executions a dead owner left live, when a home opens.

#include "runtime/runtime.hpp"

#include <sys/types.h>

#include <csignal>

#include "actors/execution/machine.hpp"
#include "actors/subprocess.hpp"

namespace canopy {

// -- free functions ------------------------------------------------------------

namespace {

bool owner_alive(const execution_record& rec) {
  if (rec.owner_pid <= 0)
    return false;
  auto start = process_start_time(rec.owner_pid);
  return start != 0 && start == rec.owner_start;
}

} // namespace

caf::expected<std::vector<std::string>> recover_interrupted(store& db) {
  auto live = db.live();
  if (!live)
    return live.error();
  std::vector<std::string> recovered;
  write_batch batch;
  auto now = now_ms();
  for (auto& rec : *live) {
    if (owner_alive(rec))
      continue;
    auto steps = db.steps(rec.id);
    if (!steps)
      return steps.error();
    for (auto& s : *steps) {
      if (s.status != step_status::running && s.status != step_status::queued)
        continue;
      // The dead owner's subprocess group may live on: kill it, unless the
      // pid now belongs to another process (its start time differs).
      if (s.pid > 0) {
        auto start = process_start_time(s.pid);
        bool leader_is_ours = start != 0 && start == s.pid_start;
        bool leader_gone = start == 0;
        if (leader_is_ours || leader_gone)
          ::kill(static_cast<pid_t>(-s.pid), SIGKILL);
      }
      reset_step_record(s, step_reason::interrupted, now);
      batch.events.push_back(
        make_event(rec, "step.pending", now, s.step, "pending", "interrupted"));
      batch.steps.push_back(std::move(s));
    }
    rec.status = execution_status::stopped;
    rec.reason = "interrupted";
    rec.ended_at = now;
    batch.events.push_back(
      make_event(rec, "execution.stopped", now, {}, "stopped", "interrupted"));
    recovered.push_back(rec.id);
    batch.executions.push_back(std::move(rec));
  }
  // The store answers the stop requests of what this batch ends, and any
  // request an older release left pending for an execution that ended.
  if (auto pending = db.pending_stops())
    for (auto& r : *pending)
      if (auto target = db.execution(r.target); !target || is_terminal(target->status))
        batch.settle_stops.push_back(r.target);
  if (!batch.empty())
    if (auto err = db.commit(batch))
      return err;
  return recovered;
}

} // namespace canopy
