// Tests of the execution directory (actors/tree_context.hpp) with a real
// actor system: entries of ended executions are invisible at once and swept
// later.

#include "actors/tree_context.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "tests/actors/system_fixture.hpp"

using namespace canopy::core;
using canopy::core::test::system_fixture;
using namespace std::chrono_literals;

namespace {

caf::behavior idle(caf::event_based_actor*) {
  return {[](int) {}};
}

/// Ends `a` and returns once it is down; `a` is released.
void end(caf::actor_system& sys, caf::actor& a) {
  caf::scoped_actor self{sys};
  self->monitor(a);
  self->send_exit(a, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  a = nullptr;
}

/// Sweeps until `n` entries in all were erased, or five seconds passed (the
/// scheduler may still hold the last reference of an actor that is down).
bool swept(execution_directory& dir, size_t n) {
  size_t erased = 0;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (erased < n && std::chrono::steady_clock::now() < deadline) {
    erased += dir.sweep();
    if (erased < n)
      std::this_thread::sleep_for(1ms);
  }
  return erased == n;
}

} // namespace

TEST_CASE("a departed execution is not found and its entry is swept once its actor is gone",
          "[actors][directory]") {
  system_fixture f;
  execution_directory dir;
  auto a = f.sys->spawn(idle);
  auto token = std::make_shared<halt_token>();
  dir.add("e1", a, token);
  CHECK(dir.find("e1") == a);
  CHECK(dir.token("e1") == token);
  CHECK(dir.size() == 1);
  end(*f.sys, a);
  dir.depart();
  token.reset();
  CHECK(dir.size() == 0);
  CHECK(!dir.find("e1"));
  CHECK(dir.token("e1") == nullptr);
  CHECK(swept(dir, 1));
  CHECK(dir.sweep() == 0);
}

TEST_CASE("the settled sweep waits for a look at which nothing departed since the previous one",
          "[actors][directory]") {
  system_fixture f;
  execution_directory dir;
  auto a = f.sys->spawn(idle);
  auto addr = a.address();
  dir.add("e1", a, nullptr);
  CHECK(dir.sweep_if_settled() == 0); // nothing departed: nothing to sweep
  end(*f.sys, a);
  dir.depart();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (caf::actor_cast<caf::strong_actor_ptr>(addr) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  REQUIRE(!caf::actor_cast<caf::strong_actor_ptr>(addr));
  CHECK(dir.sweep_if_settled() == 0); // one departed since the last look
  CHECK(dir.held() == 1);
  CHECK(dir.sweep_if_settled() == 1); // settled
  CHECK(dir.held() == 0);
}

TEST_CASE("a live execution's entry survives a sweep, and a resumed execution replaces its "
          "earlier actor",
          "[actors][directory]") {
  system_fixture f;
  execution_directory dir;
  auto first = f.sys->spawn(idle);
  dir.add("e1", first, nullptr);
  CHECK(dir.sweep() == 0);
  CHECK(dir.find("e1") == first);
  end(*f.sys, first);
  dir.depart();
  auto second = f.sys->spawn(idle);
  dir.add("e1", second, nullptr);
  CHECK(dir.find("e1") == second);
  CHECK(dir.size() == 1);
  CHECK(dir.sweep() == 0); // the replaced entry is gone with the replacement
  end(*f.sys, second);
  dir.depart();
}

TEST_CASE("registering sweeps once departed entries outnumber max(1,024, live ones)",
          "[actors][directory]") {
  system_fixture f;
  execution_directory dir;
  std::vector<caf::actor> actors;
  std::vector<caf::actor_addr> addrs;
  for (int i = 0; i < 1100; ++i) {
    actors.push_back(f.sys->spawn(idle));
    addrs.push_back(actors.back().address());
    dir.add("e" + std::to_string(i), actors.back(), nullptr);
  }
  for (auto& a : actors) {
    end(*f.sys, a);
    dir.depart();
  }
  CHECK(dir.size() == 0);
  CHECK(dir.held() == 1100);
  // The scheduler may hold an actor that is down a moment longer.
  auto gone = [&] {
    for (auto& x : addrs)
      if (caf::actor_cast<caf::strong_actor_ptr>(x))
        return false;
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!gone() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  REQUIRE(gone());
  auto live = f.sys->spawn(idle);
  dir.add("live", live, nullptr);
  CHECK(dir.held() == 1);
  CHECK(dir.size() == 1);
  CHECK(dir.find("live") == live);
  end(*f.sys, live);
  dir.depart();
}
