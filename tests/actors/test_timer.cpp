// Tests of the timer service (actors/timer.hpp) with a real actor system.

#include "actors/timer.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <thread>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "tests/actors/system_fixture.hpp"

using namespace canopy::core;
using canopy::core::test::system_fixture;
using namespace std::chrono_literals;

namespace {

/// Polls `pred` every millisecond until it holds or `limit` passed.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

TEST_CASE("a scheduled message arrives after its delay, in due order", "[actors][timer]") {
  system_fixture f;
  auto timer = spawn_timer(*f.sys);
  auto got = std::make_shared<std::promise<std::vector<int>>>();
  auto t0 = std::chrono::steady_clock::now();
  // Held while it waits: the timer keeps its receivers weakly, and an actor
  // nobody holds is gone at once.
  auto receiver = f.sys->spawn([=](caf::event_based_actor* self) -> caf::behavior {
    auto seen = std::make_shared<std::vector<int>>();
    schedule(self, timer, 60ms, caf::make_message(wake_atom::value, 2));
    schedule(self, timer, 20ms, caf::make_message(wake_atom::value, 1));
    return {[=](wake_atom, int n) {
      seen->push_back(n);
      if (seen->size() == 2) {
        got->set_value(*seen);
        self->quit();
      }
    }};
  });
  auto order = got->get_future().get();
  CHECK(std::chrono::steady_clock::now() - t0 >= 60ms);
  CHECK(order == std::vector<int>{1, 2});
  caf::anon_send_exit(timer, caf::exit_reason::user_shutdown);
}

TEST_CASE("a pending timer does not keep its ended receiver alive", "[actors][timer]") {
  system_fixture f;
  auto timer = spawn_timer(*f.sys);
  caf::actor_addr weak;
  {
    auto done = std::make_shared<std::promise<void>>();
    auto a = f.sys->spawn([=](caf::event_based_actor* self) -> caf::behavior {
      // An hour away: with CAF's delayed_send the clock would hold this
      // actor until then.
      schedule(self, timer, std::chrono::hours{1}, caf::make_message(wake_atom::value, 1));
      self->attach_functor([=] { done->set_value(); });
      return {[=](tick_atom) { self->quit(); }};
    });
    weak = a.address();
    caf::anon_send(a, tick_atom::value);
    done->get_future().wait();
  }
  // Once the timer has taken the request, nothing holds the actor strongly.
  CHECK(eventually([&] { return caf::actor_cast<caf::actor>(weak) == nullptr; }));
  caf::anon_send_exit(timer, caf::exit_reason::user_shutdown);
}

TEST_CASE("cancelling a receiver's timers drops those already scheduled, not later ones",
          "[actors][timer]") {
  system_fixture f;
  auto timer = spawn_timer(*f.sys);
  auto got = std::make_shared<std::promise<std::vector<int>>>();
  auto receiver = f.sys->spawn([=](caf::event_based_actor* self) -> caf::behavior {
    auto seen = std::make_shared<std::vector<int>>();
    // Messages from one sender arrive in order: the cancel drops 1 and 2,
    // and 3 comes after it. Had 1 or 2 survived, they would arrive first.
    schedule(self, timer, 10ms, caf::make_message(wake_atom::value, 1));
    schedule(self, timer, 20ms, caf::make_message(wake_atom::value, 2));
    self->send(timer, cancel_atom::value, self->address());
    schedule(self, timer, 40ms, caf::make_message(wake_atom::value, 3));
    return {[=](wake_atom, int n) {
      seen->push_back(n);
      if (n == 3) {
        got->set_value(*seen);
        self->quit();
      }
    }};
  });
  CHECK(got->get_future().get() == std::vector<int>{3});
  caf::anon_send_exit(timer, caf::exit_reason::user_shutdown);
}

TEST_CASE("the timers of receivers that ended are swept, those of live ones are kept",
          "[actors][timer]") {
  system_fixture f;
  auto timer = spawn_timer(*f.sys);
  auto spawn_sleeper = [&](bool quits) {
    auto done = std::make_shared<std::promise<void>>();
    auto a = f.sys->spawn([=](caf::event_based_actor* self) -> caf::behavior {
      schedule(self, timer, std::chrono::hours{1}, caf::make_message(wake_atom::value, 1));
      schedule(self, timer, std::chrono::hours{2}, caf::make_message(wake_atom::value, 2));
      self->attach_functor([=] { done->set_value(); });
      return {[=](tick_atom) { self->quit(); }};
    });
    if (quits) {
      caf::anon_send(a, tick_atom::value);
      done->get_future().wait();
    }
    return a;
  };
  auto live = spawn_sleeper(false);
  for (int i = 0; i < 3; ++i)
    spawn_sleeper(true);
  caf::scoped_actor self{*f.sys};
  auto pending = [&] {
    uint64_t n = 0;
    self->request(timer, caf::infinite, caf::get_atom::value)
      .receive([&](uint64_t x) { n = x; }, [&](caf::error&) { n = 0; });
    return n;
  };
  // Nobody cancelled the ended receivers' timers: the periodic sweep drops them.
  CHECK(eventually([&] { return pending() == 2; }, 3 * sweep_interval + 5000ms));
  CHECK(caf::actor_cast<caf::actor>(live.address()) != nullptr);
  caf::anon_send_exit(live, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(timer, caf::exit_reason::user_shutdown);
}
