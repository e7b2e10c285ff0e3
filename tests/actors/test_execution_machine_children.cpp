// The execution machine with children, agents, functions and a cluster,
// one transition per test: no CAF, no processes, no sleeps.

#include "actors/fn_registry.hpp"
#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

const json one_run = {{"steps", {{"a", {{"run", {"true"}}}}}}};
const json one_child = {
  {"steps", {{"c", {{"graph", {{"steps", {{"x", {{"fn", "noop"}}}}}}}}}}}};

/// Starts `f` (its child step running) and stops it, as a request would.
void start_and_stop(machine_fixture& f) {
  f.m->start(++f.now);
  f.fx();
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.fx();
}

} // namespace

TEST_CASE("a child that completes completes its step with the child's outputs",
          "[actors][machine]") {
  machine_fixture f{one_child};
  f.m->start(++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::spawn_child>(xs));
  CHECK(f.step("c").phase == step_phase::running_child);
  f.m->child_settled(f.idx("c"), execution_status::completed, json{{"v", 1}}, {}, {}, ++f.now);
  f.fx();
  CHECK(f.step("c").phase == step_phase::completed);
  REQUIRE(f.m->results().result_of("c") != nullptr);
  CHECK(*f.m->results().result_of("c") == json{{"v", 1}});
}

namespace {

/// A parent resumed after it stopped with its `graph` step `c` pending and
/// the step's child `k1` stored as `child` (status and outputs) says.
std::unique_ptr<machine_fixture> resumed_with_child(execution_status status, json outputs) {
  step_record pending;
  pending.step = "c";
  pending.status = step_status::pending;
  pending.reason = step_reason::requested;
  pending.attempt = 1;
  pending.child_id = "k1";
  auto f = std::make_unique<machine_fixture>(one_child, false, std::vector<step_record>{pending});
  execution_record child;
  child.id = "k1";
  child.status = status;
  child.outputs = std::move(outputs);
  f->resolver.stored_children.emplace(child.id, child);
  f->m->start(++f->now);
  return f;
}

} // namespace

TEST_CASE("a resumed graph step whose child completed meanwhile takes the child's outputs "
          "without running it again",
          "[actors][machine]") {
  // The parent stopped after its child completed but before it took the
  // child's result: the step was reset to pending with the child's id.
  auto f = resumed_with_child(execution_status::completed, json{{"v", 2}});
  auto xs = f->settle(f->fx());
  CHECK(count<fx::spawn_child>(xs) == 0);
  CHECK(f->step("c").phase == step_phase::completed);
  REQUIRE(f->m->results().result_of("c") != nullptr);
  CHECK(*f->m->results().result_of("c") == json{{"v", 2}});
  CHECK(f->m->record().status == execution_status::completed);
}

TEST_CASE("a resumed graph step whose child stopped resumes the child under its id",
          "[actors][machine]") {
  auto f = resumed_with_child(execution_status::stopped, nullptr);
  auto xs = f->fx();
  REQUIRE(first<fx::spawn_child>(xs));
  CHECK(first<fx::spawn_child>(xs)->record.id == "k1");
  CHECK(f->step("c").phase == step_phase::running_child);
}

TEST_CASE("a child's first record is written before the child is spawned, so that the "
          "child's own writes come after it",
          "[actors][machine]") {
  const json two_children = {
    {"steps",
     {{"c1", {{"graph", {{"steps", {{"x", {{"fn", "noop"}}}}}}}}},
      {"c2", {{"graph", {{"steps", {{"y", {{"fn", "noop"}}}}}}}}}}}};
  machine_fixture f{two_children};
  f.m->start(++f.now);
  auto xs = f.fx();
  size_t write_at = xs.size(), spawns = 0, first_spawn = xs.size();
  for (size_t i = 0; i < xs.size(); ++i) {
    if (effect_as<fx::spawn_child>(xs[i])) {
      ++spawns;
      first_spawn = std::min(first_spawn, i);
    }
    if (effect_as<fx::write>(xs[i]) && write_at == xs.size()) {
      write_at = i;
      // Both children's `queued` records ride in it.
      auto& b = effect_as<fx::write>(xs[i])->batch;
      size_t queued = 0;
      auto count = [&](const std::vector<execution_record>& rs) {
        for (auto& r : rs)
          queued += r.status == execution_status::queued && !r.parent_id.empty();
      };
      count(b.executions);
      for (auto& n : b.nested)
        count(n.executions);
      CHECK(queued == 2);
    }
  }
  CHECK(spawns == 2);
  REQUIRE(write_at < xs.size());
  CHECK(write_at < first_spawn);
}

TEST_CASE("a child that stopped on its own puts its step back to pending and stops the parent",
          "[actors][machine]") {
  machine_fixture f{one_child};
  f.m->start(++f.now);
  f.fx();
  f.m->child_settled(f.idx("c"), execution_status::stopped, nullptr, {}, {}, ++f.now);
  f.settle(f.fx());
  CHECK(f.step("c").phase == step_phase::idle);
  CHECK(f.step("c").reason == step_reason::child_stopped);
  CHECK(f.m->record().status == execution_status::stopped);
  CHECK(f.m->record().reason == step_reason::child_stopped);
}

TEST_CASE("a child stopped with its parent adds its final batch to the parent's snapshot",
          "[actors][machine]") {
  machine_fixture f{one_child};
  start_and_stop(f);
  write_batch snap;
  execution_record child;
  child.id = "x";
  snap.executions.push_back(child);
  f.m->child_settled(f.idx("c"), execution_status::stopped, nullptr, {}, std::move(snap),
                     ++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::write>(xs));
  write_batch b = first<fx::write>(xs)->batch;
  bool found = false;
  for (auto& n : b.nested)
    for (auto& r : n.executions)
      found = found || r.id == "x";
  for (auto& r : b.executions)
    found = found || r.id == "x";
  CHECK(found);
}

TEST_CASE("the execution a stop reaches commits one subtree record for the children that "
          "reported compactly",
          "[actors][machine]") {
  machine_fixture f{one_child};
  start_and_stop(f);
  f.m->child_settled(f.idx("c"), execution_status::stopped, nullptr, {}, {}, ++f.now, 7);
  auto xs = f.fx();
  REQUIRE(first<fx::write>(xs));
  auto& b = first<fx::write>(xs)->batch;
  REQUIRE(b.subtree_stops.size() == 1);
  auto& ss = b.subtree_stops.front();
  CHECK(ss.target == f.m->record().id);
  CHECK(ss.root_id == f.m->record().root_id);
  CHECK(ss.child_reason == step_reason::parent_stopped);
  CHECK(ss.events == 7);
  CHECK(ss.time == f.now);
  // Its own records are written as ever, in the same batch.
  bool stopped = false;
  for (auto& r : b.executions)
    stopped = stopped || (r.id == ss.target && r.status == execution_status::stopped);
  CHECK(stopped);
  CHECK(f.step("c").phase == step_phase::idle);
}

TEST_CASE("a lost node puts its steps back to pending and places them again",
          "[actors][machine]") {
  machine_fixture f{one_run};
  f.env->has_cluster = true;
  f.m->start(++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::place>(xs));
  auto ticket = first<fx::place>(xs)->ticket;
  f.m->placed(f.idx("a"), 1, ticket, "w1", true, ++f.now);
  f.fx();
  CHECK(f.step("a").phase == step_phase::placing);
  CHECK(f.m->remote_started(f.idx("a"), 1));
  f.m->node_lost("w1", ++f.now);
  auto ys = f.fx();
  CHECK(has_event(ys, "step.pending"));
  CHECK(f.step("a").attempt == 2);
  CHECK(f.step("a").phase == step_phase::waiting_slot);
}

TEST_CASE("a stopped function that ignores its token is abandoned", "[actors][machine]") {
  auto fns = std::make_shared<fn_registry>();
  fns->add("slow", [](fn_context&) -> caf::expected<json> { return json::object(); });
  json doc = {{"steps", {{"f", {{"fn", "slow"}}}}}};
  parse_options opts;
  opts.fns = {"slow"};
  auto parsed = parse_graph(doc, "/tmp", opts);
  REQUIRE(parsed);
  machine_fixture f{{{"steps", {{"f", {{"fn", "noop"}}}}}}};
  f.env->fns = fns;
  f.g = parsed.value;
  machine_init init;
  init.record.id = init.record.root_id = "e2";
  init.graph = parsed.value;
  init.scope = std::make_shared<limit_scope>("e2", nullptr, 10, std::nullopt, std::nullopt,
                                             tree_counters{});
  f.m = std::make_unique<execution_machine>(f.env, std::move(init), &f.resolver);
  f.m->start(++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::start_fn>(xs));
  CHECK(f.step("f").phase == step_phase::running_fn);
  f.m->stop(step_reason::requested, stop_mode::force, false, ++f.now);
  auto ys = f.fx();
  CHECK(count<fx::set_fn_stop>(ys) == 1);
  REQUIRE(first<fx::timer>(ys));
  CHECK(first<fx::timer>(ys)->kind == timer_kind::abandon);
  CHECK(f.m->phase() == exec_phase::halting);
  f.m->abandon_fn(f.idx("f"), 1, ++f.now);
  f.settle(f.fx());
  CHECK(f.m->phase() == exec_phase::done);
  CHECK(f.step("f").phase == step_phase::idle);
  // Its late result changes nothing.
  f.m->step_done(f.idx("f"), 1, json::object(), {}, ++f.now);
  CHECK(f.fx().empty());
}

TEST_CASE("an agent step waits for a turn and runs the agent's graph when granted",
          "[actors][machine]") {
  json doc = {{"steps", {{"ask", {{"agent", "helper"}, {"message", "hi"}}}}}};
  machine_fixture f{doc};
  f.resolver.agent_graph = graph_of({{"steps", {{"x", {{"fn", "noop"}}}}}});
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(f.step("ask").phase == step_phase::waiting_turn);
  CHECK(count<fx::request_turn>(xs) == 1);
  f.m->turn_answered(f.idx("ask"), 1, turn_verdict::granted, 7, ++f.now);
  auto ys = f.fx();
  REQUIRE(first<fx::spawn_child>(ys));
  CHECK(first<fx::spawn_child>(ys)->turn == 7);
}

TEST_CASE("an agent that answers busy fails the step", "[actors][machine]") {
  json doc = {{"steps", {{"ask", {{"agent", "helper"}, {"message", "hi"}}}}}};
  machine_fixture f{doc};
  f.m->start(++f.now);
  f.fx();
  f.m->turn_answered(f.idx("ask"), 1, turn_verdict::busy, 1, ++f.now);
  f.fx();
  CHECK(f.step("ask").phase == step_phase::failed);
}

TEST_CASE("a turn granted after a stop is given back", "[actors][machine]") {
  json doc = {{"steps", {{"ask", {{"agent", "helper"}, {"message", "hi"}}}}}};
  machine_fixture f{doc};
  f.m->start(++f.now);
  f.fx();
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.fx();
  f.m->turn_answered(f.idx("ask"), 1, turn_verdict::granted, 3, ++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::release_turn>(xs));
  CHECK(first<fx::release_turn>(xs)->turn == 3);
}

