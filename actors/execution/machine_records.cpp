// The execution machine: the records and events it writes, and its writes.

#include "actors/execution/machine.hpp"

namespace canopy::core {

write_batch& execution_machine::batch_or_new() {
  if (!batch_)
    batch_ = std::make_unique<write_batch>();
  return *batch_;
}

void execution_machine::emit(event_type type, int64_t now, execution_status status,
                             step_reason reason, json data) {
  batch_or_new().events.push_back(
    make_execution_event(rec_, type, now, status, reason, std::move(data)));
}

void execution_machine::emit_step(event_type type, int64_t now, const std::string& step,
                                  step_status status, step_reason reason, json data) {
  batch_or_new().events.push_back(
    make_step_event(rec_, type, now, step, status, reason, std::move(data)));
}

void execution_machine::emit_note(event_type type, int64_t now, const std::string& step,
                                  json data) {
  batch_or_new().events.push_back(make_step_event(rec_, type, now, step, std::move(data)));
}

json execution_machine::attempt_data(int attempt) {
  json data(json::value_t::object);
  data.get_ref<json::object_t&>().emplace("attempt", attempt);
  return data;
}

const json* execution_machine::result_of(const std::string& step) const {
  auto i = g_->index.find(step);
  if (i == g_->index.end() || steps_[i->second].phase != step_phase::completed)
    return nullptr;
  return &steps_[i->second].result;
}

bool execution_machine::skipped(const std::string& step) const {
  auto i = g_->index.find(step);
  return i != g_->index.end() && steps_[i->second].phase == step_phase::skipped;
}

const std::string& execution_machine::prompt(uint32_t idx) const {
  static const std::string none;
  if (!side_)
    return none;
  auto i = side_->prompts.find(idx);
  return i == side_->prompts.end() ? none : i->second;
}

step_record execution_machine::step_record_of(uint32_t idx) const {
  auto& s = steps_[idx];
  auto& def = g_->steps[idx];
  step_record r;
  r.execution_id = rec_.id;
  r.step = def.id;
  r.status = status_of(s.phase);
  r.attempt = s.attempt;
  r.result = s.result; // a completed step's result, or a failed attempt's output
  r.error = s.error;
  r.reason = s.reason;
  r.node = s.node;
  r.child_id = s.child_id;
  r.pid = s.pid;
  r.pid_start = s.pid_start;
  r.started_at = s.started_at;
  r.ended_at = s.ended_at;
  r.deadline = s.deadline;
  r.prompt = prompt(idx);
  return r;
}

void execution_machine::put_step(uint32_t idx) {
  batch_or_new().steps.push_back(step_record_of(idx));
}

void execution_machine::put_execution() {
  batch_or_new().executions.push_back(rec_);
}

void execution_machine::put_counters() {
  if (!scope_dirty_)
    return;
  scope_dirty_ = false;
  for (auto& c : scope_->snapshot())
    batch_or_new().counters.push_back(std::move(c));
}

void execution_machine::put_snapshot() {
  if (!snapshot_)
    return;
  batch_or_new().append(std::move(*snapshot_));
  snapshot_.reset();
}

void execution_machine::append_history(int64_t now) {
  // An agent's run completed: its message and reply join the agent's history
  // in the run's final commit.
  auto reply = rec_.outputs.is_object() ? rec_.outputs.value("reply", json{}) : json{};
  history_entry in;
  in.owner = rec_.owner;
  in.agent = rec_.agent;
  in.role = "user";
  in.content = rec_.inputs.is_object() ? rec_.inputs.value("message", json{}) : json{};
  in.execution_id = rec_.id;
  in.time = rec_.created_at; // when the message arrived
  history_entry out = in;
  out.role = "agent";
  out.content = reply;
  out.time = now;
  auto& b = batch_or_new();
  b.history.push_back(std::move(in));
  b.history.push_back(std::move(out));
  b.events.push_back(
    make_event(rec_, event_type::agent_reply, now, {{"agent", rec_.agent}, {"reply", reply}}));
}

void execution_machine::stop_clock(int64_t now) {
  if (own_scope_ && run_started_ != 0) {
    scope_->add_run_ms(now - run_started_);
    run_started_ = 0;
    scope_dirty_ = true;
  }
}

void execution_machine::flush(after_write then) {
  if (phase_ == exec_phase::done)
    return; // nothing after quit
  put_counters();
  if ((!batch_ || batch_->empty()) && then == after_write::none && !reply_pending_)
    return;
  fx::write w;
  if (batch_) {
    w.batch = std::move(*batch_);
    batch_.reset();
  }
  w.completed = std::move(batch_completed_);
  batch_completed_.clear();
  w.then = then;
  // Every write claims the tree (store.hpp, "Leases and fencing"); a resumed
  // execution's first one takes it over; a root's final one is its last.
  auto& claim = w.batch.lease;
  claim.root = rec_.root_id;
  if (acquire_lease_) {
    claim.acquire = true;
    claim.epoch = lease_epoch_;
    acquire_lease_ = false;
  }
  claim.last = then == after_write::report && !has_parent_;
  w.reply = reply_pending_;
  reply_pending_ = false;
  // A child spawned since the last write has its first record (`queued`) in
  // this batch: the write goes before the spawn. Otherwise the child's own
  // first write (`running`) could reach the writer first, and this older
  // record would overwrite it (the tree then showed the child `queued`
  // while it ran).
  auto at = effects_.end();
  for (auto i = effects_.end(); i != effects_.begin();) {
    --i;
    if (effect_as<fx::write>(*i))
      break;
    if (effect_as<fx::spawn_child>(*i))
      at = i;
  }
  effects_.insert(at, std::make_unique<fx::write>(std::move(w)));
}

} // namespace canopy::core
