// The start gate (actors/start_gate.hpp): plain C++, no actors.

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "actors/start_gate.hpp"

using namespace canopy::core;

namespace {

/// Tickets that record the order in which they were woken.
struct tickets {
  std::vector<int> woken;
  std::vector<std::shared_ptr<start_gate::ticket>> all;
  std::shared_ptr<start_gate::ticket> make() {
    auto n = static_cast<int>(all.size());
    all.push_back(std::make_shared<start_gate::ticket>([this, n] { woken.push_back(n); }));
    return all.back();
  }
};

/// A gate of one permit: `a` holds it, `b` and then `c` wait.
struct one_held_two_waiting {
  start_gate gate{1};
  tickets t;
  std::shared_ptr<start_gate::ticket> a = t.make(), b = t.make(), c = t.make();
  one_held_two_waiting() {
    REQUIRE(gate.enter(a));
    REQUIRE_FALSE(gate.enter(b));
    REQUIRE_FALSE(gate.enter(c));
  }
};

} // namespace

TEST_CASE("a gate lets as many in as it has permits and queues the rest", "[actors][gate]") {
  start_gate gate{2};
  tickets t;
  CHECK(gate.enter(t.make()));
  CHECK(gate.enter(t.make()));
  CHECK_FALSE(gate.enter(t.make()));
  CHECK(gate.held() == 2);
  CHECK(gate.waiting() == 1);
  CHECK(t.woken.empty());
}

TEST_CASE("a permit given back goes to the first waiter, who is woken", "[actors][gate]") {
  one_held_two_waiting f;
  auto& [gate, t, a, b, c] = f;
  gate.leave(a);
  CHECK(t.woken == std::vector<int>{1});
  CHECK(gate.enter(b)); // it holds the permit now
  CHECK(gate.held() == 1);
  CHECK(gate.waiting() == 1);
  gate.leave(b);
  CHECK(t.woken == std::vector<int>{1, 2});
  gate.leave(c);
  CHECK(gate.held() == 0);
  CHECK(gate.waiting() == 0);
}

TEST_CASE("a waiter that leaves gives up its place and is never woken", "[actors][gate]") {
  one_held_two_waiting f;
  auto& [gate, t, a, b, c] = f;
  gate.leave(b);
  CHECK(gate.waiting() == 1);
  gate.leave(a);
  CHECK(t.woken == std::vector<int>{2});
  CHECK(gate.held() == 1);
}

TEST_CASE("leaving twice, or without entering, changes nothing", "[actors][gate]") {
  start_gate gate{1};
  tickets t;
  auto a = t.make(), b = t.make();
  gate.leave(b); // never entered
  CHECK(gate.held() == 0);
  REQUIRE(gate.enter(a));
  gate.leave(a);
  gate.leave(a);
  CHECK(gate.held() == 0);
  CHECK_FALSE(gate.enter(a)); // a ticket enters once
  CHECK(gate.held() == 0);
}

TEST_CASE("a gate with no waiters takes its permits back", "[actors][gate]") {
  start_gate gate{3};
  tickets t;
  for (int i = 0; i < 3; ++i)
    REQUIRE(gate.enter(t.make()));
  for (auto& x : t.all)
    gate.leave(x);
  CHECK(gate.held() == 0);
  for (int i = 0; i < 3; ++i)
    CHECK(gate.enter(t.make()));
}

TEST_CASE("thousands of waiters that leave cost no permit and keep their order", "[actors][gate]") {
  start_gate gate{1};
  tickets t;
  auto holder = t.make();
  REQUIRE(gate.enter(holder));
  for (int i = 0; i < 5000; ++i)
    REQUIRE_FALSE(gate.enter(t.make()));
  // Every waiter but the last ten leaves (a stop of a waiting tree).
  for (size_t i = 1; i + 10 < t.all.size(); ++i)
    gate.leave(t.all[i]);
  CHECK(gate.waiting() == 10);
  gate.leave(holder);
  for (int i = 0; i < 10; ++i) {
    REQUIRE(t.woken.size() == static_cast<size_t>(i + 1));
    CHECK(t.woken.back() == static_cast<int>(t.all.size()) - 10 + i);
    gate.leave(t.all[static_cast<size_t>(t.woken.back())]);
  }
  CHECK(gate.held() == 0);
  CHECK(gate.waiting() == 0);
}
