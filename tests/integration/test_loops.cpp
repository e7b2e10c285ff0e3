// Bounded loops through the real binary: a `graph` step with `repeat` runs
// its child as iterations `revise#1`, `revise#2`, ...; a stop during
// iteration 3 and a resume run neither iteration 1 nor 2 again (nor
// iteration 3's completed steps); a loop that reaches `max` fails with
// `max_iterations`.

#include <catch2/catch.hpp>

#include <fstream>

#include "tests/integration/helpers.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// `canopy show ID --json`.
json show_doc(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

/// The number of lines of `path` (0 when it does not exist).
int lines_of(const std::string& path) {
  std::ifstream in{path};
  int n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

/// `revise` repeats `write → review (a wait)` until a reviewer approves;
/// `write` appends a line to `tally` each time it runs.
json revise_graph(const std::string& tally) {
  return json::parse(R"({
    "name": "revise",
    "inputs": ["topic"],
    "steps": {
      "revise": {
        "graph": {
          "name": "round",
          "inputs": ["draft"],
          "steps": {
            "write": {"run": ["sh", "-c", "echo ran >> \"$0\"; printf '{\"draft\": \"%s+\"}' \"$1\"",
                              ")" + tally + R"(", "${inputs.draft}"]},
            "review": {"needs": ["write"], "wait": {
              "signal": "review", "prompt": "Good enough: ${steps.write.json.draft}?",
              "schema": {"type": "object", "required": ["approved"],
                         "properties": {"approved": {"type": "boolean"}}}}}
          },
          "outputs": {"draft": "${steps.write.json.draft}"}
        },
        "with": {"draft": "${inputs.topic}"},
        "repeat": {"until": "${steps.review.value.approved}", "max": 5,
                   "carry": {"draft": "${steps.write.json.draft}"}}
      }
    },
    "outputs": {"final": "${steps.revise.draft}"}
  })");
}

/// Waits until iteration `n` of step `revise` of `id` waits for its review.
void await_iteration_waiting(const std::string& home, const std::string& id, int n) {
  json doc;
  bool ok = eventually(
    [&] {
      doc = show_doc(home, id);
      for (auto& c : doc["children"])
        if (c["iteration"] == n && c["steps"]["review"]["status"] == "waiting")
          return true;
      return false;
    },
    30s, 20ms);
  INFO(doc.dump(2));
  REQUIRE(ok);
}

void send_review(const std::string& home, const std::string& id, bool approved,
                 const std::string& expect) {
  // The wait's address is its graph position, whichever iteration is open.
  std::vector<std::string> args{"signal", id, "review", "--step", "revise/review", "--value",
                                json{{"approved", approved}}.dump(), "--json"};
  if (expect == "buffered") { // nothing takes it now: do not wait for a consumer
    args.push_back("--wait");
    args.push_back("0");
  }
  auto r = run_canopy(home, args);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out_json()["status"] == expect);
}

} // namespace

TEST_CASE("a loop stopped in its third iteration resumes there: iterations 1 and 2 never run "
          "again",
          "[integration][cli][loops]") {
  temp_dir home;
  auto tally = home.path + "/tally";
  auto file = home.path + "/revise.json";
  std::ofstream{file} << revise_graph(tally).dump();
  auto r = run_canopy(home.path, {"run", file, "--input", "topic=v", "--detach", "--json"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();

  await_iteration_waiting(home.path, id, 1);
  send_review(home.path, id, false, "consumed");
  await_iteration_waiting(home.path, id, 2);
  send_review(home.path, id, false, "consumed");
  await_iteration_waiting(home.path, id, 3);
  CHECK(lines_of(tally) == 3);

  auto stop = run_canopy(home.path, {"stop", id});
  REQUIRE(stop.exit_code == 0);
  auto stopped = show_doc(home.path, id);
  CHECK(stopped["status"] == "stopped");
  CHECK(stopped["steps"]["revise"]["status"] == "pending");
  // The answer comes while it is stopped: buffered for the third iteration's wait.
  send_review(home.path, id, true, "buffered");

  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto doc = show_doc(home.path, id);
  CHECK(doc["status"] == "completed");
  CHECK(doc["outputs"]["final"] == "v+++");
  CHECK(lines_of(tally) == 3); // nothing ran twice
  REQUIRE(doc["children"].size() == 3);
  for (auto& c : doc["children"]) {
    INFO(c["id"]);
    CHECK(c["status"] == "completed");
    CHECK(c["parent_step"] == "revise");
    CHECK(c["steps"]["write"]["attempt"] == 1);
  }
  CHECK(doc["children"][2]["iteration"] == 3);
  CHECK(doc["children"][2]["inputs"]["draft"] == "v++");
  CHECK(doc["steps"]["revise"]["result"] == json{{"draft", "v+++"}});

  auto shown = run_canopy(home.path, {"show", id, "--color", "never"});
  CHECK_THAT(shown.out, Catch::Contains("iteration 3"));
  CHECK_THAT(shown.out, Catch::Contains("revise#1"));
  CHECK_THAT(shown.out, Catch::Contains("revise#3"));
  auto logs = run_canopy(home.path, {"logs", id, "revise"});
  CHECK_THAT(logs.out, Catch::Contains("revise#2/write | {\"draft\": \"v++\"}"));
  auto events = run_canopy(home.path, {"events", id, "--json"}); // checked by the helper
  REQUIRE(events.exit_code == 0);
  CHECK_THAT(events.out, Catch::Contains("\"type\":\"step.iteration\""));
}

TEST_CASE("a loop that reaches max fails with max_iterations, unless on_max says complete",
          "[integration][cli][loops]") {
  temp_dir home;
  auto file = home.path + "/count.json";
  json doc = json::parse(R"({
    "name": "count",
    "steps": {
      "rounds": {
        "graph": {"inputs": ["n"], "steps": {"n": {"fn": "echo", "with": {"n": "${inputs.n}x"}}},
                  "outputs": {"n": "${steps.n.n}"}},
        "with": {"n": ""},
        "repeat": {"until": {"equals": ["${steps.n.n}", "xxxxxx"]}, "max": 3,
                   "carry": {"n": "${steps.n.n}"}}}
    },
    "outputs": {"n": "${steps.rounds.n}"}
  })");
  std::ofstream{file} << doc.dump();
  auto failed = run_canopy(home.path, {"run", file, "--json"});
  CHECK(failed.exit_code != 0);
  auto id = failed.out_json()["id"].get<std::string>();
  auto shown = show_doc(home.path, id);
  CHECK(shown["status"] == "failed");
  CHECK(shown["steps"]["rounds"]["status"] == "failed");
  CHECK(shown["steps"]["rounds"]["reason"] == "max_iterations");
  CHECK(shown["steps"]["rounds"]["error"] == "repeat.until did not hold after 3 iterations (max 3)");
  CHECK(shown["children"].size() == 3);

  doc["steps"]["rounds"]["repeat"]["on_max"] = "complete";
  std::ofstream{file} << doc.dump();
  auto completed = run_canopy(home.path, {"run", file, "--json"});
  INFO(completed.out << completed.err);
  CHECK(completed.exit_code == 0);
  CHECK(completed.out_json()["outputs"]["n"] == "xxx");
}

TEST_CASE("the revise_loop example revises until its critic approves, in three iterations",
          "[integration][cli][loops][examples]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"run", source_dir() + "/examples/revise_loop/revise.json",
                                  "--input", "topic=Q3 plan", "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto out = r.out_json();
  CHECK(out["outputs"]["result"] == "Q3 plan, tightened, tightened, tightened");
  auto doc = show_doc(home.path, out["id"].get<std::string>());
  CHECK(doc["children"].size() == 3);
  CHECK(doc["steps"]["revise"]["result"]["note"] == "ship it");
}
