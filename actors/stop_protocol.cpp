#include "actors/stop_protocol.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/messages.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

using clock_type = std::chrono::steady_clock;

/// How long a live execution may take to acknowledge a request it stores
/// before the request is stored through the writer instead. Short: storing
/// twice is harmless, waiting on a reply that never comes is not.
constexpr millis ack_bound{2000};

/// Headroom over the store's write wait for one commit through the writer.
constexpr millis commit_headroom{5000};

/// The pauses of the polling loop: the first, and the longest.
constexpr millis poll_first{1};
constexpr millis poll_longest{20};

/// The bound of one commit through the writer.
millis commit_bound(const stop_context& ctx) {
  return ctx.db->write_wait() + commit_headroom;
}

/// What is left until `deadline`; never negative.
millis left_until(clock_type::time_point deadline) {
  auto left = std::chrono::duration_cast<millis>(deadline - clock_type::now());
  return std::max(millis{0}, left);
}

stop_ticket nothing_to_stop(const std::string& id) {
  stop_ticket t;
  t.request.target = id;
  t.result = stop_result::no_execution;
  return t;
}

} // namespace


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
  return stored->result;
}

caf::message make_stop_message(stop_reason reason, stop_mode mode) {
  return caf::make_message(stop_atom::value, std::string{to_string(reason)},
                           mode == stop_mode::force);
}

bool deliver_stop(const execution_directory& dir, const stop_record& req) {
  auto a = dir.find(req.target);
  if (!a)
    return false;
  if (auto token = dir.token(req.target))
    token->set();
  caf::anon_send(a, make_stop_message(stop_reason::requested,
                                      req.force ? stop_mode::force : stop_mode::graceful));
  return true;
}

// -- steps 1 and 2, begun -----------------------------------------------------------

namespace {

/// Where a stop request begins, for an actor and for a thread alike.
struct stop_start {
  /// `no_execution` with nothing stored, or the request (`stopping`).
  stop_ticket ticket;
  write_batch batch; ///< stores the request (and the caller's extra writes)
  caf::actor live;   ///< the target's actor when it lives here, else null
};

/// Begins a stop of `target`: nothing to stop, or the request made and its
/// target's halt token set (from this moment nothing in the subtree starts
/// a step, even if its actor has not run yet).
stop_start begin_stop(const stop_context& ctx, const execution_record& target, stop_mode mode,
                      const std::string& who, write_batch extra) {
  stop_start s;
  if (!is_stoppable(target.status)) {
    s.ticket = nothing_to_stop(target.id);
    return s;
  }
  if (auto token = ctx.directory->token(target.id))
    token->set();
  auto [req, batch] = make_stop_request(target, mode, who);
  batch.append(std::move(extra));
  s.ticket.request = std::move(req);
  s.batch = std::move(batch);
  s.live = ctx.directory->find(target.id);
  return s;
}

} // namespace

// -- from inside an actor ---------------------------------------------------------

namespace {

/// `request_stop_async` for any requester, typed or not: it only sends
/// requests and takes their answers.
template <class Self>
stop_ticket request_stop_from(Self* self, const stop_context& ctx, const execution_record& target,
                              stop_mode mode, const std::string& who, write_batch extra,
                              std::function<void(const caf::error&)> done) {
  auto s = begin_stop(ctx, target, mode, who, std::move(extra));
  if (s.ticket.request.id.empty())
    return s.ticket;
  auto answer = [done](const caf::error& err) {
    if (done)
      done(err);
  };
  // Elsewhere, ended meanwhile, or no acknowledgement in time: the writer
  // stores it (a second copy of a stored request does nothing).
  auto writer = ctx.writer;
  auto bound = commit_bound(ctx);
  auto through_writer = [=](write_batch b) {
    self->request(writer, bound, write_atom::value, std::move(b))
      .then([=](bool) { answer(caf::error{}); }, [=](caf::error& err) { answer(err); });
  };
  if (!s.live) {
    through_writer(std::move(s.batch));
    return s.ticket;
  }
  // Live here: it stores the request behind its own records, then halts. A
  // copy for the writer in case it does not acknowledge.
  auto copy = s.batch;
  self->request(s.live, ack_bound, request_atom::value, s.ticket.request, std::move(s.batch))
    .then([=](bool) { answer(caf::error{}); },
          [=](caf::error&) mutable { through_writer(std::move(copy)); });
  return s.ticket;
}

} // namespace

stop_ticket request_stop_async(caf::event_based_actor* self, const stop_context& ctx,
                               const execution_record& target, stop_mode mode,
                               const std::string& who, write_batch extra,
                               std::function<void(const caf::error&)> done) {
  return request_stop_from(self, ctx, target, mode, who, std::move(extra), std::move(done));
}

stop_ticket request_stop_async(agent_actor::pointer self, const stop_context& ctx,
                               const execution_record& target, stop_mode mode,
                               const std::string& who, write_batch extra,
                               std::function<void(const caf::error&)> done) {
  return request_stop_from(self, ctx, target, mode, who, std::move(extra), std::move(done));
}

// -- from a thread of the owning process --------------------------------------------

caf::expected<stop_ticket> request_stop(const stop_context& ctx, const std::string& id,
                                        stop_mode mode, const std::string& who,
                                        write_batch extra) {
  auto rec = ctx.db->execution(id);
  if (!rec)
    return rec.error();
  auto s = begin_stop(ctx, *rec, mode, who, std::move(extra));
  if (s.ticket.request.id.empty())
    return s.ticket;
  bool stored = false;
  if (s.live) {
    // Live here: it stores the request behind its own records, then halts,
    // and answers this thread itself. A copy for the writer in case it does
    // not acknowledge (or has ended meanwhile).
    auto copy = s.batch;
    stored = !tell_and_await(s.live, ack_bound, request_atom::value, s.ticket.request,
                             std::move(s.batch));
    if (!stored)
      s.batch = std::move(copy);
  }
  if (!stored)
    if (auto err = commit_and_wait(ctx.writer, commit_bound(ctx), std::move(s.batch)))
      return err;
  s.ticket.result = read_stop_result(*ctx.db, s.ticket);
  return s.ticket;
}

stop_result await_stop(const stop_context& ctx,
                       const stop_ticket& ticket, millis wait) {
  auto deadline = clock_type::now() + wait;
  if (!ticket.request.id.empty() && wait.count() > 0)
    if (auto a = ctx.directory->find(ticket.request.target)) {
      // Live here: its final record is committed before its actor is down.
      await_down(a, wait);
    }
  // Elsewhere (or it is down): the store answers the request.
  auto result = await_stop(*ctx.db, ticket, left_until(deadline));
  return result ? *result : stop_result::stopping;
}

std::vector<stop_outcome> stop_all(const stop_context& ctx,
                                   std::vector<stop_order> orders, stop_mode mode,
                                   const std::string& who, millis wait,
                                   bool give_up_on_error) {
  auto deadline = clock_type::now() + wait;
  std::vector<stop_outcome> out;
  out.reserve(orders.size());
  for (auto& order : orders) {
    stop_outcome o;
    o.id = order.id;
    auto t = request_stop(ctx, order.id, mode, who, std::move(order.extra));
    if (t)
      o.ticket = std::move(*t);
    else
      o.error = std::move(t.error());
    out.push_back(std::move(o));
    if (out.back().error && give_up_on_error)
      return out;
  }
  for (auto& o : out) {
    if (o.error)
      continue;
    if (o.ticket.request.id.empty()) {
      o.result = o.ticket.result;
      continue;
    }
    auto left = left_until(deadline);
    o.result = left.count() > 0 ? await_stop(ctx, o.ticket, left) : stop_result::stopping;
  }
  return out;
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
  auto deadline = clock_type::now() + wait;
  for (auto pause = poll_first;; pause = std::min(pause * 2, poll_longest)) {
    auto result = read_stop_result(db, ticket);
    if (result != stop_result::stopping || ticket.request.id.empty()
        || clock_type::now() >= deadline)
      return result;
    std::this_thread::sleep_for(pause);
    if (between)
      if (auto err = between())
        return err;
  }
}

} // namespace canopy::core
