#pragma once

// Blocking calls into the actor system from threads that are not actors
// (the library's callers, HTTP handlers, the CLI). Internal header.
//
// A request and its answer use a one-shot actor and a promise, not a
// `scoped_actor`: a scoped_actor created on a thread that outlives it and is
// still alive when the runtime shuts down kept ~actor_system waiting forever
// (seen with CAF 0.17 on a sigwait thread). Waits that need no actor use
// none: a commit ticket is answered by whoever holds it, a down is signalled
// by what is attached to the actor. Every wait can be bounded; the stop
// protocol bounds all of its waits (a reply that never came, and a down that
// never came either, once held an HTTP thread forever).

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "actors/error.hpp"
#include "persistence/duration.hpp"

namespace canopy::core {

/// Runs `start(self, finish)` in a one-shot actor `self` and blocks the
/// calling thread until `start` or a handler it set calls `finish(x)` (it
/// then makes `self` quit), or (when `bound` is set) `bound` and a second
/// more passed: then `self` is sent an exit and the answer is `late`.
/// `finish` may be called more than once; the first call answers.
/// @returns the answer. Threading: any thread that is not an actor's.
template <class T, class Start>
T blocking_run(caf::actor_system& sys, std::optional<millis> bound, T late, Start start) {
  auto done = std::make_shared<std::promise<T>>();
  auto answered = std::make_shared<std::atomic<bool>>(false);
  auto answer = done->get_future();
  auto finish = [done, answered](T x) {
    if (!answered->exchange(true))
      done->set_value(std::move(x));
  };
  auto runner = sys.spawn([=](caf::event_based_actor* self) { start(self, finish); });
  if (bound && answer.wait_for(*bound + millis{1000}) != std::future_status::ready) {
    // Neither an answer nor the runner's own bounds: never wait on.
    finish(std::move(late));
    caf::anon_send_exit(runner, caf::exit_reason::user_shutdown);
  }
  return answer.get();
}

/// Sends `xs...` to `dest` as a request that answers one `T` and blocks the
/// calling thread until the answer, `dest` going down without answering, or
/// (when `bound` is set) `bound` passing.
/// @returns the answer; `dest`'s error; `sec::request_receiver_down` when
///          it went down without answering; `sec::request_timeout` when
///          `bound` passed. Threading: any thread that is not an actor's.
/// `Handle` is `caf::actor` or a `caf::typed_actor` (the request is then
/// checked against its interface at compile time).
template <class T, class Handle, class... Ts>
caf::expected<T> blocking_ask(caf::actor_system& sys, const Handle& dest,
                              std::optional<millis> bound, Ts... xs) {
  auto late = caf::expected<T>{caf::make_error(caf::sec::request_timeout)};
  return blocking_run(sys, bound, std::move(late), [=](caf::event_based_actor* self,
                                                       auto finish) {
    // The monitor lives in `dest`, which may live as long as the process
    // (the store writer): it keeps this actor's memory until it is taken
    // back, so every way out takes it back first.
    auto leave = [=] {
      self->demonitor(dest.address());
      self->quit();
    };
    self->set_down_handler([=](caf::down_msg&) {
      finish(caf::make_error(caf::sec::request_receiver_down));
      self->quit();
    });
    self->set_exit_handler([=](caf::exit_msg&) { leave(); });
    self->monitor(dest);
    auto timeout = bound ? caf::duration{*bound} : caf::duration{caf::infinite};
    self->request(dest, timeout, xs...)
      .then(
        [=](T& x) {
          finish(std::move(x));
          leave();
        },
        [=](caf::error& err) {
          finish(std::move(err));
          leave();
        });
  });
}

/// `blocking_ask` for requests that answer `bool` (the store writer's
/// commits): @returns nothing on success, else the error.
template <class Handle, class... Ts>
caf::error blocking_request(caf::actor_system& sys, const Handle& dest,
                            std::optional<millis> bound, Ts... xs) {
  auto res = blocking_ask<bool>(sys, dest, bound, std::move(xs)...);
  return res ? caf::error{} : std::move(res.error());
}

/// Waits for the answer to a `commit_ticket` (actors/messages.hpp) that
/// was sent away, at most `bound` when it is set.
/// @returns the answer (no error: committed); `sec::request_receiver_down`
///          when the ticket was dropped unanswered (its receiver is gone);
///          `sec::request_timeout` when `bound` passed.
/// Threading: any thread that is not an actor's.
caf::error await_ticket(std::future<caf::error>& answer, std::optional<millis> bound);

/// Sends `dest` the message `xs...` followed by a fresh ticket and waits for
/// the ticket's answer (`await_ticket`). The message holds the only
/// reference to the ticket: a receiver that drops it unanswered breaks it.
/// Threading: any thread that is not an actor's.
template <class Handle, class... Ts>
caf::error tell_and_await(const Handle& dest, std::optional<millis> bound, Ts... xs) {
  auto ticket = std::make_shared<std::promise<caf::error>>();
  auto answer = ticket->get_future();
  caf::anon_send(dest, std::move(xs)..., std::move(ticket));
  return await_ticket(answer, bound);
}

/// Blocks until `who` is down or `timeout` passed. @returns true when it is
/// down; then `reason`, when given, holds the reason it quit with. No actor
/// is spawned for the wait: a signal attached to `who` wakes the thread.
/// Threading: any thread that is not an actor's.
bool await_down(const caf::actor& who, std::optional<millis> timeout = std::nullopt,
                caf::error* reason = nullptr);

} // namespace canopy::core
