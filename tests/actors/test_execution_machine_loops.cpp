// The execution machine's bounded loops: a `graph` step with `repeat` runs
// its child as iteration 1, 2, ... with the carried inputs, until `until`
// holds over the iteration that completed or `max` is reached (`on_max`).
// A completed iteration is adopted on resume, never run again.

#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

/// review: write → critic, repeated until the critic approves.
json revise(int max = 3, const std::string& on_max = "fail", int retries = 0) {
  json child = {{"inputs", {"draft"}},
                {"steps",
                 {{"write", {{"fn", "echo"}, {"with", {{"draft", "${inputs.draft}"}}}}},
                  {"critic",
                   {{"fn", "echo"}, {"needs", {"write"}}, {"with", {{"approved", false}}}}}}},
                {"outputs", {{"draft", "${steps.write.draft}"}}}};
  json review = {{"graph", child},
                 {"with", {{"draft", "v0"}}},
                 {"repeat",
                  {{"until", "${steps.critic.approved}"},
                   {"max", max},
                   {"carry", {{"draft", "${steps.write.draft}+"}}},
                   {"on_max", on_max}}}};
  if (retries > 0)
    review["retries"] = retries;
  return {{"steps",
           {{"review", review},
            {"publish",
             {{"fn", "echo"}, {"needs", {"review"}}, {"with", {{"text", "${steps.review.draft}"}}}}}}},
          {"outputs", {{"published", "${steps.publish.text}"}}}};
}

/// What an iteration of `revise` hands back: its steps' results.
json results(const std::string& draft, bool approved) {
  return {{"write", {{"draft", draft}}}, {"critic", {{"approved", approved}}}};
}

/// The children spawned in `xs`.
std::vector<fx::spawn_child> spawned(const std::vector<effect>& xs) {
  std::vector<fx::spawn_child> out;
  for (auto& e : xs)
    if (auto s = effect_as<fx::spawn_child>(e))
      out.push_back(*s);
  return out;
}

/// Iteration `draft` of step review completed, approved or not. @returns the effects.
std::vector<effect> iteration_completed(machine_fixture& f, const std::string& draft,
                                        bool approved) {
  f.m->child_settled(f.idx("review"), execution_status::completed, {{"draft", draft}}, {}, {},
                     ++f.now, 0, results(draft, approved));
  return f.settle(f.fx());
}

} // namespace

TEST_CASE("a repeating step runs its child again with the carried inputs until its condition "
          "holds",
          "[actors][machine][loops]") {
  machine_fixture f{revise()};
  f.m->start(++f.now);
  auto first_round = spawned(f.settle(f.fx()));
  REQUIRE(first_round.size() == 1);
  CHECK(first_round[0].record.iteration == 1);
  CHECK(f.m->iteration(f.idx("review")) == 1);
  auto first_child = f.step("review").child_id;

  auto seen = iteration_completed(f, "v0", false);
  auto second_round = spawned(seen);
  REQUIRE(second_round.size() == 1);
  CHECK(second_round[0].record.iteration == 2);
  REQUIRE(f.resolver.carried.size() == 1);
  CHECK(f.resolver.carried[0] == json{{"draft", "v0+"}});
  CHECK(f.step("review").phase == step_phase::running_child);
  CHECK(f.step("review").child_id != first_child);
  CHECK(f.step("review").attempt == 1); // an iteration is not an attempt
  CHECK(has_event(seen, "step.iteration"));
  CHECK_FALSE(has_event(seen, "step.started"));
  // The new child and the step's record naming it are one write.
  bool together = false;
  for (auto& e : seen)
    if (auto w = effect_as<fx::write>(e))
      for (auto& s : w->batch.steps)
        if (s.step == "review" && s.child_id == f.step("review").child_id)
          together = std::any_of(
            w->batch.executions.begin(), w->batch.executions.end(),
            [&](const execution_record& r) { return r.id == s.child_id && r.iteration == 2; });
  CHECK(together);

  seen = iteration_completed(f, "v0+", true);
  CHECK(spawned(seen).empty());
  CHECK(f.step("review").phase == step_phase::completed);
  CHECK(f.step("review").result == json{{"draft", "v0+"}});
  CHECK(f.m->record().status == execution_status::completed);
  CHECK(f.m->record().outputs == json{{"published", "v0+"}});
}

TEST_CASE("a loop that reaches max fails with max_iterations and is not retried",
          "[actors][machine][loops]") {
  machine_fixture f{revise(2, "fail", 3)};
  f.m->start(++f.now);
  f.settle(f.fx());
  iteration_completed(f, "v0", false);
  auto seen = iteration_completed(f, "v0+", false);
  CHECK(spawned(seen).empty());
  CHECK(f.step("review").phase == step_phase::failed);
  CHECK(f.step("review").reason == step_reason::max_iterations);
  CHECK(f.step("review").error == "repeat.until did not hold after 2 iterations (max 2)");
  CHECK_FALSE(has_event(seen, "step.retry"));
  CHECK(f.m->record().status == execution_status::failed);
}

TEST_CASE("a loop with on_max complete completes with its last iteration's outputs",
          "[actors][machine][loops]") {
  machine_fixture f{revise(2, "complete")};
  f.m->start(++f.now);
  f.settle(f.fx());
  iteration_completed(f, "v0", false);
  iteration_completed(f, "v0+", false);
  CHECK(f.step("review").phase == step_phase::completed);
  CHECK(f.step("review").result == json{{"draft", "v0+"}});
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("a loop whose condition does not evaluate fails the step",
          "[actors][machine][loops]") {
  machine_fixture f{revise()};
  f.m->start(++f.now);
  f.settle(f.fx());
  f.m->child_settled(f.idx("review"), execution_status::completed, {{"draft", "v0"}}, {}, {},
                     ++f.now, 0, json{{"write", {{"draft", "v0"}}}});
  f.settle(f.fx());
  CHECK(f.step("review").phase == step_phase::failed);
  CHECK(f.step("review").error.get<std::string>().find("repeat.until") == 0);
}

TEST_CASE("a resumed loop adopts its completed iteration and starts the next one",
          "[actors][machine][loops]") {
  // Iteration 2 completed; the machine stopped before it decided.
  step_record review;
  review.execution_id = "e1";
  review.step = "review";
  review.status = step_status::pending;
  review.reason = step_reason::interrupted;
  review.attempt = 1;
  review.child_id = "it-2";
  machine_fixture f{revise(), false, {review}};
  execution_record done;
  done.id = "it-2";
  done.status = execution_status::completed;
  done.iteration = 2;
  done.outputs = {{"draft", "v0+"}};
  f.resolver.stored_children["it-2"] = done;
  step_record write;
  write.execution_id = "it-2";
  write.step = "write";
  write.status = step_status::completed;
  write.result = {{"draft", "v0+"}};
  step_record critic = write;
  critic.step = "critic";
  critic.result = {{"approved", false}};
  f.resolver.stored_steps["it-2"] = {write, critic};

  f.m->start(++f.now);
  auto seen = spawned(f.settle(f.fx()));
  REQUIRE(seen.size() == 1); // iteration 3, not iteration 2 again
  CHECK(seen[0].record.id != "it-2");
  CHECK(seen[0].record.iteration == 3);
  CHECK(f.m->iteration(f.idx("review")) == 3);
  REQUIRE(f.resolver.carried.size() == 1);
  CHECK(f.resolver.carried[0] == json{{"draft", "v0++"}});
}

TEST_CASE("a resumed loop continues a stopped iteration under its own id",
          "[actors][machine][loops]") {
  step_record review;
  review.execution_id = "e1";
  review.step = "review";
  review.status = step_status::pending;
  review.reason = step_reason::requested;
  review.attempt = 1;
  review.child_id = "it-3";
  machine_fixture f{revise(), false, {review}};
  execution_record stopped;
  stopped.id = "it-3";
  stopped.status = execution_status::stopped;
  stopped.iteration = 3;
  f.resolver.stored_children["it-3"] = stopped;
  f.m->start(++f.now);
  auto seen = spawned(f.settle(f.fx()));
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].record.id == "it-3");
  CHECK(f.m->iteration(f.idx("review")) == 3);
  CHECK(f.resolver.carried.empty());
}

TEST_CASE("an iteration reports its steps' results to its repeating step",
          "[actors][machine][loops]") {
  json doc = {{"steps",
               {{"write", {{"fn", "echo"}, {"with", {{"draft", "a"}}}}},
                {"never", {{"fn", "noop"}, {"when", {{"equals", {"${steps.write.draft}", "b"}}}},
                           {"needs", {"write"}}}}}}};
  auto g = graph_of(doc);
  machine_init init;
  init.record.id = "it-1";
  init.record.root_id = "r0";
  init.record.parent_id = "r0";
  init.record.parent_step = "review";
  init.record.iteration = 1;
  init.graph = g;
  init.token = std::make_shared<halt_token>();
  init.scope = std::make_shared<limit_scope>("it-1", nullptr, 100, std::nullopt, std::nullopt,
                                             tree_counters{});
  init.own_scope = true;
  init.has_parent = true;
  plain_resolver resolver;
  execution_machine m{std::make_shared<machine_env>(), std::move(init), &resolver};
  int64_t now = 1000;
  m.start(++now);
  auto xs = m.flush_effects();
  const fx::report* report = nullptr;
  for (int i = 0; i < 10 && report == nullptr; ++i) {
    std::vector<effect> next;
    for (auto& e : xs) {
      if (auto r = effect_as<fx::report>(e))
        report = r;
      if (auto w = effect_as<fx::write>(e))
        m.write_acknowledged(w->completed, w->then, ++now);
    }
    if (report == nullptr)
      xs = m.flush_effects();
  }
  REQUIRE(report != nullptr);
  CHECK(report->status == execution_status::completed);
  CHECK(report->steps == json{{"write", {{"draft", "a"}}}, {"never", nullptr}});
}
