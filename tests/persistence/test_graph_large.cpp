// Validation of large graphs: deep chains, long cycles and references far
// upstream (the dependency algorithms of persistence/graph_order.cpp).

#include "persistence/graph.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "persistence/graph_order.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;

namespace {

std::string id(size_t i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "s%06zu", i);
  return buf;
}

/// `n` steps, each needing the previous one and referencing `ref(i)` (if any).
template <class Ref>
json chain(size_t n, Ref ref) {
  json steps = json::object();
  for (size_t i = 0; i < n; ++i) {
    json step{{"fn", "echo"}};
    if (i > 0)
      step["needs"] = json::array({id(i - 1)});
    if (auto r = ref(i); !r.empty())
      step["with"] = json{{"a", "${steps." + r + ".stdout}"}};
    steps[id(i)] = std::move(step);
  }
  return json{{"steps", std::move(steps)}};
}

} // namespace

TEST_CASE("a chain of 100000 steps each referencing the previous one validates",
          "[persistence][graph]") {
  auto doc = chain(100000, [](size_t i) { return i > 0 ? id(i - 1) : std::string{}; });
  auto result = parse_graph(doc, "/tmp");
  INFO(render(result.errors));
  REQUIRE(result);
  REQUIRE(result.value->steps.size() == 100000);
  CHECK(result.value->steps.front().id == id(0));
  CHECK(result.value->steps.back().id == id(99999));
}

TEST_CASE("a reference far upstream through a 100000-step chain is accepted",
          "[persistence][graph]") {
  // Every step references the first one: upstream through every step between.
  auto doc = chain(100000, [](size_t i) { return i > 0 ? id(0) : std::string{}; });
  auto result = parse_graph(doc, "/tmp");
  INFO(render(result.errors));
  CHECK(result);
}

TEST_CASE("a reference to a step downstream in a long chain is rejected where it is written",
          "[persistence][graph]") {
  auto doc = chain(5000, [](size_t i) {
    return i == 10 ? id(4000) : i > 1 ? id(i - 2) : std::string{};
  });
  auto result = parse_graph(doc, "/tmp");
  REQUIRE_FALSE(result);
  INFO(render(result.errors));
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].path == "/steps/" + id(10) + "/with/a");
  CHECK(result.errors[0].message
        == "reference ${steps." + id(4000) + ".stdout}: step '" + id(4000)
             + "' is not upstream of '" + id(10) + "' (add it to needs)");
}

TEST_CASE("a reference to a step on a parallel branch is rejected", "[persistence][graph]") {
  // Two branches from a common root: b2 references a1 (not upstream), and
  // a2 references the root through a1 (upstream).
  auto doc = json::parse(R"({"steps": {
    "root": {"fn": "noop"},
    "a1": {"fn": "noop", "needs": ["root"]},
    "a2": {"fn": "echo", "needs": ["a1"], "with": {"x": "${steps.root.stdout}"}},
    "b1": {"fn": "noop", "needs": ["root"]},
    "b2": {"fn": "echo", "needs": ["b1"], "with": {"x": "${steps.a1.stdout}"}}
  }})");
  auto result = parse_graph(doc, "/tmp");
  REQUIRE_FALSE(result);
  INFO(render(result.errors));
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].path == "/steps/b2/with/x");
  CHECK(result.errors[0].message.find("step 'a1' is not upstream of 'b2'") != std::string::npos);
}

TEST_CASE("a cycle of 50000 steps is reported once with its path", "[persistence][graph]") {
  const size_t n = 50000;
  json steps = json::object();
  for (size_t i = 0; i < n; ++i)
    steps[id(i)] = json{{"fn", "echo"},
                        {"needs", json::array({id((i + 1) % n)})},
                        {"with", json{{"a", "${steps." + id((i + 1) % n) + ".stdout}"}}}};
  auto result = parse_graph(json{{"steps", std::move(steps)}}, "/tmp");
  REQUIRE_FALSE(result);
  REQUIRE(result.errors.size() == 1);
  auto& e = result.errors[0];
  CHECK(e.path == "/steps/" + id(0) + "/needs");
  auto expected_start = "dependency cycle: " + id(0) + " -> " + id(1) + " -> " + id(2);
  CHECK(e.message.rfind(expected_start, 0) == 0);
  auto expected_end = id(49999) + " -> " + id(0);
  REQUIRE(e.message.size() > expected_end.size());
  CHECK(e.message.substr(e.message.size() - expected_end.size()) == expected_end);
}

TEST_CASE("order_steps orders a 100000-deep chain and finds cycles without recursion",
          "[persistence][graph]") {
  const size_t n = 100000;
  detail::needs_lists needs(n);
  for (size_t i = 1; i < n; ++i)
    needs[i].push_back(i - 1);
  auto sorted = detail::order_steps(needs);
  REQUIRE(sorted.order.size() == n);
  CHECK(sorted.order.front() == 0);
  CHECK(sorted.order.back() == n - 1);
  CHECK(sorted.cycles.empty());
  // Close the chain: one cycle through all of it (Tarjan 100,000 deep).
  needs[0].push_back(n - 1);
  sorted = detail::order_steps(needs);
  CHECK(sorted.order.empty());
  REQUIRE(sorted.cycles.size() == 1);
  CHECK(sorted.cycles[0].size() == n);
  CHECK(sorted.cycles[0][0] == 0);
  CHECK(sorted.cycles[0][1] == n - 1);
}

TEST_CASE("upstream answers queries across more than 64 far ancestors",
          "[persistence][graph]") {
  // A diamond lattice: step i needs i-1, and i-3 when i is a multiple of 5;
  // plus an isolated branch 1000..1099 needing only each other.
  const size_t n = 1100;
  detail::needs_lists needs(n);
  for (size_t i = 1; i < 1000; ++i) {
    needs[i].push_back(i - 1);
    if (i % 5 == 0 && i >= 3)
      needs[i].push_back(i - 3);
  }
  for (size_t i = 1001; i < n; ++i)
    needs[i].push_back(i - 1);
  auto sorted = detail::order_steps(needs);
  REQUIRE(sorted.order.size() == n);
  std::vector<detail::upstream_query> queries;
  std::vector<bool> expected;
  for (size_t i = 0; i < 1000; i += 7)
    for (size_t a = 0; a < n; a += 11) {
      queries.push_back({i, a});
      expected.push_back(a < i);
    }
  for (size_t i = 1000; i < n; i += 3)
    for (size_t a = 0; a < n; a += 13) {
      queries.push_back({i, a});
      expected.push_back(a >= 1000 && a < i);
    }
  auto answers = detail::upstream(needs, sorted.order, queries);
  REQUIRE(answers.size() == expected.size());
  size_t wrong = 0;
  for (size_t q = 0; q < answers.size(); ++q)
    if (answers[q] != expected[q])
      ++wrong;
  CHECK(wrong == 0);
}
