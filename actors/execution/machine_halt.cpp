// The execution machine: stops and the halt sequence (start nothing new,
// stop every worker, wait for them, one snapshot, report, quit).

#include "actors/execution/machine.hpp"

#include <algorithm>

namespace canopy::core {

namespace {

/// A step in `p` has a live worker (runner or child execution) to stop.
bool has_worker(step_phase p) {
  return p == step_phase::running_runner || p == step_phase::running_child;
}

} // namespace

// -- stop inputs ----------------------------------------------------------------------------

void execution_machine::stop(step_reason reason, stop_mode mode, bool from_above,
                             int64_t now) {
  // Too late once finishing: the store answers the request when the final
  // record is committed.
  if (phase_ >= exec_phase::finishing)
    return;
  // From the parent: hand the snapshot up instead of committing it.
  if (from_above && phase_ < exec_phase::halting)
    from_above_ = true;
  begin_halt(execution_status::stopped, reason, reason, mode, now);
  flush();
}

bool execution_machine::stop_request(const stop_record& req, write_batch batch, int64_t now) {
  // Finishing or done: the final record is written or on its way, and the
  // actor may quit before a later write is acknowledged. The requester
  // stores the request through the writer; the store answers it
  // `no_execution` in the commit that makes this execution terminal.
  if (phase_ >= exec_phase::finishing)
    return false;
  // Earlier records reach the writer first: the log shows every step started
  // before the request, and none after it. The request and what it starts
  // (`stopping`, or the whole snapshot when nothing runs) are one write, and
  // its acknowledgement answers the caller: whoever reads the execution after
  // the answer sees it stopping at least.
  // Finishing already: the store answers it `no_execution` once the final
  // record is committed.
  // Earlier records go in a write of their own, so the request's batch
  // holds the request first and what it causes behind it (the store puts
  // its `stop.requested` at the head of that batch's events).
  flush();
  batch_or_new().append(std::move(batch));
  reply_pending_ = true;
  if (phase_ != exec_phase::finishing)
    begin_halt(execution_status::stopped, step_reason::requested, step_reason::requested,
               req.force ? stop_mode::force : stop_mode::graceful, now);
  flush();
  return true;
}

void execution_machine::parent_lost(int64_t now) {
  if (phase_ == exec_phase::done)
    return;
  begin_halt(execution_status::stopped, step_reason::parent_stopped,
             step_reason::parent_stopped, stop_mode::graceful, now);
}

// -- halt sequence --------------------------------------------------------------------------

step_reason execution_machine::child_reason() const {
  return final_status_ == execution_status::failed ? step_reason::sibling_failed
                                                   : step_reason::parent_stopped;
}

void execution_machine::begin_halt(execution_status final_status, step_reason reason,
                                   step_reason step_why, stop_mode mode, int64_t now) {
  if (phase_ >= exec_phase::finishing)
    return;
  if (phase_ == exec_phase::halting) {
    // A forced stop may overtake a graceful one.
    if (mode == stop_mode::force && mode_ != stop_mode::force) {
      mode_ = stop_mode::force;
      for (uint32_t i = 0; i < steps_.size(); ++i)
        if (has_worker(steps_[i].phase))
          effects_.emplace_back(fx::send_exit{i, child_reason(), stop_mode::force});
    }
    return;
  }
  phase_ = exec_phase::halting;
  token_->set();
  final_status_ = final_status;
  final_reason_ = reason;
  step_reason_ = step_why;
  mode_ = mode;
  ready_.clear();
  // The execution a stop reaches says so durably; its descendants go straight
  // to `stopped` in the one snapshot.
  if (final_status == execution_status::stopped && !from_above_) {
    rec_.status = execution_status::stopping;
    rec_.reason = reason;
    emit(event_type::execution_stopping, now, execution_status::stopping, rec_.reason);
    put_execution();
  }
  // One allocation for the exits below, not one per doubling (an effect is
  // large): this runs once per execution of a stopped tree.
  effects_.reserve(effects_.size() + steps_.size() + 2);
  for (uint32_t i = 0; i < steps_.size(); ++i) {
    auto& s = steps_[i];
    if (has_worker(s.phase))
      effects_.emplace_back(fx::send_exit{i, child_reason(), mode});
    if (s.phase == step_phase::running_fn) {
      effects_.emplace_back(fx::set_fn_stop{i});
      // A function that ignores its stop token cannot hold the stop forever.
      auto& grace = g_->steps[i].grace;
      auto wait = mode == stop_mode::force ? 0 : (grace.interrupt + grace.terminate).count();
      effects_.emplace_back(fx::timer{timer_kind::abandon, i, s.attempt, wait, 0});
    }
  }
  try_complete_halt(now);
  flush();
}

bool execution_machine::halt_waiting() const {
  return std::any_of(steps_.begin(), steps_.end(), [](const step_state& s) {
    return has_worker(s.phase) || s.phase == step_phase::running_fn
           || s.phase == step_phase::placing;
  });
}

// The rule of `reset_step_record` (persistence/records.hpp) on a step's
// state: the same steps reset (`is_active`), the same fields change (phase
// `idle`, that is `pending`; reason; ended_at), so the record `put_step`
// writes is the one that rule makes of the record before. What only a live
// step holds (its slots, its wait) is released here too.
bool execution_machine::reset_in_memory(uint32_t idx, step_reason reason, int64_t now) {
  auto& s = steps_[idx];
  if (!is_active(s.phase))
    return false;
  if (s.phase == step_phase::waiting_slot && g_->steps[idx].kind == step_kind::llm)
    unreserve(idx); // it never called the model
  leave_waiting(idx);
  release_slots(idx);
  s.phase = step_phase::idle;
  s.reason = reason;
  s.ended_at = now;
  return true;
}

bool execution_machine::reset_to_pending(uint32_t idx, step_reason reason, int64_t now,
                                         json event_data) {
  if (!reset_in_memory(idx, reason, now))
    return false;
  emit_step(event_type::step_pending, now, g_->steps[idx].id, step_status::pending, reason,
       std::move(event_data));
  put_step(idx);
  return true;
}

void execution_machine::try_complete_halt(int64_t now) {
  if (phase_ != exec_phase::halting || halt_waiting())
    return;
  phase_ = exec_phase::finishing;
  // Stopped from above: counted into the subtree record, not written. Not
  // one still being created (its parent may delete it), nor an agent's run
  // (its agent's index of live runs is kept per record).
  if (from_above_ && has_parent_ && rec_.started_at != 0 && rec_.agent.empty()
      && final_status_ == execution_status::stopped) {
    complete_halt_compactly(now);
    return;
  }
  for (uint32_t i = 0; i < steps_.size(); ++i)
    reset_to_pending(i, step_reason_, now);
  rec_.status = final_status_;
  rec_.reason = final_reason_;
  rec_.error = error_;
  rec_.ended_at = now;
  rec_.outputs = nullptr;
  stop_clock(now);
  auto type = final_status_ == execution_status::failed ? event_type::execution_failed
                                                        : event_type::execution_stopped;
  emit(type, now, final_status_, rec_.reason,
       error_.empty() ? json(nullptr) : json{{"error", error_}});
  // The store answers the stop requests of every execution this snapshot
  // ends (`stop.handled`), in the same transaction.
  put_execution();
  // Children stopped with us handed us their final batches: one transaction.
  put_snapshot();
  // The descendants a stop from above ended compactly: one record stands
  // for all of them, committed with this execution's own (the store resolves
  // it for every reader).
  if (stopped_below_ > 0 && !(from_above_ && has_parent_)) {
    subtree_stop ss;
    ss.target = rec_.id;
    ss.root_id = rec_.root_id;
    ss.child_reason = child_reason();
    ss.time = now;
    ss.events = stopped_below_;
    batch_or_new().subtree_stops.push_back(std::move(ss));
    stopped_below_ = 0;
  }
  if (from_above_ && has_parent_) {
    put_counters();
    report_and_quit();
    return;
  }
  flush(after_write::report);
}

void execution_machine::complete_halt_compactly(int64_t now) {
  // What the per-node snapshot would write, counted instead: one
  // `step.pending` per active step and one `execution.stopped`. The store
  // derives the same from the stored records (`subtree_stop`).
  uint64_t events = 1;
  for (uint32_t i = 0; i < steps_.size(); ++i)
    events += reset_in_memory(i, step_reason_, now) ? 1 : 0;
  stopped_below_ += events;
  rec_.status = execution_status::stopped;
  rec_.reason = final_reason_;
  rec_.ended_at = now;
  rec_.outputs = nullptr;
  stop_clock(now);
  // Records not yet written (and those of children that reported per node)
  // still travel up and are committed before the parent's subtree record.
  put_snapshot();
  put_counters();
  report_and_quit();
}

void execution_machine::report_and_quit() {
  if (has_parent_) {
    fx::report r{rec_.parent_step, rec_.status, rec_.outputs, rec_.error, write_batch{}, 0,
                 nullptr};
    if (rec_.iteration > 0 && rec_.status == execution_status::completed) {
      // What the repeating parent step decides with (`until`, `carry`).
      std::vector<step_record> settled;
      for (uint32_t i = 0; i < steps_.size(); ++i)
        if (is_settled(steps_[i].phase))
          settled.push_back(step_record_of(i));
      r.steps = iteration_results(settled);
    }
    if (from_above_) {
      r.stopped_events = stopped_below_;
      stopped_below_ = 0;
    }
    if (from_above_ && batch_ && !batch_->empty()) {
      r.snapshot = std::move(*batch_);
      batch_.reset();
    }
    effects_.emplace_back(std::make_unique<fx::report>(std::move(r)));
  }
  effects_.emplace_back(fx::quit{});
  phase_ = exec_phase::done;
}

} // namespace canopy::core
