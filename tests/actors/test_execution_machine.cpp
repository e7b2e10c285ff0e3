// The execution machine, one transition per test: no CAF, no processes, no
// sleeps. Inputs are method calls; what the machine decides is in the effects.

#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

const json one_noop = {{"steps", {{"a", {{"fn", "noop"}}}}}};
const json one_run = {{"steps", {{"a", {{"run", {"true"}}}}}}};
const json run_then_noop = {
  {"steps", {{"a", {{"run", {"true"}}}}, {"b", {{"fn", "noop"}, {"needs", {"a"}}}}}}};
const json two_runs = {{"steps", {{"a", {{"run", {"true"}}}}, {"b", {{"run", {"true"}}}}}}};
/// Starts `f` and grants the slot of step `id`; @returns the effects.
std::vector<effect> start_and_grant(machine_fixture& f, const std::string& id) {
  f.m->start(++f.now);
  f.fx();
  f.m->slot_granted(f.step(id).ticket, slot_from::node, ++f.now);
  return f.fx();
}

/// Sends `f` an in-process stop request `id`; checks that it is written
/// first, answered on its write. @returns the effects.
std::vector<effect> send_request(machine_fixture& f, const std::string& id) {
  stop_record req;
  req.id = id;
  write_batch b;
  b.stops.push_back(req);
  f.m->stop_request(req, std::move(b), ++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::write>(xs));
  CHECK(first<fx::write>(xs)->reply);
  CHECK(first<fx::write>(xs)->batch.stops.size() == 1);
  return xs;
}

} // namespace

TEST_CASE("a new execution starts its ready steps and writes that it started",
          "[actors][machine]") {
  machine_fixture f{one_run};
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(f.m->phase() == exec_phase::running);
  CHECK(f.step("a").phase == step_phase::waiting_slot);
  CHECK(count<fx::acquire_slot>(xs) == 1);
  CHECK(event_types(xs) == std::vector<std::string>{"execution.started", "step.queued"});
}

TEST_CASE("a root waits for an admission slot before it starts", "[actors][machine]") {
  machine_fixture f{one_run};
  f.env->has_admission = true;
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(f.m->phase() == exec_phase::admitting);
  CHECK(count<fx::acquire_admission>(xs) == 1);
  f.m->admitted(++f.now);
  CHECK(f.m->phase() == exec_phase::running);
}

TEST_CASE("an execution whose ancestor is halting starts nothing", "[actors][machine]") {
  machine_fixture f{one_noop};
  f.m->token()->set();
  f.m->start(++f.now);
  CHECK(f.fx().empty());
  CHECK(f.m->phase() == exec_phase::created);
}

TEST_CASE("a granted slot starts the step's runner", "[actors][machine]") {
  machine_fixture f{one_run};
  auto xs = start_and_grant(f, "a");
  CHECK(f.step("a").phase == step_phase::running_runner);
  REQUIRE(first<fx::spawn_runner>(xs));
  CHECK(first<fx::spawn_runner>(xs)->spec.process.argv == std::vector<std::string>{"true"});
}

TEST_CASE("a grant nothing waits for goes back to its pool", "[actors][machine]") {
  machine_fixture f{one_run};
  f.m->start(++f.now);
  f.fx();
  f.m->slot_granted(999, slot_from::node, ++f.now);
  CHECK(count<fx::return_grant>(f.fx()) == 1);
}

TEST_CASE("a dependent starts only once its need's completion is written",
          "[actors][machine]") {
  machine_fixture f{run_then_noop};
  start_and_grant(f, "a");
  f.m->step_done(f.idx("a"), 1, json::object(), {}, ++f.now);
  auto xs = f.fx();
  CHECK(f.step("a").phase == step_phase::completed);
  CHECK(f.step("b").phase == step_phase::idle);
  REQUIRE(first<fx::write>(xs));
  CHECK(first<fx::write>(xs)->completed == std::vector<uint32_t>{f.idx("a")});
  f.ack(xs);
  CHECK(f.step("b").phase == step_phase::completed);
}

TEST_CASE("the last step's completion and the final record are one write", "[actors][machine]") {
  machine_fixture f{run_then_noop};
  start_and_grant(f, "a");
  f.m->step_done(f.idx("a"), 1, json::object(), {}, ++f.now);
  auto xs = f.fx();
  CHECK(f.m->phase() == exec_phase::running); // `b` waits for `a`'s completion to be written
  auto ys = f.ack(xs);
  CHECK(f.step("b").phase == step_phase::completed);
  CHECK(f.m->phase() == exec_phase::finishing);
  REQUIRE(count<fx::write>(ys) == 1);
  auto w = first<fx::write>(ys);
  CHECK(w->completed == std::vector<uint32_t>{f.idx("b")});
  CHECK(w->then == after_write::report);
  REQUIRE(w->batch.executions.size() == 1);
  CHECK(w->batch.executions.front().status == execution_status::completed);
  CHECK(event_types(ys) == std::vector<std::string>{"step.started", "step.completed",
                                                     "execution.completed"});
  f.settle(std::move(ys));
  CHECK(f.m->phase() == exec_phase::done);
}

TEST_CASE("an execution whose steps all completed writes completed, reports and quits",
          "[actors][machine]") {
  machine_fixture f{one_noop, true};
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  CHECK(f.m->phase() == exec_phase::done);
  CHECK(f.m->record().status == execution_status::completed);
  REQUIRE(first<fx::report>(seen));
  CHECK(first<fx::report>(seen)->status == execution_status::completed);
  CHECK(count<fx::quit>(seen) == 1);
}

TEST_CASE("a failed attempt with retries left waits and starts again", "[actors][machine]") {
  json doc = {{"steps", {{"a", {{"run", {"false"}}, {"retries", 1}}}}}};
  machine_fixture f{doc};
  start_and_grant(f, "a");
  f.m->step_done(f.idx("a"), 1, json::object(), "exit 1", ++f.now);
  auto xs = f.fx();
  CHECK(f.step("a").phase == step_phase::retry_wait);
  CHECK(f.step("a").reason == step_reason::retry);
  REQUIRE(first<fx::timer>(xs));
  CHECK(first<fx::timer>(xs)->kind == timer_kind::retry);
  f.m->retry_due(f.idx("a"), 1, ++f.now);
  f.fx();
  CHECK(f.step("a").attempt == 2);
  CHECK(f.step("a").phase == step_phase::waiting_slot);
}

TEST_CASE("a step that fails for good halts its execution as failed", "[actors][machine]") {
  machine_fixture f{two_runs};
  f.m->start(++f.now);
  f.fx();
  f.m->slot_granted(f.step("a").ticket, slot_from::node, ++f.now);
  f.m->slot_granted(f.step("b").ticket, slot_from::node, ++f.now);
  f.fx();
  f.m->step_done(f.idx("a"), 1, json::object(), "boom", ++f.now);
  auto xs = f.fx();
  CHECK(f.m->phase() == exec_phase::halting);
  REQUIRE(first<fx::send_exit>(xs));
  CHECK(first<fx::send_exit>(xs)->reason == step_reason::sibling_failed);
  f.m->down(f.idx("b"), "stopped", ++f.now);
  f.settle(f.fx());
  CHECK(f.m->record().status == execution_status::failed);
  CHECK(f.m->record().reason == step_reason::step_failed);
  CHECK(f.step("b").phase == step_phase::idle);
  CHECK(f.step("b").reason == step_reason::sibling_failed);
}

TEST_CASE("a stop sends exits to running workers and waits for them", "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  auto xs = f.fx();
  CHECK(f.m->phase() == exec_phase::halting);
  CHECK(f.m->record().status == execution_status::stopping);
  REQUIRE(first<fx::send_exit>(xs));
  CHECK(first<fx::send_exit>(xs)->mode == stop_mode::graceful);
  CHECK(has_event(xs, "execution.stopping"));
}

TEST_CASE("a stop settles with one snapshot once every worker is down", "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.fx();
  f.m->down(f.idx("a"), "stopped", ++f.now);
  auto xs = f.fx();
  CHECK(count<fx::write>(xs) == 1);
  CHECK(first<fx::write>(xs)->then == after_write::report);
  // The store answers the request when it commits this snapshot.
  CHECK(first<fx::write>(xs)->batch.stops.empty());
  CHECK(f.step("a").phase == step_phase::idle);
  CHECK(f.step("a").reason == step_reason::requested);
  CHECK(has_event(xs, "execution.stopped"));
  f.settle(std::move(xs));
  CHECK(f.m->phase() == exec_phase::done);
}

TEST_CASE("a forced stop overtakes a graceful one", "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  f.fx();
  f.m->stop(step_reason::requested, stop_mode::force, false, ++f.now);
  auto xs = f.fx();
  REQUIRE(first<fx::send_exit>(xs));
  CHECK(first<fx::send_exit>(xs)->mode == stop_mode::force);
}

TEST_CASE("a stop from above writes nothing and reports how many events its snapshot stands "
          "for",
          "[actors][machine]") {
  machine_fixture f{one_run, true};
  start_and_grant(f, "a");
  f.m->stop(step_reason::parent_stopped, stop_mode::graceful, true, ++f.now);
  auto xs = f.fx();
  CHECK(!has_event(xs, "execution.stopping"));
  f.m->down(f.idx("a"), "stopped", ++f.now);
  xs = f.fx();
  CHECK(count<fx::write>(xs) == 0);
  REQUIRE(first<fx::report>(xs));
  auto& r = *first<fx::report>(xs);
  CHECK(r.status == execution_status::stopped);
  // No record: its `step.pending` for `a` and its `execution.stopped`.
  CHECK(r.snapshot.executions.empty());
  CHECK(r.snapshot.steps.empty());
  CHECK(r.stopped_events == 2);
  CHECK(f.step("a").phase == step_phase::idle);
  CHECK(f.step("a").reason == step_reason::parent_stopped);
  CHECK(f.m->phase() == exec_phase::done);
}

TEST_CASE("a stop that finds the execution finishing changes nothing (the store answers it "
          "no_execution)",
          "[actors][machine]") {
  machine_fixture f{one_noop};
  f.m->start(++f.now);
  auto xs = f.fx(); // the noop's completion and the final record, on their way
  REQUIRE(f.m->phase() == exec_phase::finishing);
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  auto ys = f.fx();
  CHECK(ys.empty());
  CHECK(f.m->phase() == exec_phase::finishing);
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("a stop request that finds the execution finishing is refused at once, writing "
          "nothing, and the halt does not begin",
          "[actors][machine]") {
  machine_fixture f{one_noop};
  f.m->start(++f.now);
  f.fx(); // the noop's completion and the final record, on their way
  REQUIRE(f.m->phase() == exec_phase::finishing);
  stop_record req;
  req.id = "s3";
  write_batch b;
  b.stops.push_back(req);
  CHECK_FALSE(f.m->stop_request(req, std::move(b), ++f.now));
  auto xs = f.fx();
  CHECK(count<fx::write>(xs) == 0);
  CHECK(count<fx::send_exit>(xs) == 0);
  CHECK(f.m->phase() == exec_phase::finishing);
}

TEST_CASE("an in-process stop request is answered by the write that records it stopping",
          "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  auto xs = send_request(f, "s2");
  CHECK(f.m->phase() == exec_phase::halting);
  CHECK(count<fx::write>(xs) == 1);
  auto& w = *first<fx::write>(xs);
  REQUIRE(w.batch.executions.size() == 1);
  CHECK(w.batch.executions.front().status == execution_status::stopping);
}

TEST_CASE("a stop request to an execution with nothing running is answered with its snapshot",
          "[actors][machine]") {
  machine_fixture f{one_run};
  f.m->start(++f.now);
  f.fx();
  auto xs = send_request(f, "s4");
  CHECK(count<fx::write>(xs) == 1);
  auto& w = *first<fx::write>(xs);
  CHECK(w.then == after_write::report);
  REQUIRE(!w.batch.executions.empty());
  CHECK(w.batch.executions.back().status == execution_status::stopped);
}

TEST_CASE("a stop before the start stops the execution without running a step",
          "[actors][machine]") {
  machine_fixture f{one_noop};
  f.m->stop(step_reason::shutdown, stop_mode::graceful, false, ++f.now);
  f.settle(f.fx());
  CHECK(f.m->phase() == exec_phase::done);
  CHECK(f.m->record().status == execution_status::stopped);
  CHECK(f.step("a").attempt == 0);
}

TEST_CASE("a worker that goes down without a result fails its attempt", "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->down(f.idx("a"), "killed", ++f.now);
  f.fx();
  CHECK(f.step("a").phase == step_phase::failed);
  CHECK(f.step("a").error == "worker terminated: killed");
}

TEST_CASE("a timed out sleep fails its attempt", "[actors][machine]") {
  json doc = {{"steps", {{"s", {{"fn", "sleep"}, {"with", {{"ms", 100}}}, {"timeout", "10ms"}}}}}};
  machine_fixture f{doc};
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(count<fx::timer>(xs) == 2);
  f.m->timeout(f.idx("s"), 1, ++f.now);
  f.fx();
  CHECK(f.step("s").phase == step_phase::failed);
  CHECK(f.step("s").error == "timeout");
}

TEST_CASE("a sleep that wakes completes its step", "[actors][machine]") {
  json doc = {{"steps", {{"s", {{"fn", "sleep"}, {"with", {{"ms", 5}}}}}}}};
  machine_fixture f{doc};
  f.m->start(++f.now);
  f.fx();
  f.m->wake(f.idx("s"), 1, 5, ++f.now);
  f.fx();
  CHECK(f.step("s").phase == step_phase::completed);
}

TEST_CASE("the deadline stops the execution with reason deadline", "[actors][machine]") {
  machine_fixture f{one_run};
  start_and_grant(f, "a");
  f.m->deadline(++f.now);
  f.fx();
  CHECK(f.m->final_reason() == step_reason::deadline);
  f.m->down(f.idx("a"), "stopped", ++f.now);
  f.settle(f.fx());
  CHECK(f.step("a").reason == step_reason::deadline);
}

TEST_CASE("a limit that refuses a step stops the execution that owns it",
          "[actors][machine]") {
  machine_fixture f{two_runs, false, {}, 1};
  f.m->start(++f.now);
  f.fx();
  // The queued step holds no worker: the halt completes at once.
  CHECK(f.m->phase() == exec_phase::finishing);
  CHECK(f.m->final_reason() == step_reason::max_steps);
}

TEST_CASE("a resumed execution never starts a completed step again", "[actors][machine]") {
  step_record done;
  done.step = "a";
  done.status = step_status::completed;
  done.attempt = 1;
  done.result = json::object();
  machine_fixture f{run_then_noop, false, {done}};
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(count<fx::acquire_slot>(xs) == 0);
  CHECK(f.step("a").phase == step_phase::completed);
  CHECK(f.step("b").phase == step_phase::completed);
}

TEST_CASE("no effect is emitted after quit", "[actors][machine]") {
  machine_fixture f{one_noop};
  f.m->start(++f.now);
  f.settle(f.fx());
  REQUIRE(f.m->phase() == exec_phase::done);
  f.m->stop(step_reason::requested, stop_mode::force, false, ++f.now);
  f.m->deadline(++f.now);
  CHECK(f.fx().empty());
}

TEST_CASE("step reasons convert to and from their record spelling", "[actors][machine]") {
  for (auto r : {step_reason::requested, step_reason::parent_stopped, step_reason::child_stopped,
                 step_reason::sibling_failed, step_reason::budget_exceeded,
                 step_reason::deadline, step_reason::max_steps, step_reason::max_depth,
                 step_reason::interrupted, step_reason::node_lost, step_reason::shutdown,
                 step_reason::retry, step_reason::none}) {
    step_reason back = step_reason::step_failed;
    CHECK(from_string(to_string(r), back));
    CHECK(back == r);
  }
  step_reason x;
  CHECK_FALSE(from_string("nonsense", x));
}

TEST_CASE("a wide layer starts in chunks and writes each chunk before the next one starts",
          "[actors][machine]") {
  json steps = json::object();
  auto n = execution_machine::pump_chunk * 2 + 10;
  for (size_t i = 0; i < n; ++i)
    steps["s" + std::to_string(i)] = {{"fn", "noop"}};
  machine_fixture f{json{{"steps", steps}}};
  auto completed = [&] {
    size_t k = 0;
    for (uint32_t i = 0; i < f.m->size(); ++i)
      k += f.m->step(i).phase == step_phase::completed ? 1 : 0;
    return k;
  };
  f.m->start(++f.now);
  auto xs = f.fx();
  CHECK(completed() == execution_machine::pump_chunk);
  CHECK(count<fx::yield>(xs) == 1);
  REQUIRE(first<fx::write>(xs));
  CHECK(first<fx::write>(xs)->completed.size() == execution_machine::pump_chunk);
  // Another input before the yield comes back starts nothing more.
  auto w = std::move(*first<fx::write>(xs));
  f.m->write_acknowledged(w.completed, w.then, ++f.now);
  f.fx();
  CHECK(completed() == execution_machine::pump_chunk);
  f.m->resume_pump(++f.now);
  xs = f.fx();
  CHECK(completed() == 2 * execution_machine::pump_chunk);
  CHECK(count<fx::yield>(xs) == 1);
  f.m->resume_pump(++f.now);
  xs = f.fx();
  CHECK(completed() == n);
  CHECK(count<fx::yield>(xs) == 0);
  CHECK(first<fx::write>(xs)->completed.size() == 10);
}
