#include "actors/stop_protocol.hpp"

#include <thread>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/messages.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

/// How long a live execution may take to acknowledge a request it stores
/// before the request is stored through the writer instead. Short: storing
/// twice is harmless, waiting on a reply that never comes is not.
constexpr millis ack_bound{2000};

/// Headroom over the store's write wait for one commit through the writer.
constexpr millis commit_headroom{5000};

stop_ticket nothing_to_stop(const std::string& id) {
  stop_ticket t;
  t.request.target = id;
  t.result = stop_result::no_execution;
  return t;
}

} // namespace

// -- outcomes --------------------------------------------------------------------

const char* to_string(stop_result x) {
  switch (x) {
    case stop_result::stopped: return "stopped";
    case stop_result::no_execution: return "no_execution";
    default: return "stopping";
  }
}


// -- building blocks --------------------------------------------------------------

std::pair<stop_record, write_batch> make_stop_request(const execution_record& target,
                                                      stop_mode mode, const std::string& who) {
  stop_record r;
  r.id = make_execution_id();
  r.target = target.id;
  r.force = mode == stop_mode::force;
  r.requested_at = now_ms();
  r.who = who;
  write_batch b;
  b.stops.push_back(r);
  return {std::move(r), std::move(b)};
}

stop_result read_stop_result(const store& db, const stop_ticket& ticket) {
  if (ticket.request.id.empty())
    return ticket.result;
  auto stored = db.stop(ticket.request.id);
  if (!stored || !stored->handled)
    return stop_result::stopping;
  return stored->result == "stopped" ? stop_result::stopped : stop_result::no_execution;
}

bool deliver_stop(const execution_directory& dir, const stop_record& req) {
  auto a = dir.find(req.target);
  if (!a)
    return false;
  if (auto token = dir.token(req.target))
    token->set();
  caf::anon_send(a, stop_atom::value, std::string{"requested"}, req.force);
  return true;
}

// -- from a thread of the owning process --------------------------------------------

caf::expected<stop_ticket> request_stop(caf::actor_system& sys, const stop_context& ctx,
                                        const std::string& id, stop_mode mode,
                                        const std::string& who, write_batch extra) {
  auto rec = ctx.db->execution(id);
  if (!rec)
    return rec.error();
  if (!is_stoppable(rec->status))
    return nothing_to_stop(id);
  // From this moment nothing in the subtree starts a step, even if its actor
  // has not run yet.
  if (auto token = ctx.directory->token(id))
    token->set();
  auto [req, batch] = make_stop_request(*rec, mode, who);
  batch.append(std::move(extra));
  stop_ticket ticket;
  ticket.request = req;
  bool stored = false;
  if (auto a = ctx.directory->find(id)) {
    // Live here: it stores the request behind its own records, then halts.
    stored = !blocking_request(sys, a, ack_bound, request_atom::value, req, batch);
  }
  if (!stored) {
    // Elsewhere, ended meanwhile, or no acknowledgement in time: store it
    // through the writer (a second copy of a stored request does nothing).
    auto bound = ctx.db->write_wait() + commit_headroom;
    if (auto err = blocking_request(sys, ctx.writer, bound, write_atom::value, std::move(batch)))
      return err;
  }
  ticket.result = read_stop_result(*ctx.db, ticket);
  return ticket;
}

stop_result await_stop(caf::actor_system& sys, const stop_context& ctx,
                       const stop_ticket& ticket, millis wait) {
  if (ticket.request.id.empty() || wait.count() <= 0)
    return read_stop_result(*ctx.db, ticket);
  auto deadline = std::chrono::steady_clock::now() + wait;
  if (auto a = ctx.directory->find(ticket.request.target)) {
    // Live here: its final record is committed before its actor is down.
    await_down(sys, a, wait);
  }
  // Elsewhere (or it is down): the store answers the request.
  for (millis pause{1};; pause = std::min(pause * 2, millis{50})) {
    auto result = read_stop_result(*ctx.db, ticket);
    if (result != stop_result::stopping || std::chrono::steady_clock::now() >= deadline)
      return result;
    std::this_thread::sleep_for(pause);
  }
}

// -- from inside an actor ---------------------------------------------------------

void request_stop_async(caf::event_based_actor* self, const stop_context& ctx,
                        const execution_record& target, stop_mode mode, const std::string& who,
                        write_batch extra, std::function<void(const caf::error&)> done) {
  if (!is_stoppable(target.status))
    return;
  if (auto token = ctx.directory->token(target.id))
    token->set();
  auto [req, batch] = make_stop_request(target, mode, who);
  batch.append(std::move(extra));
  auto writer = ctx.writer;
  auto bound = ctx.db->write_wait() + commit_headroom;
  auto through_writer = [=](write_batch b) {
    self->request(writer, bound, write_atom::value, std::move(b))
      .then(
        [=](bool) {
          if (done)
            done(caf::error{});
        },
        [=](caf::error& err) {
          if (done)
            done(err);
        });
  };
  auto a = ctx.directory->find(target.id);
  if (!a)
    return through_writer(std::move(batch));
  // A copy for the writer in case the live execution does not acknowledge.
  auto copy = batch;
  self->request(a, ack_bound, request_atom::value, req, std::move(batch))
    .then(
      [=](bool) {
        if (done)
          done(caf::error{});
      },
      [=](caf::error&) mutable { through_writer(std::move(copy)); });
}

// -- from another process on the same home ----------------------------------------

caf::expected<stop_ticket> request_stop(store& db, const std::string& id, stop_mode mode,
                                        const std::string& who) {
  auto rec = db.execution(id);
  if (!rec)
    return rec.error();
  if (!is_stoppable(rec->status))
    return nothing_to_stop(id);
  auto [req, batch] = make_stop_request(*rec, mode, who);
  if (auto err = db.commit(batch))
    return err;
  stop_ticket ticket;
  ticket.request = std::move(req);
  ticket.result = read_stop_result(db, ticket);
  return ticket;
}

caf::expected<stop_result> await_stop(store& db, const stop_ticket& ticket, millis wait,
                                      const std::function<caf::error()>& between) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (millis pause{2};; pause = std::min(pause * 2, millis{20})) {
    auto result = read_stop_result(db, ticket);
    if (result != stop_result::stopping || std::chrono::steady_clock::now() >= deadline)
      return result;
    std::this_thread::sleep_for(pause);
    if (between)
      if (auto err = between())
        return err;
  }
}

} // namespace canopy::core
