// Executions through the runtime: start, resume, stop, delete and prune them,
// the handle a caller holds, and subscriptions to the event log.

#include "runtime/node/runtime.hpp"

#include <future>
#include <thread>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/event_forwarder.hpp"
#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/stop_protocol.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"
#include "runtime/node/runtime_detail.hpp"

namespace canopy::core {

using runtime_detail::commit_bound;

// -- free functions ------------------------------------------------------------

caf::error check_inputs(const graph& g, const json& inputs) {
  if (!inputs.is_object())
    return make_error(runtime_errc::invalid_input, "inputs must be a JSON object");
  for (auto& name : g.inputs)
    if (!inputs.contains(name))
      return make_error(runtime_errc::invalid_input,
                        "missing input '" + name + "' (graph '" + g.name + "' declares it)");
  for (auto& kv : inputs.items())
    if (std::find(g.inputs.begin(), g.inputs.end(), kv.key()) == g.inputs.end())
      return make_error(runtime_errc::invalid_input,
                        "undeclared input '" + kv.key() + "' (graph '" + g.name
                          + "' does not declare it)");
  return caf::none;
}

// -- subscription -------------------------------------------------------------

subscription make_subscription(caf::actor_system& sys, const store_writer_actor& writer,
                               std::shared_ptr<store> db,
                               std::function<void(const event_record&)> f, std::string root_id) {
  subscription s;
  s.writer_ = writer;
  s.subscriber_ = spawn_event_forwarder(sys, writer, std::move(db), std::move(f),
                                        std::move(root_id));
  return s;
}

subscription::~subscription() {
  cancel();
}

void subscription::cancel() {
  if (!subscriber_)
    return;
  // Drain: the writer answers after sending every committed event, the
  // forwarder after delivering everything in its mailbox.
  auto& sys = subscriber_->home_system();
  (void) blocking_request(sys, writer_, std::nullopt, unsubscribe_atom::value, subscriber_);
  (void) blocking_request(sys, subscriber_, std::nullopt, flush_atom::value);
  caf::anon_send_exit(subscriber_, caf::exit_reason::user_shutdown);
  await_down(subscriber_);
  subscriber_ = nullptr;
  writer_ = nullptr;
}

void subscription::drain() const {
  if (!subscriber_)
    return;
  // The writer sends a commit's events in the handler that commits: once it
  // answers, every event committed before is in the forwarder's mailbox,
  // and the forwarder answers after delivering them.
  auto& sys = subscriber_->home_system();
  (void) blocking_request(sys, writer_, std::nullopt, sync_atom::value);
  (void) blocking_request(sys, subscriber_, std::nullopt, flush_atom::value);
}

// -- execution handle --------------------------------------------------------------

caf::expected<execution_record> execution_handle::wait() const {
  if (actor_) {
    caf::error reason;
    await_down(actor_, std::nullopt, &reason);
    // An execution quits normally once its end is recorded; any other reason
    // is what kept it from recording (e.g. `store_busy`).
    if (reason && reason != caf::exit_reason::normal)
      return reason;
  }
  return status();
}

bool execution_handle::wait_for(millis timeout) const {
  if (!actor_)
    return true;
  return await_down(actor_, timeout);
}

caf::expected<execution_record> execution_handle::status() const {
  return rt_->db()->execution(id_);
}

bool execution_handle::running() const {
  return actor_ && !actor_->getf(caf::abstract_actor::is_terminated_flag);
}

subscription execution_handle::subscribe(std::function<void(const event_record&)> f) const {
  return make_subscription(rt_->system(), rt_->writer_, rt_->db_, std::move(f), root_id_);
}

caf::expected<stop_ticket> execution_handle::stop(stop_mode mode) const {
  return rt_->stop(id_, mode, "library");
}

// -- executions ------------------------------------------------------------------

bool runtime::wait_settled(const std::string& id, millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto settled = [&] {
    auto rec = db_->execution(id);
    return !rec || !is_stoppable(rec->status);
  };
  if (auto a = svc_->directory->find(id)) {
    // Live here: its final record is committed before its actor is down.
    if (!await_down(a, timeout))
      return settled();
  }
  // Elsewhere: poll the store.
  for (millis pause{2};; pause = std::min(pause * 2, millis{50})) {
    if (settled())
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(pause);
  }
}

caf::expected<execution_handle> runtime::attach(const std::string& id) {
  auto rec = db_->execution(id);
  if (!rec)
    return rec.error();
  execution_handle h;
  h.rt_ = this;
  h.id_ = rec->id;
  h.root_id_ = rec->root_id;
  h.actor_ = svc_->directory->find(id);
  return h;
}

caf::expected<execution_handle> runtime::start(std::shared_ptr<const graph> g, json inputs,
                                               const start_options& opts) {
  if (auto err = check_inputs(*g, inputs))
    return err;
  if (auto bad = check_start_signals(*g, opts.signals); !bad.empty())
    return make_error(runtime_errc::invalid_input, to_string(bad.front()));
  execution_init init;
  auto& r = init.record;
  r.id = make_execution_id();
  r.graph = g->name;
  r.root_id = r.id;
  r.inputs = std::move(inputs);
  r.created_at = now_ms();
  r.owner_pid = svc_->owner_pid;
  r.owner_start = svc_->owner_start;
  r.owner = opts.owner;
  r.graph_version = opts.graph_version;
  init.graph = std::move(g);
  // Durable before the id is handed out, with the signals it carries.
  auto batch = make_queued_batch(r, *init.graph);
  for (auto& sig : start_signals(r.id, opts.signals, opts.signals_from, r.created_at))
    add_received(batch, r, std::move(sig));
  if (auto err = commit_and_wait(writer_, commit_bound(*db_), std::move(batch)))
    return err;
  execution_handle h;
  h.rt_ = this;
  h.id_ = r.id;
  h.root_id_ = r.id;
  h.actor_ = caf::actor_cast<caf::actor>(spawn_execution(*sys_, std::move(init), svc_));
  track(h.actor_);
  return h;
}

caf::expected<prune_result> runtime::prune(const retention_rules& rules, int64_t now) {
  return canopy::core::prune(*db_, rules, now, false, [this](write_batch batch) {
    return commit_and_wait(writer_, commit_bound(*db_), std::move(batch));
  });
}

caf::error runtime::delete_tree(const std::string& id) {
  auto rec = db_->execution(id);
  if (!rec)
    return rec.error();
  if (rec->root_id != id)
    return make_error(runtime_errc::wrong_state, "execution " + id + " is a child of "
                                                   + rec->root_id + ": delete its root");
  auto live = [&] {
    return make_error(runtime_errc::wrong_state,
                      "the tree of execution " + id + " is live (its root is "
                        + to_string(rec->status) + "): stop it, or wait until it has settled");
  };
  if (!is_terminal(rec->status))
    return live();
  // The store deletes nothing of a tree with a live execution (a resume
  // racing this included): read the root back to know.
  write_batch batch;
  batch.deleted_trees.push_back(id);
  if (auto err = commit_and_wait(writer_, commit_bound(*db_), std::move(batch)))
    return err;
  auto again = db_->execution(id);
  if (again) {
    rec = std::move(*again);
    return live();
  }
  if (!is(again.error(), persistence_errc::not_found))
    return again.error();
  return caf::none;
}

caf::expected<execution_handle> runtime::resume(const std::string& id,
                                                std::optional<double> budget) {
  // The tree's lease before anything else: the resumed execution's first
  // write takes the tree over only if nobody took it since this read
  // (compare-and-set), so every record read below is at least as new as the
  // lease. Read after them, a process that resumed the tree meanwhile would
  // pass the check while this one runs on records it has since changed.
  // (An execution's root never changes: the first read only finds it.)
  auto first = db_->execution(id);
  if (!first)
    return first.error();
  auto lease = db_->lease(first->root_id);
  if (!lease)
    return lease.error();
  auto rec = db_->execution(id);
  if (!rec)
    return rec.error();
  if (!is_terminal(rec->status))
    return make_error(runtime_errc::wrong_state,
                      "execution " + id + " is " + to_string(rec->status));
  execution_handle h;
  h.rt_ = this;
  h.id_ = id;
  h.root_id_ = rec->root_id;
  if (rec->status == execution_status::completed)
    return h; // nothing to do: the document is final
  // The step records decode on a thread of their own meanwhile (reads may
  // run on any thread): for a large graph each read takes long
  // (measured: runtime/docs/benchmarks.md#design-measurements). Without a
  // thread to spare, `get` below reads them.
  auto steps_read = std::async(std::launch::async | std::launch::deferred,
                               [db = db_, id] { return db->steps(id); });
  auto stored = db_->graph(id);
  if (!stored)
    return stored.error();
  // The store keeps only graphs that validated: load without validating
  // again. A tool or function gone from this node fails its step when it
  // starts; inline commands this node refuses are refused here.
  parse_options opts;
  opts.allow_inline = opts_.allow_inline_commands;
  auto parsed = load_stored_graph(std::move(stored->document), stored->base_dir, stored->files,
                                  opts);
  if (!parsed) {
    std::string msg = "stored graph cannot run here:";
    for (auto& e : parsed.errors)
      msg += "\n  " + to_string(e);
    return make_error(persistence_errc::invalid_graph, msg);
  }
  auto steps = steps_read.get();
  if (!steps)
    return steps.error();
  execution_init init;
  init.record = std::move(*rec);
  init.record.owner_pid = svc_->owner_pid;
  init.record.owner_start = svc_->owner_start;
  init.graph = parsed.value;
  init.steps = std::move(*steps);
  init.budget = budget;
  init.acquire_lease = true;
  init.lease_epoch = lease->epoch;
  h.actor_ = caf::actor_cast<caf::actor>(spawn_execution(*sys_, std::move(init), svc_));
  track(h.actor_);
  return h;
}

caf::expected<stop_ticket> runtime::stop(const std::string& id, stop_mode mode,
                                         const std::string& who) {
  return request_stop(stop_ctx(), id, mode, who);
}

std::vector<stop_outcome> runtime::stop_all(std::vector<stop_order> orders, stop_mode mode,
                                           const std::string& who, millis wait) {
  return canopy::core::stop_all(stop_ctx(), std::move(orders), mode, who, wait);
}

stop_result runtime::await_stop(const stop_ticket& ticket, millis wait) {
  return canopy::core::await_stop(stop_ctx(), ticket, wait);
}

stop_context runtime::stop_ctx() const {
  return {db_, writer_, svc_->directory};
}

subscription runtime::subscribe(std::function<void(const event_record&)> f) {
  return make_subscription(*sys_, writer_, db_, std::move(f), {});
}

} // namespace canopy::core
