// Conditional steps in the graph model: `when` and `after` validated with
// JSON paths, stored graphs loaded with them, and conditions evaluated
// against inputs and step results (a skipped step reads as null).

#include "persistence/condition.hpp"

#include <set>

#include <catch2/catch.hpp>

#include "persistence/error.hpp"
#include "persistence/graph.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;

namespace {

/// A graph: `a` (echo), and `b` needing it with `fields` added.
json with_b(json fields) {
  json b = {{"fn", "noop"}, {"needs", {"a"}}};
  b.update(fields);
  return {{"steps", {{"a", {{"fn", "echo"}}}, {"b", b}, {"c", {{"fn", "noop"}}}}},
          {"inputs", {"x"}}};
}

bool rejected_at(const json& doc, const std::string& path, const std::string& part) {
  auto result = parse_graph(doc, "/tmp");
  INFO("document: " << doc.dump() << "\nerrors:\n" << render(result.errors));
  for (auto& e : result.errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

/// Step results over a JSON object, with a set of skipped steps.
struct results : json_step_results {
  results(const json& r, std::set<std::string> skipped)
    : json_step_results(r), skipped_(std::move(skipped)) {
  }
  bool skipped(const std::string& step) const override { return skipped_.count(step) > 0; }
  std::set<std::string> skipped_;
};

caf::expected<bool> eval(const json& when, const json& steps, std::set<std::string> skipped = {},
                         const json& inputs = json::object()) {
  results r{steps, std::move(skipped)};
  reference_scope scope{&inputs, &r, nullptr};
  return evaluate_condition(when, scope);
}

} // namespace

TEST_CASE("every form of when and both after rules are accepted and kept in the model",
          "[persistence][conditions]") {
  for (json when : {json("${steps.a.ok}"), json("${inputs.x}"),
                    json{{"not", "${steps.a.ok}"}},
                    json{{"not", {{"not", "${steps.a.ok}"}}}},
                    json{{"equals", {"${steps.a.verdict}", "approve"}}},
                    json{{"equals", {"${steps.a}", {{"k", {1, 2}}}}}},
                    json{{"in", {"${steps.a.n}", {1, 2, "three", nullptr}}}}}) {
    auto r = parse_graph(with_b({{"when", when}, {"after", "any_completed"}}), "/tmp");
    INFO(when.dump() << "\n" << render(r.errors));
    REQUIRE(r);
    CHECK(r.value->find("b")->when == when);
    CHECK(r.value->find("b")->after == after_rule::any_completed);
    CHECK(r.value->find("a")->when.is_null());
    CHECK(r.value->find("a")->after == after_rule::all_completed);
    // Resume loads the stored document without validating it: the same model.
    auto stored = load_stored_graph(r.value->document, "/tmp", json::object());
    REQUIRE(stored);
    CHECK(stored.value->find("b")->when == when);
    CHECK(stored.value->find("b")->after == after_rule::any_completed);
  }
}

TEST_CASE("a malformed when is rejected at its JSON path, saying which forms exist",
          "[persistence][conditions]") {
  CHECK(rejected_at(with_b({{"when", true}}), "/steps/b/when",
                    "expected a reference \"${...}\" to a boolean"));
  CHECK(rejected_at(with_b({{"when", "yes"}}), "/steps/b/when",
                    "expected exactly one reference"));
  CHECK(rejected_at(with_b({{"when", "${steps.a.ok} and more"}}), "/steps/b/when",
                    "expected exactly one reference"));
  CHECK(rejected_at(with_b({{"when", {{"or", {"${steps.a.x}", "${steps.a.y}"}}}}}),
                    "/steps/b/when/or", "unknown condition 'or' (expected not, equals or in)"));
  CHECK(rejected_at(with_b({{"when", {{"not", "${steps.a.x}"}, {"equals", {1, 2}}}}}),
                    "/steps/b/when", "got an object with 2 keys"));
  CHECK(rejected_at(with_b({{"when", {{"equals", {"${steps.a.x}"}}}}}), "/steps/b/when/equals",
                    "expected [REF, VALUE], got 1 elements"));
  CHECK(rejected_at(with_b({{"when", {{"equals", {1, 1}}}}}), "/steps/b/when/equals/0",
                    "expected a reference"));
  CHECK(rejected_at(with_b({{"when", {{"in", {"${steps.a.x}", "abc"}}}}}), "/steps/b/when/in/1",
                    "expected an array of values, got string"));
  CHECK(rejected_at(with_b({{"when", {{"equals", {"${steps.a.x}", "${inputs.x}"}}}}}),
                    "/steps/b/when/equals/1", "literal JSON and is not resolved"));
  json deep = "${steps.a.ok}";
  for (int i = 0; i < 9; ++i)
    deep = json{{"not", deep}};
  CHECK(rejected_at(with_b({{"when", deep}}), "/steps/b/when/not/not/not/not/not/not/not/not/not",
                    "conditions nest at most 8 levels deep"));
}

TEST_CASE("a when may only reference inputs and the steps its step needs, transitively",
          "[persistence][conditions]") {
  CHECK(rejected_at(with_b({{"when", "${steps.c.ok}"}}), "/steps/b/when",
                    "step 'c' is not upstream of 'b' (add it to needs)"));
  CHECK(rejected_at(with_b({{"when", {{"not", "${steps.nope.ok}"}}}}), "/steps/b/when/not",
                    "unknown step 'nope'"));
  CHECK(rejected_at(with_b({{"when", "${inputs.y}"}}), "/steps/b/when", "unknown input 'y'"));
  CHECK(rejected_at(with_b({{"when", {{"in", {"${steps.b.ok}", {true}}}}}}), "/steps/b/when/in/0",
                    "is not upstream"));
}

TEST_CASE("after takes all_completed or any_completed, and only on a step with needs",
          "[persistence][conditions]") {
  CHECK(rejected_at(with_b({{"after", "any"}}), "/steps/b/after",
                    "expected \"all_completed\" or \"any_completed\", got \"any\""));
  CHECK(rejected_at(with_b({{"after", 1}}), "/steps/b/after", "got 1"));
  json doc = {{"steps", {{"a", {{"fn", "noop"}, {"after", "any_completed"}}}}}};
  CHECK(rejected_at(doc, "/steps/a/after", "this step has none"));
}

TEST_CASE("a condition evaluates references to inputs and results, and a skipped step "
          "reads as null at any path",
          "[persistence][conditions]") {
  json steps = {{"a", {{"ok", true}, {"verdict", "revise"}, {"n", 2}}}};
  CHECK(eval("${steps.a.ok}", steps) == true);
  CHECK(eval(json{{"not", "${steps.a.ok}"}}, steps) == false);
  CHECK(eval(json{{"equals", {"${steps.a.verdict}", "revise"}}}, steps) == true);
  CHECK(eval(json{{"equals", {"${steps.a.n}", 2.0}}}, steps) == true); // JSON numbers compare by value
  CHECK(eval(json{{"in", {"${steps.a.n}", {1, 3}}}}, steps) == false);
  CHECK(eval(json{{"equals", {"${steps.s.x.y}", nullptr}}}, steps, {"s"}) == true);
  CHECK(eval(json{{"in", {"${inputs.x}", {"a", "b"}}}}, steps, {}, json{{"x", "b"}}) == true);
  auto not_bool = eval("${steps.a.verdict}", steps);
  REQUIRE_FALSE(not_bool);
  CHECK(message_of(not_bool.error())
        == "when: reference ${steps.a.verdict} is a string, expected a boolean");
  auto skipped = eval("${steps.s.ok}", steps, {"s"});
  REQUIRE_FALSE(skipped);
  CHECK(message_of(skipped.error()) == "when: reference ${steps.s.ok} is null, expected a boolean");
  auto missing = eval("${steps.a.nope}", steps);
  REQUIRE_FALSE(missing);
  CHECK(is(missing.error(), persistence_errc::bad_reference));
  CHECK(message_of(missing.error()).find("has no field 'nope'") != std::string::npos);
}
