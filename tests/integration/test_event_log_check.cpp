// The event-log checker (event_log_check.hpp) on made-up logs: it passes
// the logs canopy writes, and finds each kind of violation (a checker that
// cannot fail is a defect).

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/event_log_check.hpp"

using canopy::core::event_type;
using canopy::core::step_reason;
using canopy::core::stop_result;

using namespace canopy::core::test;
using json = nlohmann::json;

namespace {

/// A log under construction: each event gets the next seq.
struct log_builder {
  std::vector<json> events;
  uint64_t seq = 0;

  log_builder& add(const std::string& type, const std::string& ex = "r",
                   const std::string& step = {}, const std::string& reason = {},
                   json data = nullptr) {
    json e = {{"seq", ++seq}, {"time", "2026-11-27T00:00:00.000Z"}, {"type", type},
              {"execution_id", ex}, {"root_id", "r"}};
    if (!step.empty())
      e["step"] = step;
    if (!reason.empty())
      e["reason"] = reason;
    if (!data.is_null())
      e["data"] = std::move(data);
    events.push_back(std::move(e));
    return *this;
  }

  log_builder& stop(const std::string& type, const std::string& id, const std::string& ex = "r") {
    return add(type, ex, {}, {}, {{"stop_id", id}});
  }
};

/// A root that runs `a`, is stopped on request, resumed, and completes.
log_builder stopped_and_resumed() {
  log_builder b;
  b.add("execution.queued").add("execution.started").add("step.started", "r", "a");
  b.add("step.completed", "r", "a").add("step.started", "r", "b");
  b.stop("stop.requested", "s1").add("execution.stopping", "r", {}, "requested");
  b.add("step.pending", "r", "b", "requested").add("execution.stopped", "r", {}, "requested");
  b.stop("stop.handled", "s1");
  b.add("execution.resumed").add("step.started", "r", "b").add("step.completed", "r", "b");
  b.add("execution.completed");
  return b;
}

bool mentions(const std::vector<std::string>& violations, const std::string& words) {
  for (auto& v : violations)
    if (v.find(words) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("the event-log checker passes a log of a stop, a resume and a completion, and any "
          "prefix of it",
          "[integration]") {
  auto b = stopped_and_resumed();
  CHECK(event_log_violations(b.events).empty());
  for (size_t n = 0; n < b.events.size(); ++n)
    CHECK(event_log_violations(std::vector<json>(b.events.begin(), b.events.begin() + n)).empty());
  // Also what may legitimately follow the end: a stop answered no_execution,
  // an agent's reply to its completed run.
  b.stop("stop.requested", "s2").stop("stop.handled", "s2").add("agent.reply");
  CHECK(event_log_violations(b.events).empty());
}

TEST_CASE("the event-log checker finds seqs out of order, events after the end and requests "
          "that come after the stop they caused",
          "[integration]") {
  SECTION("seqs must strictly increase") {
    auto b = stopped_and_resumed();
    std::swap(b.events[3], b.events[4]);
    CHECK(mentions(event_log_violations(b.events), "seqs must strictly increase"));
  }
  SECTION("a resumed run that writes after the execution.stopped a reader wrote") {
    log_builder b;
    b.add("execution.queued").add("execution.started").add("step.started", "r", "s4");
    b.add("step.pending", "r", "s4", "interrupted");
    b.add("execution.stopped", "r", {}, "interrupted");
    b.add("step.failed", "r", "s4").add("execution.failed", "r", {}, "step_failed");
    auto v = event_log_violations(b.events);
    REQUIRE(v.size() == 3); // step.failed after the end, execution.failed twice over
    CHECK(v[0] == "seq 6: step.failed of r step s4 comes after its terminal execution.stopped "
                  "(seq 5) without an execution.resumed between");
    CHECK(mentions(v, "seq 7: execution.failed of r (step_failed) is not a legal transition "
                      "from ended"));
  }
  SECTION("a stop request logged after the stop it caused") {
    log_builder b;
    b.add("execution.queued").add("execution.started").add("step.started", "r", "a");
    b.add("execution.stopping", "r", {}, "requested").add("step.pending", "r", "a", "requested");
    b.add("execution.stopped", "r", {}, "requested");
    b.stop("stop.requested", "s1").stop("stop.handled", "s1");
    auto v = event_log_violations(b.events);
    CHECK(v.size() == 2);
    CHECK(mentions(v, "seq 4: execution.stopping of r (requested) has reason requested, but no "
                      "stop.requested of r since its run began (seq 2) precedes it"));
  }
  SECTION("a request of an earlier run does not explain a later stop") {
    auto b = stopped_and_resumed();
    b.events.pop_back(); // not completed: stopped again, with no new request
    b.add("execution.stopping", "r", {}, "requested");
    b.add("execution.stopped", "r", {}, "requested");
    CHECK(event_log_violations(b.events).size() == 2);
  }
  SECTION("an answer to a request nobody made") {
    auto b = stopped_and_resumed();
    b.stop("stop.handled", "s9");
    CHECK(mentions(event_log_violations(b.events), "which no earlier stop.requested asked"));
  }
}

TEST_CASE("the event-log checker finds a completed or skipped step started and illegal "
          "status sequences",
          "[integration]") {
  SECTION("a step completed before a resume is started after it") {
    auto b = stopped_and_resumed();
    b.events.pop_back();
    b.add("step.started", "r", "a");
    CHECK(mentions(event_log_violations(b.events),
                   "seq 15: step.started of r step a starts a step recorded completed or "
                   "skipped at seq 4"));
  }
  SECTION("a skipped step is started") {
    log_builder b;
    b.add("execution.queued").add("execution.started").add("step.skipped", "r", "b",
                                                            "condition_false");
    CHECK(event_log_violations(b.events).empty());
    b.add("step.started", "r", "b");
    CHECK(mentions(event_log_violations(b.events),
                   "seq 4: step.started of r step b starts a step recorded completed or skipped "
                   "at seq 3"));
  }
  SECTION("started twice without an end and a resume between") {
    log_builder b;
    b.add("execution.queued").add("execution.started").add("execution.started");
    CHECK(mentions(event_log_violations(b.events), "is not a legal transition from running"));
  }
  SECTION("resumed while it runs, or after it completed") {
    log_builder b;
    b.add("execution.queued").add("execution.started").add("execution.resumed");
    CHECK(event_log_violations(b.events).size() == 1);
    log_builder c;
    c.add("execution.queued").add("execution.started").add("execution.completed");
    c.add("execution.resumed");
    CHECK(!event_log_violations(c.events).empty());
  }
  SECTION("a queued execution stopped before it ran starts (not resumes) when resumed") {
    log_builder b;
    b.add("execution.queued").stop("stop.requested", "s1");
    b.add("execution.stopping", "r", {}, "requested");
    b.add("execution.stopped", "r", {}, "requested");
    b.stop("stop.handled", "s1").add("execution.started").add("execution.completed");
    CHECK(event_log_violations(b.events).empty());
  }
  SECTION("the store's records convert to the same documents") {
    canopy::core::event_record e;
    e.seq = 1;
    e.type = event_type::execution_started;
    e.execution_id = "r";
    e.root_id = "r";
    canopy::core::event_record twice = e;
    twice.seq = 2;
    CHECK(event_log_violations(std::vector<canopy::core::event_record>{e, twice}).size() == 1);
  }
}
