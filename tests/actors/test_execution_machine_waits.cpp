// The execution machine's `wait` steps: armed in one write with their
// deadline and prompt, ended in one write by a signal (consumed in that
// write), a failure signal (`rejected`) or the deadline (`on_timeout`); a
// stop sets a waiting step back to pending at once and keeps its deadline,
// which a resume re-arms.

#include "machine_harness.hpp"

#include "persistence/duration.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

constexpr int64_t hour = 3'600'000;

/// draft → approve (wait) → publish, with `timeout` and `on_timeout`.
json approval(const std::string& on_timeout = "fail") {
  json wait = {{"signal", "approval"},
               {"prompt", "Publish ${steps.draft.title}?"},
               {"schema",
                {{"type", "object"},
                 {"required", {"approved"}},
                 {"properties", {{"approved", {{"type", "boolean"}}}}}}},
               {"timeout", "1h"},
               {"on_timeout", on_timeout}};
  if (on_timeout == "default")
    wait["default"] = {{"approved", false}};
  return {{"steps",
           {{"draft", {{"fn", "echo"}, {"with", {{"title", "Q3"}}}}},
            {"approve", {{"needs", {"draft"}}, {"wait", wait}}},
            {"publish",
             {{"fn", "echo"}, {"needs", {"approve"}},
              {"with", {{"ok", "${steps.approve.value.approved}"}}}}}}},
          {"outputs", {{"published", "${steps.publish.ok}"}}}};
}

signal_record signal_of(json value, int64_t at, const std::string& id = "s1") {
  signal_record s;
  s.id = id;
  s.root_id = "e1";
  s.target = "e1";
  s.name = "approval";
  s.value = std::move(value);
  s.who = "user:alice";
  s.received_at = at;
  return s;
}

/// Every signal record the writes in `xs` store.
std::vector<signal_record> written_signals(const std::vector<effect>& xs) {
  std::vector<signal_record> out;
  for (auto& e : xs)
    if (auto w = effect_as<fx::write>(e)) {
      for (auto& s : w->batch.signals)
        out.push_back(s);
      for (auto& n : w->batch.nested)
        for (auto& s : n.signals)
          out.push_back(s);
    }
  return out;
}

/// The stored record of `draft`, completed (a resume's).
step_record stored_draft() {
  step_record draft;
  draft.execution_id = "e1";
  draft.step = "draft";
  draft.status = step_status::completed;
  draft.attempt = 1;
  draft.result = {{"title", "Q3"}};
  return draft;
}

/// Starts `f` and settles it until the wait is armed. @returns the effects.
std::vector<effect> arm(machine_fixture& f) {
  f.m->start(++f.now);
  return f.settle(f.fx());
}

} // namespace

TEST_CASE("a wait is armed in one write with its deadline and prompt and asks the desk",
          "[actors][machine][waits]") {
  machine_fixture f{approval()};
  auto seen = arm(f);
  auto& s = f.step("approve");
  REQUIRE(s.phase == step_phase::waiting);
  CHECK(status_of(s.phase) == step_status::waiting);
  CHECK(f.m->prompt(f.idx("approve")) == "Publish Q3?");
  CHECK(f.m->step_record_of(f.idx("approve")).prompt == "Publish Q3?");
  CHECK(s.deadline == s.started_at + hour);
  auto armed = first<fx::arm_wait>(seen);
  REQUIRE(armed);
  CHECK(armed->signal == "approval");
  CHECK(armed->idx == f.idx("approve"));
  size_t waiting_events = 0;
  for (auto& ev : written_events(seen))
    if (ev.type == event_type::step_waiting) {
      ++waiting_events;
      CHECK(to_string(ev.status) == std::string{"waiting"});
      CHECK(ev.data["signal"] == "approval");
      CHECK(ev.data["prompt"] == "Publish Q3?");
      CHECK(ev.data["deadline"] == to_rfc3339(s.deadline));
    }
  CHECK(waiting_events == 1);
  // No deadline timer until the desk said that nothing is buffered.
  CHECK(count<fx::timer>(seen) == 0);
  f.m->wait_armed(f.idx("approve"), s.attempt, ++f.now);
  auto t = f.fx();
  auto timer = first<fx::timer>(t);
  REQUIRE(timer);
  CHECK(timer->kind == timer_kind::wait_due);
  CHECK(timer->delay_ms == s.deadline - f.now);
  CHECK(f.m->record().status == execution_status::running);
}

TEST_CASE("a signal completes the wait and is marked consumed in the same write",
          "[actors][machine][waits]") {
  machine_fixture f{approval()};
  arm(f);
  auto idx = f.idx("approve");
  auto attempt = f.step("approve").attempt;
  auto sent = signal_of({{"approved", true}}, f.now);
  REQUIRE(f.m->signal_offered(idx, attempt, sent, ++f.now));
  auto w = f.fx();
  auto write = first<fx::write>(w);
  REQUIRE(write);
  CHECK(write->reply); // the write answers the desk's offer
  auto sigs = written_signals(w);
  REQUIRE(sigs.size() == 1);
  CHECK(sigs[0].state == signal_state::consumed);
  CHECK(sigs[0].wait_execution == "e1");
  CHECK(sigs[0].wait_step == "approve");
  bool completed_in_same_write = false;
  for (auto& st : write->batch.steps)
    completed_in_same_write |= st.step == "approve" && st.status == step_status::completed;
  CHECK(completed_in_same_write);
  CHECK(count<fx::disarm_wait>(w) == 1);
  f.settle(std::move(w));
  auto& s = f.step("approve");
  CHECK(s.phase == step_phase::completed);
  CHECK(s.result["value"] == json{{"approved", true}});
  CHECK(s.result["timed_out"] == false);
  CHECK(s.result["by"] == "user:alice");
  CHECK(f.m->record().status == execution_status::completed);
  CHECK(f.m->record().outputs == json{{"published", true}});
  // Offered again (a second desk round), it is not taken twice.
  auto again = signal_of({{"approved", true}}, f.now, "s2");
  CHECK_FALSE(f.m->signal_offered(idx, attempt, again, ++f.now));
}

TEST_CASE("a failure signal fails the wait with reason rejected and the execution fails",
          "[actors][machine][waits]") {
  machine_fixture f{approval()};
  arm(f);
  auto sig = signal_of(nullptr, f.now);
  sig.failure = true;
  sig.message = "not now";
  REQUIRE(f.m->signal_offered(f.idx("approve"), f.step("approve").attempt, sig, ++f.now));
  f.settle(f.fx());
  CHECK(f.step("approve").phase == step_phase::failed);
  CHECK(f.step("approve").reason == step_reason::rejected);
  CHECK(f.step("approve").error == "rejected: not now");
  CHECK(f.m->record().status == execution_status::failed);
}

TEST_CASE("the deadline fails the wait with on_timeout fail or completes it with the default",
          "[actors][machine][waits]") {
  {
    machine_fixture f{approval("fail")};
    arm(f);
    auto& s = f.step("approve");
    f.m->wait_armed(f.idx("approve"), s.attempt, ++f.now);
    f.fx();
    // Early by the wall clock: re-armed for the rest, nothing ends.
    f.m->wait_due(f.idx("approve"), s.attempt, s.deadline - 10);
    auto early = f.fx();
    REQUIRE(first<fx::timer>(early));
    CHECK(first<fx::timer>(early)->delay_ms == 10);
    CHECK(s.phase == step_phase::waiting);
    f.now = s.deadline;
    f.m->wait_due(f.idx("approve"), s.attempt, f.now);
    f.settle(f.fx());
    CHECK(f.step("approve").phase == step_phase::failed);
    CHECK(f.step("approve").reason == step_reason::wait_timeout);
    CHECK(f.m->record().status == execution_status::failed);
  }
  {
    machine_fixture f{approval("default")};
    arm(f);
    auto& s = f.step("approve");
    f.now = s.deadline + 5;
    f.m->wait_due(f.idx("approve"), s.attempt, f.now);
    f.settle(f.fx());
    CHECK(f.step("approve").phase == step_phase::completed);
    CHECK(f.step("approve").result["timed_out"] == true);
    CHECK(f.step("approve").result["value"] == json{{"approved", false}});
    CHECK(f.step("approve").result["by"].is_null());
    CHECK(f.m->record().outputs == json{{"published", false}});
  }
}

TEST_CASE("a signal received after the deadline is not taken, even by a wait armed again",
          "[actors][machine][waits]") {
  machine_fixture f{approval()};
  arm(f);
  auto& s = f.step("approve");
  CHECK_FALSE(f.m->signal_offered(f.idx("approve"), s.attempt,
                                  signal_of({{"approved", true}}, s.deadline + 1), ++f.now));
  CHECK(f.fx().empty());
  CHECK(s.phase == step_phase::waiting);
}

TEST_CASE("a stop sets a waiting step pending at once with its deadline kept, and a resume "
          "re-arms it with the same deadline",
          "[actors][machine][waits]") {
  machine_fixture f{approval()};
  arm(f);
  auto deadline = f.step("approve").deadline;
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  auto stopped = f.settle(f.fx());
  CHECK(f.m->record().status == execution_status::stopped);
  CHECK(count<fx::disarm_wait>(stopped) == 1);
  step_record pending;
  bool found = false;
  for (auto& e : stopped)
    if (auto w = effect_as<fx::write>(e))
      for (auto& r : w->batch.steps)
        if (r.step == "approve") {
          pending = r;
          found = true;
        }
  REQUIRE(found);
  CHECK(pending.status == step_status::pending);
  CHECK(pending.reason == step_reason::requested);
  CHECK(pending.deadline == deadline);
  // The snapshot had nothing to wait for: no worker, no grace.
  CHECK(count<fx::send_exit>(stopped) == 0);

  // Resume from the stored steps: draft completed, approve pending.
  machine_fixture g{approval(), false, {stored_draft(), pending}};
  g.now = f.now + 10 * 60'000; // ten minutes later
  g.m->start(++g.now);
  auto again = g.settle(g.fx());
  CHECK(g.step("approve").phase == step_phase::waiting);
  CHECK(g.step("approve").deadline == deadline);
  CHECK(g.step("approve").attempt == 2);
  g.m->wait_armed(g.idx("approve"), g.step("approve").attempt, ++g.now);
  auto t = g.fx();
  REQUIRE(first<fx::timer>(t));
  CHECK(first<fx::timer>(t)->delay_ms == deadline - g.now);
  // A signal buffered while it was stopped completes it on resume.
  REQUIRE(g.m->signal_offered(g.idx("approve"), g.step("approve").attempt,
                              signal_of({{"approved", true}}, f.now + 1), ++g.now));
  g.settle(g.fx());
  CHECK(g.m->record().status == execution_status::completed);
}

TEST_CASE("a passed deadline on resume applies on_timeout once the desk found nothing",
          "[actors][machine][waits]") {
  step_record pending;
  pending.execution_id = "e1";
  pending.step = "approve";
  pending.status = step_status::pending;
  pending.attempt = 1;
  pending.reason = step_reason::requested;
  pending.deadline = 1'000'500;
  machine_fixture f{approval("default"), false, {stored_draft(), pending}};
  f.now = 2'000'000;
  f.m->start(++f.now);
  f.settle(f.fx());
  REQUIRE(f.step("approve").phase == step_phase::waiting);
  f.m->wait_armed(f.idx("approve"), f.step("approve").attempt, ++f.now);
  auto t = f.fx();
  REQUIRE(first<fx::timer>(t));
  CHECK(first<fx::timer>(t)->delay_ms == 0);
  f.m->wait_due(f.idx("approve"), f.step("approve").attempt, ++f.now);
  f.settle(f.fx());
  CHECK(f.step("approve").result["timed_out"] == true);
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("a wait whose prompt cannot be rendered fails when it would arm",
          "[actors][machine][waits]") {
  json doc = {{"steps",
               {{"draft", {{"fn", "echo"}, {"with", {{"a", 1}}}}},
                {"approve",
                 {{"needs", {"draft"}},
                  {"wait", {{"signal", "go"}, {"prompt", "Go with ${steps.draft.b}?"}}}}}}}};
  machine_fixture f{doc};
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  CHECK(count<fx::arm_wait>(seen) == 0);
  CHECK(f.step("approve").phase == step_phase::failed);
  CHECK(f.m->record().status == execution_status::failed);
}
