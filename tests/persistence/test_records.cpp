// Tests of the record-level rules of records.hpp that are not codecs: which
// steps a stop, a crash's recovery or a compact snapshot sets back to
// `pending`, and what that changes of a step record.

#include "persistence/records.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace canopy::core;

namespace {

/// A step record with every field set, in `status`.
step_record full_step(step_status status) {
  step_record r;
  r.execution_id = "x";
  r.step = "s";
  r.status = status;
  r.attempt = 3;
  r.result = json{{"partial", true}};
  r.error = "earlier attempt failed";
  r.reason = step_reason::retry;
  r.node = "worker-2";
  r.child_id = "child-1";
  r.pid = 4242;
  r.pid_start = 777;
  r.started_at = 100;
  r.ended_at = 0;
  r.deadline = 9000;
  r.prompt = "approve?";
  return r;
}

} // namespace

TEST_CASE("an active step record goes back to pending with the reason and the time, and "
          "keeps everything else",
          "[persistence][records]") {
  for (auto status : {step_status::running, step_status::queued, step_status::waiting}) {
    INFO(to_string(status));
    auto before = full_step(status);
    auto r = before;
    CHECK(reset_step_record(r, step_reason::interrupted, 5000));
    CHECK(r.status == step_status::pending);
    CHECK(r.reason == step_reason::interrupted);
    CHECK(r.ended_at == 5000);
    // The rest as it was: the resume counts the attempt, kills what is left
    // of the process group and re-arms a wait with the same deadline.
    auto kept = r;
    kept.status = before.status;
    kept.reason = before.reason;
    kept.ended_at = before.ended_at;
    CHECK(encode(kept) == encode(before)); // every stored field
    CHECK(r.attempt == 3);
    CHECK(r.node == "worker-2");
    CHECK(r.pid == 4242);
    CHECK(r.pid_start == 777);
    CHECK(r.started_at == 100);
    CHECK(r.deadline == 9000);
    CHECK(r.child_id == "child-1");
  }
}

TEST_CASE("a pending or final step record is left as it was", "[persistence][records]") {
  for (auto status : {step_status::pending, step_status::completed, step_status::failed,
                      step_status::skipped}) {
    INFO(to_string(status));
    auto before = full_step(status);
    auto r = before;
    CHECK_FALSE(reset_step_record(r, step_reason::interrupted, 5000));
    CHECK(r.status == status);
    CHECK(r.reason == step_reason::retry);
    CHECK(r.ended_at == 0);
    CHECK(encode(r) == encode(before));
  }
}

TEST_CASE("the steps the rule resets are exactly the active ones", "[persistence][records]") {
  for (auto status : {step_status::pending, step_status::queued, step_status::running,
                      step_status::completed, step_status::failed, step_status::skipped,
                      step_status::waiting}) {
    INFO(to_string(status));
    step_record r;
    r.status = status;
    CHECK(reset_step_record(r, step_reason::requested, 1) == is_active(status));
  }
}
