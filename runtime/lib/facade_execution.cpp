#include "runtime/lib/facade.hpp"

#include "actors/error.hpp"
#include "persistence/error.hpp"

namespace canopy {

namespace {

/// Long enough to mean "until it settles" without overflowing a deadline.
constexpr millis forever{std::chrono::hours{24 * 365}};

} // namespace

// -- fn_context -------------------------------------------------------------------------------

const json& fn_context::with() const {
  return s_->ctx->with();
}

const std::string& fn_context::execution_id() const {
  return s_->ctx->execution_id();
}

const std::string& fn_context::step() const {
  return s_->ctx->step();
}

int fn_context::attempt() const {
  return s_->ctx->attempt();
}

bool fn_context::stop_requested() const {
  return s_->ctx->stop_requested();
}

std::optional<error> fn_context::checkpoint() const {
  if (!s_->ctx->stop_requested())
    return std::nullopt;
  return error{errc::stopped, "the step was stopped"};
}

// -- execution ---------------------------------------------------------------------------------

const std::string& execution::id() const {
  return s_->h.id();
}

bool execution::running() const {
  return s_->h.running();
}

result<execution_info> execution::status() const {
  auto rec = s_->h.status();
  if (!rec)
    return facade::to_error(rec.error());
  return facade::to_info(*rec);
}

result<execution_info> execution::wait() const {
  return wait(forever);
}

result<execution_info> execution::wait(millis timeout) const {
  auto& h = s_->h;
  auto& rt = *s_->rt->rt;
  // Live here: its actor's end. Else (another process's, or settled): the
  // store's record.
  bool settled = h.running() ? h.wait_for(timeout) : rt.wait_settled(h.id(), timeout);
  if (!settled)
    return error{errc::timeout, "execution " + h.id() + " did not settle within "
                                  + std::to_string(timeout.count()) + " ms"};
  auto rec = h.wait(); // at once now; an end that could not be recorded is its error
  if (!rec)
    return facade::to_error(rec.error());
  // Every subscriber that follows the tree is handed the final events first.
  s_->rt->drain_followers(rec->root_id);
  return facade::to_info(*rec);
}

result<json> execution::output() const {
  auto info = status();
  if (!info)
    return info.error();
  if (info->status != execution_status::completed)
    return error{errc::conflict, "execution " + info->id + " is " + to_string(info->status)
                                   + ", not completed: it has no outputs"};
  return info->outputs;
}

result<stop_outcome> execution::stop(stop_mode mode, millis wait) const {
  auto& rt = *s_->rt->rt;
  auto ticket = rt.stop(id(), static_cast<core::stop_mode>(mode), "library");
  if (!ticket)
    return facade::to_error(ticket.error());
  auto r = ticket->result;
  if (r == core::stop_result::stopping)
    r = rt.await_stop(*ticket, wait);
  switch (r) {
    case core::stop_result::stopped: return stop_outcome::stopped;
    case core::stop_result::no_execution: return stop_outcome::not_running;
    case core::stop_result::stopping: return stop_outcome::stopping;
  }
  return stop_outcome::stopping;
}

result<execution> execution::resume() const {
  auto h = s_->rt->rt->resume(id());
  if (!h)
    return facade::to_error(h.error());
  return execution{std::make_shared<const state>(state{s_->rt, std::move(*h)})};
}

subscription execution::events(std::function<void(const event&)> f) const {
  auto rec = s_->h.status();
  return s_->rt->subscribe(std::move(f), rec ? rec->root_id : id());
}

result<signal_answer> execution::signal(const std::string& name, json value,
                                        const signal_options& opts) const {
  core::execution_handle::signal_options o;
  o.step = opts.step;
  o.key = opts.key;
  o.failure = opts.failure;
  o.message = opts.message;
  o.wait = opts.wait;
  auto r = s_->h.signal(name, std::move(value), o);
  if (!r)
    return facade::to_error(r.error());
  auto& d = r->decision;
  using core::signal_outcome;
  switch (d.outcome) {
    case signal_outcome::store:
    case signal_outcome::replay: {
      signal_answer x;
      x.replayed = d.outcome == signal_outcome::replay;
      x.consumed = r->consumed;
      x.consumed_execution = r->consumed_execution;
      x.consumed_step = r->consumed_step;
      return x;
    }
    case signal_outcome::not_found:
    case signal_outcome::unknown_signal:
    case signal_outcome::forbidden: return error{errc::not_found, d.message};
    case signal_outcome::invalid_value:
    case signal_outcome::too_large:
      return error{errc::invalid, d.message,
                   d.path.empty() ? std::vector<problem>{} : std::vector<problem>{{d.path, d.message}}};
    case signal_outcome::ended:
    case signal_outcome::ambiguous:
    case signal_outcome::key_conflict: return error{errc::conflict, d.message};
  }
  return error{errc::internal, d.message};
}

} // namespace canopy
