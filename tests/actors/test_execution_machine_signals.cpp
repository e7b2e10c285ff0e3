// The execution machine and a runner's signal escalation (`step.signalled`):
// one event per signal sent, nothing else changes. No CAF, no processes.

#include <csignal>

#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

const json one_run = {{"steps", {{"a", {{"run", {"true"}}}}}}};

/// Starts `f` and grants the slot of step `id`: its runner runs.
void start_and_grant(machine_fixture& f, const std::string& id) {
  f.m->start(++f.now);
  f.fx();
  f.m->slot_granted(f.step(id).ticket, slot_from::node, ++f.now);
  f.fx();
  REQUIRE(f.step(id).phase == step_phase::running_runner);
}

/// The events the writes of `xs` carry, in order.
std::vector<event_record> events_of(const std::vector<effect>& xs) {
  std::vector<event_record> out;
  for (auto& e : xs)
    if (auto w = effect_as<fx::write>(e))
      for (auto& ev : w->batch.events)
        out.push_back(ev);
  return out;
}

/// What an input may not change: the phases and the records' statuses.
struct state_print {
  exec_phase phase;
  execution_status status;
  std::vector<step_phase> steps;
  std::vector<step_reason> reasons;

  explicit state_print(const execution_machine& m)
    : phase(m.phase()), status(m.record().status) {
    for (uint32_t i = 0; i < m.size(); ++i) {
      steps.push_back(m.step(i).phase);
      reasons.push_back(m.step(i).reason);
    }
  }
  bool operator==(const state_print& o) const {
    return phase == o.phase && status == o.status && steps == o.steps && reasons == o.reasons;
  }
};

} // namespace

TEST_CASE("a runner's signal during a stop writes one step.signalled event and changes nothing "
          "else",
          "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.fx();
  REQUIRE(f.m->phase() == exec_phase::halting);
  state_print before{*f.m};
  auto attempt = f.step("a").attempt;

  f.m->signalled(f.idx("a"), attempt, SIGINT, SIGTERM, 10'000, ++f.now);
  auto xs = f.fx();
  // One write of its own, holding the event and no record.
  REQUIRE(xs.size() == 1);
  auto w = first<fx::write>(xs);
  REQUIRE(w);
  CHECK(w->then == after_write::none);
  CHECK(w->batch.steps.empty());
  CHECK(w->batch.executions.empty());
  auto evs = events_of(xs);
  REQUIRE(evs.size() == 1);
  CHECK(evs[0].type == event_type::step_signalled);
  CHECK(evs[0].step == "a");
  CHECK(evs[0].execution_id == "e1");
  CHECK(evs[0].time == f.now);
  CHECK(std::holds_alternative<std::monostate>(evs[0].status)); // a step's status is not changed by it
  CHECK(evs[0].data == json{{"attempt", attempt},
                            {"signal", "SIGINT"},
                            {"next", "SIGTERM"},
                            {"next_in_ms", 10'000}});
  CHECK(state_print{*f.m} == before);

  f.m->signalled(f.idx("a"), attempt, SIGTERM, SIGKILL, 5'000, ++f.now);
  evs = events_of(f.fx());
  REQUIRE(evs.size() == 1);
  CHECK(evs[0].data["signal"] == "SIGTERM");
  CHECK(evs[0].data["next"] == "SIGKILL");
  CHECK(evs[0].data["next_in_ms"] == 5'000);
  CHECK(state_print{*f.m} == before);

  // The runner's down settles the halt with the snapshot, in one write of
  // its own after the signals.
  f.m->down(f.idx("a"), "stopped", ++f.now);
  xs = f.fx();
  REQUIRE(count<fx::write>(xs) == 1);
  CHECK(first<fx::write>(xs)->then == after_write::report);
  CHECK(event_types(xs) == std::vector<std::string>{"step.pending", "execution.stopped"});
  f.settle(std::move(xs));
  CHECK(f.m->phase() == exec_phase::done);
}

TEST_CASE("a forced stop's SIGKILL is one step.signalled event with nothing next",
          "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->stop(step_reason::requested, stop_mode::force, false, ++f.now);
  f.fx();
  f.m->signalled(f.idx("a"), f.step("a").attempt, SIGKILL, 0, -1, ++f.now);
  auto evs = events_of(f.fx());
  REQUIRE(evs.size() == 1);
  CHECK(evs[0].type == event_type::step_signalled);
  CHECK(evs[0].data["signal"] == "SIGKILL");
  CHECK(evs[0].data["next"].is_null());
  CHECK(evs[0].data["next_in_ms"].is_null());
}

TEST_CASE("a timeout's escalation writes step.signalled while the step keeps running",
          "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  state_print before{*f.m};
  f.m->signalled(f.idx("a"), f.step("a").attempt, SIGINT, SIGTERM, 300, ++f.now);
  auto xs = f.fx();
  CHECK(event_types(xs) == std::vector<std::string>{"step.signalled"});
  CHECK(state_print{*f.m} == before);
  CHECK(f.m->phase() == exec_phase::running);
  CHECK(f.step("a").phase == step_phase::running_runner);
}

TEST_CASE("a signal of a stale attempt, of a step no longer running, or after the execution is "
          "done writes nothing",
          "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  auto attempt = f.step("a").attempt;
  f.m->signalled(f.idx("a"), attempt - 1, SIGINT, SIGTERM, 10, ++f.now);
  f.m->signalled(f.idx("a"), attempt + 1, SIGINT, SIGTERM, 10, ++f.now);
  f.m->signalled(99, attempt, SIGINT, SIGTERM, 10, ++f.now); // no such step
  CHECK(f.fx().empty());

  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.fx();
  f.m->down(f.idx("a"), "stopped", ++f.now);
  auto xs = f.fx();
  // The halt is settled, the final record on its way: too late.
  REQUIRE(f.m->phase() == exec_phase::finishing);
  f.m->signalled(f.idx("a"), attempt, SIGKILL, 0, -1, ++f.now);
  CHECK(f.fx().empty());
  f.settle(std::move(xs));
  REQUIRE(f.m->phase() == exec_phase::done);
  f.m->signalled(f.idx("a"), attempt, SIGKILL, 0, -1, ++f.now);
  CHECK(f.fx().empty());
}

TEST_CASE("a child stopped from above writes its signals as ordinary events, and its compact "
          "report counts only its snapshot",
          "[actors][machine]") {
  machine_fixture f{one_run, true};
  start_and_grant(f, "a");
  f.m->stop(step_reason::parent_stopped, stop_mode::graceful, true, ++f.now);
  f.fx();
  f.m->signalled(f.idx("a"), f.step("a").attempt, SIGINT, SIGTERM, 10'000, ++f.now);
  auto xs = f.fx();
  // Written now, before the parent's subtree record can be: never part of it.
  REQUIRE(count<fx::write>(xs) == 1);
  CHECK(event_types(xs) == std::vector<std::string>{"step.signalled"});
  CHECK(count<fx::report>(xs) == 0);
  f.m->down(f.idx("a"), "stopped", ++f.now);
  xs = f.fx();
  CHECK(count<fx::write>(xs) == 0);
  REQUIRE(first<fx::report>(xs));
  // Its `step.pending` for `a` and its `execution.stopped`, as without signals.
  CHECK(first<fx::report>(xs)->stopped_events == 2);
  CHECK(first<fx::report>(xs)->snapshot.events.empty());
}
