// The execution machine's conditional steps: `when` and `after` decide,
// once a step's needs are settled, whether it runs or is skipped; a skipped
// step never starts, is final across resumes, and its result reads as null.

#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

/// review → publish (when approved) / revise (when not) → notify (after any).
json branch(bool approved) {
  return {{"steps",
           {{"review", {{"fn", "echo"}, {"with", {{"approved", approved}}}}},
            {"publish",
             {{"fn", "echo"}, {"needs", {"review"}}, {"when", "${steps.review.approved}"},
              {"with", {{"did", "publish"}}}}},
            {"revise",
             {{"fn", "echo"},
              {"needs", {"review"}},
              {"when", {{"not", "${steps.review.approved}"}}},
              {"with", {{"did", "revise"}}}}},
            {"notify",
             {{"fn", "echo"},
              {"needs", {"publish", "revise"}},
              {"after", "any_completed"},
              {"with", {{"publish", "${steps.publish}"}, {"revise", "${steps.revise.did}"}}}}}}},
          {"outputs", {{"sent", "${steps.notify}"}}}};
}

/// The (step, reason) of every `step.skipped` event written in `xs`.
std::vector<std::pair<std::string, std::string>> skips(const std::vector<effect>& xs) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& ev : written_events(xs))
    if (ev.type == event_type::step_skipped)
      out.emplace_back(ev.step, to_string(ev.reason));
  return out;
}

/// How many `step.started` events of `step` the writes in `xs` hold.
size_t starts_of(const std::vector<effect>& xs, const std::string& step) {
  size_t n = 0;
  for (auto& ev : written_events(xs))
    n += ev.type == event_type::step_started && ev.step == step ? 1 : 0;
  return n;
}

step_record stored(const std::string& step, step_status status, json result = nullptr,
                   const std::string& reason = {}) {
  step_record r;
  r.execution_id = "e1";
  r.step = step;
  r.status = status;
  r.attempt = status == step_status::completed ? 1 : 0;
  r.result = std::move(result);
  from_string(reason, r.reason);
  return r;
}

} // namespace

TEST_CASE("a false condition skips its step and the other branch runs, and a join after "
          "any_completed runs and reads the skipped step as null",
          "[actors][machine][conditions]") {
  for (bool approved : {true, false}) {
    machine_fixture f{branch(approved), true};
    f.m->start(++f.now);
    auto seen = f.settle(f.fx());
    auto taken = approved ? "publish" : "revise";
    auto other = approved ? "revise" : "publish";
    CHECK(f.step(taken).phase == step_phase::completed);
    CHECK(f.step(other).phase == step_phase::skipped);
    CHECK(f.step(other).reason == step_reason::condition_false);
    CHECK(f.step(other).attempt == 0);
    CHECK(starts_of(seen, other) == 0);
    CHECK(skips(seen) == std::vector<std::pair<std::string, std::string>>{
                           {other, "condition_false"}});
    REQUIRE(f.step("notify").phase == step_phase::completed);
    json expected = approved ? json{{"publish", {{"did", "publish"}}}, {"revise", nullptr}}
                             : json{{"publish", nullptr}, {"revise", "revise"}};
    CHECK(f.step("notify").result == expected);
    CHECK(f.m->record().status == execution_status::completed);
    CHECK(f.m->record().outputs == json{{"sent", expected}});
  }
}

TEST_CASE("a step that needs a skipped step is skipped too, down the chain, and the "
          "execution completes",
          "[actors][machine][conditions]") {
  json doc = {{"steps",
               {{"a", {{"fn", "echo"}, {"with", {{"go", false}}}}},
                {"b", {{"fn", "noop"}, {"needs", {"a"}}, {"when", "${steps.a.go}"}}},
                {"c", {{"fn", "noop"}, {"needs", {"b"}}}},
                {"d", {{"fn", "noop"}, {"needs", {"a", "c"}}}}}}};
  machine_fixture f{doc, true};
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  CHECK(skips(seen) == std::vector<std::pair<std::string, std::string>>{
                         {"b", "condition_false"}, {"c", "needs_skipped"}, {"d", "needs_skipped"}});
  for (auto id : {"b", "c", "d"})
    CHECK(starts_of(seen, id) == 0);
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("after any_completed skips a step only when every one of its needs was skipped",
          "[actors][machine][conditions]") {
  json doc = {{"steps",
               {{"a", {{"fn", "echo"}, {"with", {{"go", false}}}}},
                {"x", {{"fn", "noop"}, {"needs", {"a"}}, {"when", "${steps.a.go}"}}},
                {"y", {{"fn", "noop"}, {"needs", {"a"}}, {"when", "${steps.a.go}"}}},
                {"join", {{"fn", "noop"}, {"needs", {"x", "y"}}, {"after", "any_completed"}}}}}};
  machine_fixture f{doc, true};
  f.m->start(++f.now);
  f.settle(f.fx());
  CHECK(f.step("join").phase == step_phase::skipped);
  CHECK(f.step("join").reason == step_reason::needs_skipped);
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("equals and in compare a reference's value with literal JSON",
          "[actors][machine][conditions]") {
  json doc = {{"steps",
               {{"a", {{"fn", "echo"}, {"with", {{"verdict", "revise"}, {"n", 3}}}}},
                {"eq", {{"fn", "noop"}, {"needs", {"a"}},
                        {"when", {{"equals", {"${steps.a.verdict}", "revise"}}}}}},
                {"ne", {{"fn", "noop"}, {"needs", {"a"}},
                        {"when", {{"equals", {"${steps.a.n}", "3"}}}}}}, // a number is no string
                {"in", {{"fn", "noop"}, {"needs", {"a"}},
                        {"when", {{"in", {"${steps.a.n}", {1, 2, 3}}}}}}},
                {"out", {{"fn", "noop"}, {"needs", {"a"}},
                         {"when", {{"not", {{"in", {"${steps.a.verdict}", {"ok", "fine"}}}}}}}}}}}};
  machine_fixture f{doc, true};
  f.m->start(++f.now);
  f.settle(f.fx());
  CHECK(f.step("eq").phase == step_phase::completed);
  CHECK(f.step("ne").phase == step_phase::skipped);
  CHECK(f.step("in").phase == step_phase::completed);
  CHECK(f.step("out").phase == step_phase::completed);
}

TEST_CASE("a condition whose reference is not a boolean fails its step and the execution, "
          "naming the reference",
          "[actors][machine][conditions]") {
  json doc = {{"steps",
               {{"a", {{"fn", "echo"}, {"with", {{"ok", "yes"}}}}},
                {"b", {{"fn", "noop"}, {"needs", {"a"}}, {"when", "${steps.a.ok}"}}}}}};
  machine_fixture f{doc, true};
  f.m->start(++f.now);
  f.settle(f.fx());
  CHECK(f.step("b").phase == step_phase::failed);
  CHECK(f.step("b").error == "when: reference ${steps.a.ok} is a string, expected a boolean");
  CHECK(f.m->record().status == execution_status::failed);
}

TEST_CASE("a dependent of a skipped step is decided only once the skip is written",
          "[actors][machine][conditions]") {
  json doc = {{"steps",
                {{"a", {{"fn", "echo"}, {"with", {{"go", false}}}}},
                 {"b", {{"fn", "noop"}, {"needs", {"a"}}, {"when", "${steps.a.go}"}}},
                 {"c", {{"fn", "noop"}, {"needs", {"b"}}}}}}};
  machine_fixture g{doc, true};
  g.m->start(++g.now);
  auto xs = g.ack(g.fx()); // a's completion written: b is decided
  CHECK(g.step("b").phase == step_phase::skipped);
  CHECK(g.step("c").phase == step_phase::idle); // not before b's skip is durable
  REQUIRE(first<fx::write>(xs));
  CHECK(first<fx::write>(xs)->completed == std::vector<uint32_t>{g.idx("b")});
  g.ack(xs);
  CHECK(g.step("c").phase == step_phase::skipped);
}

TEST_CASE("a stop between the decision's step and the branch leaves the branch pending, and "
          "resumed, the branch is decided from the stored result",
          "[actors][machine][conditions]") {
  // First run: review completes, its write is not yet acknowledged when the
  // stop comes, so neither branch was decided.
  machine_fixture f{branch(false), true};
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(f.step("review").phase == step_phase::completed);
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.settle(std::move(xs));
  CHECK(f.step("publish").phase == step_phase::idle);
  CHECK(f.step("revise").phase == step_phase::idle);
  // Resumed from the store: review completed, the rest pending.
  machine_fixture r{branch(false), true,
                    std::vector<step_record>{stored("review", step_status::completed, {{"approved", false}}),
                     stored("publish", step_status::pending),
                     stored("revise", step_status::pending),
                     stored("notify", step_status::pending)}};
  r.m->start(++r.now);
  auto after = r.settle(r.fx());
  CHECK(starts_of(after, "review") == 0);
  CHECK(r.step("publish").phase == step_phase::skipped);
  CHECK(r.step("revise").phase == step_phase::completed);
  CHECK(r.step("notify").phase == step_phase::completed);
}

TEST_CASE("a stored skipped step stays skipped on resume and never starts, and its dependents "
          "are decided from it",
          "[actors][machine][conditions]") {
  // Stored: review approved nothing, publish skipped; a changed input could
  // not make it run now: skipped is final.
  machine_fixture r{branch(true), true,
                    std::vector<step_record>{stored("review", step_status::completed, {{"approved", true}}),
                     stored("publish", step_status::skipped, nullptr, "condition_false"),
                     stored("revise", step_status::pending),
                     stored("notify", step_status::pending)}};
  r.m->start(++r.now);
  auto seen = r.settle(r.fx());
  CHECK(r.step("publish").phase == step_phase::skipped);
  CHECK(starts_of(seen, "publish") == 0);
  CHECK(r.step("revise").phase == step_phase::skipped); // its own condition: approved
  CHECK(r.step("notify").phase == step_phase::skipped); // both needs skipped
  CHECK(r.m->record().status == execution_status::completed);
}
