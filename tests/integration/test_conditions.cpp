// Conditional steps through the real binary: a graph branches on what a
// subprocess printed, the branch not taken is `skipped` in `show`, the event
// log and the outputs, and a stop between the decision and the branch
// resumes without running the decision again.

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/server_test_helpers.hpp"

using namespace canopy::core::test;
using namespace canopy::core::test::server_test;
using namespace std::chrono_literals;

namespace {

/// review (a subprocess printing `{"approved": VERDICT}`) → publish when
/// approved / revise when not → notify after either. `gate`, when given,
/// sits between review and the branch: a `run` step that, the first time,
/// writes its pid to `gate` + ".pid" and sleeps (the stop's moment); later
/// it exits at once.
std::string review_graph(const temp_dir& dir, const std::string& gate = {}) {
  json steps = {
    {"review",
     {{"run", {"sh", "-c", "printf '{\"approved\": %s}' \"$V\""}},
      {"env", {{"V", "${inputs.verdict}"}}}}},
    {"publish",
     {{"fn", "echo"},
      {"needs", {gate.empty() ? "review" : "gate"}},
      {"when", "${steps.review.json.approved}"},
      {"with", {{"did", "publish"}}}}},
    {"revise",
     {{"fn", "echo"},
      {"needs", {gate.empty() ? "review" : "gate"}},
      {"when", {{"equals", {"${steps.review.json.approved}", false}}}},
      {"with", {{"did", "revise"}}}}},
    {"notify",
     {{"fn", "echo"},
      {"needs", {"publish", "revise"}},
      {"after", "any_completed"},
      {"with", {{"publish", "${steps.publish.did}"}, {"revise", "${steps.revise.did}"}}}}}};
  if (!gate.empty())
    steps["gate"] = {
      {"run",
       {"sh", "-c",
        "if [ -f \"$G\" ]; then exit 0; fi; touch \"$G\"; echo $$ > \"$G.pid\"; exec sleep 30"}},
      {"env", {{"G", gate}}},
      {"needs", {"review"}}};
  json doc = {{"name", "review_flow"},
              {"inputs", {"verdict"}},
              {"steps", steps},
              {"outputs", {{"sent", "${steps.notify}"}}}};
  return dir.write("review.json", doc.dump(2));
}

} // namespace

TEST_CASE("a graph branches on a subprocess's answer: one branch runs, the other is skipped "
          "in show, the event log and the outputs",
          "[integration][cli][conditions]") {
  temp_dir home;
  temp_dir g;
  auto file = review_graph(g);
  for (std::string verdict : {"true", "false"}) {
    INFO("verdict " << verdict);
    auto r = run_canopy(home.path, {"run", file, "--input", "verdict=" + verdict, "--json"});
    REQUIRE(r.exit_code == 0);
    auto doc = r.out_json();
    CHECK(doc["status"] == "completed");
    bool approved = verdict == "true";
    auto taken = approved ? "publish" : "revise";
    auto other = approved ? "revise" : "publish";
    CHECK(doc["outputs"]["sent"][taken] == taken);
    CHECK(doc["outputs"]["sent"][other].is_null());
    auto id = doc["id"].get<std::string>();

    auto show = run_canopy(home.path, {"show", id, "--json"});
    REQUIRE(show.exit_code == 0);
    auto steps = show.out_json()["steps"];
    CHECK(steps[taken]["status"] == "completed");
    CHECK(steps[other]["status"] == "skipped");
    CHECK(steps[other]["reason"] == "condition_false");
    CHECK(steps[other]["attempt"] == 0);
    CHECK(steps[other]["started_at"].is_null());
    CHECK(steps["notify"]["status"] == "completed");

    auto human = run_canopy(home.path, {"show", id, "--color", "never"});
    CHECK_THAT(human.out, Catch::Contains("skipped"));

    auto events = run_canopy(home.path, {"events", id, "--json"}); // checked by the helper
    REQUIRE(events.exit_code == 0);
    CHECK_THAT(events.out, Catch::Contains("\"type\":\"step.skipped\""));
    CHECK_THAT(events.out, Catch::Contains("\"step\":\"" + std::string{other} + "\""));
  }
}

TEST_CASE("a stop between the decision and the branch: resume decides the branch from the "
          "stored answer and does not run the decision again",
          "[integration][cli][conditions]") {
  temp_dir home;
  temp_dir g;
  auto gate = g.path + "/gate";
  auto file = review_graph(g, gate);
  auto r = run_canopy(home.path, {"run", file, "--input", "verdict=false", "--detach", "--json"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  REQUIRE(wait_pid_file(gate + ".pid") > 0); // review completed, gate runs
  auto stop = run_canopy(home.path, {"stop", id});
  REQUIRE(stop.exit_code == 0);
  auto stopped = run_canopy(home.path, {"show", id, "--json"}).out_json();
  CHECK(stopped["status"] == "stopped");
  CHECK(stopped["steps"]["review"]["status"] == "completed");
  CHECK(stopped["steps"]["publish"]["status"] == "pending");
  CHECK(stopped["steps"]["revise"]["status"] == "pending");

  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  REQUIRE(resumed.exit_code == 0);
  auto doc = run_canopy(home.path, {"show", id, "--json"}).out_json();
  CHECK(doc["status"] == "completed");
  CHECK(doc["steps"]["review"]["attempt"] == 1); // never run again
  CHECK(doc["steps"]["publish"]["status"] == "skipped");
  CHECK(doc["steps"]["revise"]["status"] == "completed");
  CHECK(doc["outputs"]["sent"]["revise"] == "revise");
  auto events = run_canopy(home.path, {"events", id, "--json"}); // checked by the helper
  CHECK(events.exit_code == 0);
}

TEST_CASE("a when that references a step its step does not need is rejected before anything "
          "runs, naming the JSON path",
          "[integration][cli][conditions][validation]") {
  temp_dir home;
  temp_dir g;
  auto file = g.write("bad.json", R"({"steps": {
    "a": {"fn": "echo", "with": {"ok": true}},
    "b": {"fn": "noop", "when": {"not": "${steps.a.ok}"}}}})");
  for (auto cmd : {"validate", "run"}) {
    auto r = run_canopy(home.path, {cmd, file});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("/steps/b/when/not: reference ${steps.a.ok}: step 'a' is "
                                      "not upstream of 'b' (add it to needs)"));
  }
  if (has_store(home.path)) // nothing stored
    CHECK(run_canopy(home.path, {"ls", "--json", "--all"}).out_json() == json::array());
}

TEST_CASE("over HTTP a skipped step is in the execution document and on the event stream, "
          "and a when that does not resolve is a 400 at its path",
          "[integration][server][conditions]") {
  server_process srv;
  auto c = srv.client(alice_token);
  json doc = {{"name", "branch"},
              {"inputs", {"mode"}},
              {"steps",
               {{"a", {{"fn", "echo"}, {"with", {{"mode", "${inputs.mode}"}}}}},
                {"fast", {{"fn", "noop"}, {"needs", {"a"}},
                          {"when", {{"equals", {"${steps.a.mode}", "fast"}}}}}},
                {"slow", {{"fn", "noop"}, {"needs", {"a"}},
                          {"when", {{"in", {"${steps.a.mode}", {"slow", "careful"}}}}}}},
                {"then", {{"fn", "noop"}, {"needs", {"slow"}}}}}}};
  register_graph(c, doc);
  auto id = start(c, "branch", {{"mode", "fast"}})["id"].get<std::string>();
  auto done = wait_status(c, id, "completed"); // answers are checked against the OpenAPI document
  REQUIRE(done["status"] == "completed");
  CHECK(done["steps"]["fast"]["status"] == "completed");
  CHECK(done["steps"]["slow"]["status"] == "skipped");
  CHECK(done["steps"]["slow"]["reason"] == "condition_false");
  CHECK(done["steps"]["then"]["status"] == "skipped");
  CHECK(done["steps"]["then"]["reason"] == "needs_skipped");
  auto stream = read_sse(c, "/v1/executions/" + id + "/events");
  CHECK(has_event(stream, "step.skipped", "slow"));
  CHECK(has_event(stream, "step.skipped", "then"));
  CHECK_FALSE(has_event(stream, "step.started", "slow"));

  auto bad = doc;
  bad["name"] = "bad_branch";
  bad["steps"]["then"]["when"] = "${steps.fast.ok}";
  check_error(post_json(c, "/v1/graphs", bad), 400, "invalid_graph", "/steps/then/when");
}
