// `repeat` on graph steps in the graph model: the object parsed into a
// repeat_def, each rule rejecting at the JSON path of the offending key
// (references of `until` and `carry` are into the child graph's steps), and
// stored graphs loaded back into the same repeat_def.

#include "persistence/graph.hpp"

#include <catch2/catch.hpp>

#include <string>

#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;
using canopy::core::test::rejected_at;

namespace {

/// `review` repeats `write → critic` until the critic approves, with
/// `patch` merged into its `repeat` (RFC 7396).
json review_with(const json& patch, json step_patch = json::object()) {
  auto doc = json::parse(R"({
    "inputs": ["topic"],
    "steps": {
      "review": {
        "graph": {"name": "round", "inputs": ["draft"],
                  "steps": {"write": {"fn": "echo", "with": {"draft": "${inputs.draft}"}},
                            "critic": {"fn": "echo", "needs": ["write"],
                                       "with": {"approved": true}}},
                  "outputs": {"draft": "${steps.write.draft}"}},
        "with": {"draft": "${inputs.topic}"},
        "repeat": {"until": "${steps.critic.approved}", "max": 5,
                   "carry": {"draft": "${steps.write.draft}"}}},
      "publish": {"fn": "echo", "needs": ["review"], "with": {"text": "${steps.review.draft}"}}
    }
  })");
  auto& review = doc["steps"]["review"];
  review["repeat"].merge_patch(patch);
  review.merge_patch(step_patch);
  return doc;
}

parse_result parse_ok(const json& doc) {
  auto result = parse_graph(doc, "/tmp");
  INFO("document: " << doc.dump() << "\nerrors:\n" << render(result.errors));
  REQUIRE(result);
  return result;
}


} // namespace

TEST_CASE("a repeating graph step parses into the exact repeat_def",
          "[persistence][graph][loops]") {
  auto g = parse_ok(review_with({{"on_max", "complete"}})).value;
  auto* review = g->find("review");
  REQUIRE(review != nullptr);
  REQUIRE(review->repeat != nullptr);
  CHECK(review->repeat->until == "${steps.critic.approved}");
  CHECK(review->repeat->max == 5);
  CHECK(review->repeat->carry == json{{"draft", "${steps.write.draft}"}});
  CHECK(review->repeat->on_max == on_max_rule::complete);
  CHECK(g->find("publish")->repeat == nullptr);
  // The defaults: on_max fail, nothing carried; no until with on_max complete.
  auto plain = parse_ok(review_with({{"carry", nullptr}})).value->find("review")->repeat;
  CHECK(plain->on_max == on_max_rule::fail);
  CHECK(plain->carry == json::object());
  auto counted = parse_ok(review_with({{"until", nullptr}, {"on_max", "complete"}}))
                   .value->find("review")
                   ->repeat;
  CHECK(counted->until.is_null());
  // Every condition form, over the child's steps.
  parse_ok(review_with({{"until", {{"not", "${steps.critic.approved}"}}}}));
  parse_ok(review_with({{"until", {{"equals", {"${steps.critic.approved}", true}}}}}));
  parse_ok(review_with({{"until", {{"in", {"${steps.write.draft}", {"a", "b"}}}}}}));
}

TEST_CASE("repeat is rejected at the path of what is wrong", "[persistence][graph][loops]") {
  CHECK(rejected_at(review_with({{"max", nullptr}}), "/steps/review/repeat", "missing 'max'"));
  for (auto bad : {json(0), json(1001), json(2.5), json("5"), json(-1)})
    CHECK(rejected_at(review_with({{"max", bad}}), "/steps/review/repeat/max",
                      "expected an integer from 1 to 1000"));
  CHECK(rejected_at(review_with({{"until", nullptr}}), "/steps/review/repeat",
                    "missing 'until'"));
  CHECK(rejected_at(review_with({{"on_max", "stop"}}), "/steps/review/repeat/on_max",
                    "expected \"fail\" or \"complete\", got \"stop\""));
  CHECK(rejected_at(review_with({{"untill", true}}), "/steps/review/repeat/untill",
                    "did you mean 'until'"));
  CHECK(rejected_at(review_with({{"until", "${steps.critc.approved}"}}),
                    "/steps/review/repeat/until",
                    "the child graph has no step 'critc'; did you mean 'critic'?"));
  CHECK(rejected_at(review_with({{"until", "${inputs.topic}"}}), "/steps/review/repeat/until",
                    "repeat may only reference the steps of the iteration"));
  CHECK(rejected_at(review_with({{"until", {{"equals", {"${steps.publish.text}", "x"}}}}}),
                    "/steps/review/repeat/until/equals/0", "the child graph has no step 'publish'"));
  CHECK(rejected_at(review_with({{"carry", {{"topic", "x"}}}}), "/steps/review/repeat/carry/topic",
                    "graph 'round' declares no input 'topic' (declared: draft)"));
  CHECK(rejected_at(review_with({{"carry", {{"draft", "${steps.nope.x}"}}}}),
                    "/steps/review/repeat/carry/draft", "the child graph has no step 'nope'"));
  CHECK(rejected_at(review_with({{"carry", "draft"}}), "/steps/review/repeat/carry",
                    "expected an object"));
  CHECK(rejected_at(review_with(json::object(), {{"repeat", 3}}), "/steps/review/repeat",
                    "expected an object"));
  // Only graph steps repeat.
  json doc = {{"steps", {{"a", {{"fn", "noop"}, {"repeat", {{"max", 2}}}}}}}};
  CHECK(rejected_at(doc, "/steps/a/repeat", "'repeat' is only valid on graph steps"));
}

TEST_CASE("a registered child graph's steps are checked when the loop runs, not when it parses",
          "[persistence][graph][loops]") {
  json doc = {{"steps",
               {{"review",
                 {{"graph", "reviewer"},
                  {"repeat", {{"until", "${steps.anything.ok}"}, {"max", 3},
                              {"carry", {{"whatever", "${steps.x.y}"}}}}}}}}}};
  auto g = parse_ok(doc).value;
  CHECK(g->find("review")->repeat->max == 3);
  // References into anything but the child's steps are still refused.
  doc["steps"]["review"]["repeat"]["until"] = "${inputs.x}";
  CHECK(rejected_at(doc, "/steps/review/repeat/until", "may only reference the steps"));
}

TEST_CASE("a stored graph with a repeating step loads back into the same repeat_def",
          "[persistence][graph][loops]") {
  auto parsed = parse_ok(review_with({{"on_max", "complete"}}));
  auto loaded = load_stored_graph(parsed.value->document, "/tmp", json::object());
  INFO(render(loaded.errors));
  REQUIRE(loaded);
  auto& a = *parsed.value->find("review")->repeat;
  auto* b = loaded.value->find("review")->repeat.get();
  REQUIRE(b != nullptr);
  CHECK(b->until == a.until);
  CHECK(b->max == a.max);
  CHECK(b->carry == a.carry);
  CHECK(b->on_max == a.on_max);
  for (auto bad : {json{{"max", "5"}}, json{{"on_max", "later"}}, json{{"max", 2}, {"x", 1}}}) {
    INFO(bad.dump());
    auto doc = parsed.value->document;
    doc["steps"]["review"]["repeat"] = bad;
    auto broken = load_stored_graph(doc, "/tmp", json::object());
    CHECK_FALSE(broken);
  }
}
