#include "persistence/graph.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "persistence/error.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;

namespace fs = std::filesystem;

namespace {

// -- helpers -------------------------------------------------------------------

std::vector<graph_error> errors_of(const json& doc, const parse_options& opts = {}) {
  auto result = parse_graph(doc, "/tmp", opts);
  CHECK_FALSE(result);
  return result.errors;
}

/// Returns true when some error has exactly `path` and a message containing `part`.
bool has_error(const std::vector<graph_error>& errors, const std::string& path,
               const std::string& part = "") {
  for (auto& e : errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

/// Checks that `doc` is rejected with an error at `path` whose message has `part`.
void check_rejected(const json& doc, const std::string& path, const std::string& part = "",
                    const parse_options& opts = {}) {
  auto errors = errors_of(doc, opts);
  INFO("document: " << doc.dump() << "\nerrors:\n" << render(errors));
  CHECK(has_error(errors, path, part));
}

parse_result parse_ok(const json& doc, const parse_options& opts = {}) {
  auto result = parse_graph(doc, "/tmp", opts);
  INFO("document: " << doc.dump() << "\nerrors:\n" << render(result.errors));
  REQUIRE(result);
  CHECK(result.errors.empty());
  return result;
}

/// A graph with one step `a` of value `step`.
json one_step(const json& step) {
  return json{{"steps", {{"a", step}}}};
}

/// A fresh folder under the system temp folder, removed on destruction.
struct temp_dir {
  fs::path path;

  temp_dir() {
    auto templ = (fs::temp_directory_path() / "canopy-graph-XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }

  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }

  std::string write(const std::string& name, const std::string& text) const {
    auto p = path / name;
    fs::create_directories(p.parent_path());
    std::ofstream out{p, std::ios::binary};
    out << text;
    return p.string();
  }

  std::string write(const std::string& name, const json& doc) const {
    return write(name, doc.dump(2));
  }
};

fs::path fixtures_dir() {
#if defined(CANOPY_FIXTURES_DIR)
  return fs::path{CANOPY_FIXTURES_DIR};
#elif defined(CANOPY_SOURCE_DIR)
  return fs::path{CANOPY_SOURCE_DIR} / "tests" / "fixtures";
#else
  return fs::path{__FILE__}.parent_path().parent_path() / "fixtures";
#endif
}

json spec_example() {
  return json::parse(R"({
    "name": "research",
    "inputs": ["topic"],
    "limits": {"max_depth": 16, "max_steps": 100000, "budget": 50, "deadline": "30m"},
    "steps": {
      "search":  {"run": ["sh", "-c", "echo searching $T; sleep 2"], "env": {"T": "${inputs.topic}"}},
      "draft":   {"tool": "writer", "with": {"prompt": "${steps.search.stdout}"},
                  "needs": ["search"], "timeout": "5m", "retries": 2, "cost": 1},
      "review":  {"graph": "review", "with": {"text": "${steps.draft.stdout}"}, "needs": ["draft"]},
      "critic":  {"agent": "critic", "message": "${steps.draft.stdout}", "needs": ["draft"]},
      "wait":    {"fn": "sleep", "with": {"ms": 100}}
    },
    "outputs": {"report": "${steps.review.report}", "critique": "${steps.critic.reply}"}
  })");
}

parse_options with_tools(std::set<std::string> tools) {
  parse_options opts;
  opts.tools = std::move(tools);
  return opts;
}

} // namespace

// -- valid graphs --------------------------------------------------------------------

TEST_CASE("the SPEC example graph parses into plain data", "[persistence][graph]") {
  auto doc = spec_example();
  auto result = parse_ok(doc, with_tools({"writer"}));
  auto& g = *result.value;
  CHECK(g.name == "research");
  CHECK(g.inputs == std::vector<std::string>{"topic"});
  CHECK(g.limits.max_depth == 16);
  CHECK(g.limits.max_steps == 100000u);
  CHECK(g.limits.budget == 50.0);
  CHECK(g.limits.deadline == millis{30 * 60'000});
  CHECK(g.document == doc);
  CHECK(g.base_dir == "/tmp");
  CHECK(g.files.empty());
  CHECK(g.outputs == doc["outputs"]);
  REQUIRE(g.steps.size() == 5);
  auto search = g.find("search");
  REQUIRE(search != nullptr);
  CHECK(search->kind == step_kind::run);
  CHECK(search->argv == json({"sh", "-c", "echo searching $T; sleep 2"}));
  CHECK(search->env == std::map<std::string, std::string>{{"T", "${inputs.topic}"}});
  auto draft = g.find("draft");
  REQUIRE(draft != nullptr);
  CHECK(draft->kind == step_kind::tool);
  CHECK(draft->target == "writer");
  CHECK(draft->needs == std::vector<std::string>{"search"});
  CHECK(draft->with == json({{"prompt", "${steps.search.stdout}"}}));
  CHECK(draft->timeout == millis{5 * 60'000});
  CHECK(draft->retries == 2);
  CHECK(draft->cost == 1.0);
  auto review = g.find("review");
  REQUIRE(review != nullptr);
  CHECK(review->kind == step_kind::graph);
  CHECK(review->target == "review");
  CHECK(review->child == nullptr);
  auto critic = g.find("critic");
  REQUIRE(critic != nullptr);
  CHECK(critic->kind == step_kind::agent);
  CHECK(critic->target == "critic");
  CHECK(critic->message == json("${steps.draft.stdout}"));
  auto wait = g.find("wait");
  REQUIRE(wait != nullptr);
  CHECK(wait->kind == step_kind::fn);
  CHECK(wait->target == "sleep");
  CHECK(wait->message.is_null());
  CHECK(g.find("nope") == nullptr);
}

TEST_CASE("unset step fields take their defaults", "[persistence][graph]") {
  auto result = parse_ok(one_step({{"fn", "noop"}}));
  auto& s = result.value->steps.at(0);
  CHECK(s.id == "a");
  CHECK(s.needs.empty());
  CHECK(s.with == json::object());
  CHECK(s.message.is_null());
  CHECK(s.env.empty());
  CHECK_FALSE(s.stdin_data);
  CHECK_FALSE(s.cwd);
  CHECK_FALSE(s.timeout);
  CHECK(s.retries == 0);
  CHECK(s.retry_delay == millis{1000});
  CHECK(s.cost == 0.0);
  CHECK(s.grace.interrupt == millis{10'000});
  CHECK(s.grace.terminate == millis{5'000});
  auto& g = *result.value;
  CHECK(g.name.empty());
  CHECK(g.inputs.empty());
  CHECK_FALSE(g.limits.max_depth);
  CHECK_FALSE(g.limits.max_steps);
  CHECK_FALSE(g.limits.budget);
  CHECK_FALSE(g.limits.deadline);
  CHECK(g.outputs == json::object());
}

TEST_CASE("step fields are parsed with their types", "[persistence][graph]") {
  auto result = parse_ok(one_step({{"run", {"cat"}},
                                   {"stdin", "data"},
                                   {"cwd", "sub"},
                                   {"retry_delay", "250ms"},
                                   {"cost", 0.25},
                                   {"grace", {{"interrupt", "2s"}, {"terminate", "1h"}}}}));
  auto& s = result.value->steps.at(0);
  CHECK(s.stdin_data == std::string{"data"});
  CHECK(s.cwd == std::string{"sub"});
  CHECK(s.retry_delay == millis{250});
  CHECK(s.cost == 0.25);
  CHECK(s.grace.interrupt == millis{2000});
  CHECK(s.grace.terminate == millis{3'600'000});
}

TEST_CASE("steps come in topological order and index maps ids to positions",
          "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "a": {"fn": "noop", "needs": ["d", "b"]},
    "b": {"fn": "noop", "needs": ["c"]},
    "c": {"fn": "noop"},
    "d": {"fn": "noop", "needs": ["c"]},
    "e": {"fn": "noop"}
  }})");
  auto result = parse_ok(doc);
  auto& g = *result.value;
  REQUIRE(g.steps.size() == 5);
  std::vector<std::string> ids;
  for (auto& s : g.steps)
    ids.push_back(s.id);
  CHECK(ids == std::vector<std::string>{"c", "b", "d", "a", "e"});
  for (size_t i = 0; i < g.steps.size(); ++i) {
    CHECK(g.index.at(g.steps[i].id) == i);
    for (auto& need : g.steps[i].needs)
      CHECK(g.index.at(need) < i);
  }
  CHECK(g.index.size() == 5);
}

TEST_CASE("is_upstream follows needs transitively and only upward", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "a": {"fn": "noop"},
    "b": {"fn": "noop", "needs": ["a"]},
    "c": {"fn": "noop", "needs": ["b", "b"]},
    "x": {"fn": "noop"}
  }})");
  auto result = parse_ok(doc);
  auto& g = *result.value;
  CHECK(g.find("c")->needs == std::vector<std::string>{"b"});
  CHECK(g.is_upstream("a", "b"));
  CHECK(g.is_upstream("a", "c"));
  CHECK(g.is_upstream("b", "c"));
  CHECK_FALSE(g.is_upstream("c", "a"));
  CHECK_FALSE(g.is_upstream("b", "a"));
  CHECK_FALSE(g.is_upstream("a", "a"));
  CHECK_FALSE(g.is_upstream("x", "c"));
  CHECK_FALSE(g.is_upstream("a", "nope"));
  CHECK_FALSE(g.is_upstream("nope", "c"));
}

TEST_CASE("references to transitive ancestors and any step from outputs are accepted",
          "[persistence][graph]") {
  auto doc = json::parse(R"({
    "inputs": ["q"],
    "steps": {
      "a": {"run": ["echo", "${inputs.q}"]},
      "b": {"fn": "echo", "needs": ["a"]},
      "c": {"run": ["echo", "${steps.a.stdout} and ${steps.b}"], "needs": ["b"],
            "with": {"deep": [{"x": "${steps.a.json.0}"}]}},
      "d": {"fn": "noop"}
    },
    "outputs": {"all": ["${steps.c.stdout}", {"d": "${steps.d}"}, "${inputs.q}", 5]}
  })");
  parse_ok(doc);
}

TEST_CASE("a literal ${ is written $${ and is not a reference", "[persistence][graph]") {
  parse_ok(one_step({{"run", {"sh", "-c", "echo $${HOME} $$ $PATH"}}}));
}

// -- document shape ------------------------------------------------------------------

TEST_CASE("a document that is not an object is rejected at the root", "[persistence][graph]") {
  for (auto doc : {json::array(), json(1), json("x"), json(nullptr)}) {
    auto errors = errors_of(doc);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].path.empty());
    CHECK_THAT(errors[0].message, Catch::Contains("must be a JSON object"));
  }
}

TEST_CASE("unknown keys are rejected at their own path", "[persistence][graph]") {
  check_rejected({{"steps", {{"a", {{"fn", "noop"}}}}}, {"stepz", 1}}, "/stepz",
                 "unknown key 'stepz'");
  check_rejected({{"steps", {{"a", {{"fn", "noop"}}}}}, {"limits", {{"depth", 1}}}},
                 "/limits/depth", "unknown key 'depth'");
  check_rejected(one_step({{"fn", "noop"}, {"bogus", true}}), "/steps/a/bogus",
                 "unknown key 'bogus'");
  check_rejected(one_step({{"run", {"x"}}, {"grace", {{"kill", "1s"}}}}), "/steps/a/grace/kill",
                 "unknown key 'kill'");
  check_rejected(one_step({{"fn", "noop"}, {"a/b~c", 1}}), "/steps/a/a~1b~0c");
}

TEST_CASE("fields of the wrong type are rejected at their path", "[persistence][graph]") {
  auto step = [](json extra) {
    json s = {{"fn", "noop"}};
    s.update(extra);
    return one_step(s);
  };
  auto with_steps = [](json doc) {
    doc["steps"] = {{"a", {{"fn", "noop"}}}};
    return doc;
  };
  check_rejected(with_steps({{"name", 5}}), "/name", "expected a string");
  check_rejected(with_steps({{"name", ""}}), "/name", "empty");
  check_rejected(with_steps({{"inputs", "topic"}}), "/inputs", "expected an array");
  check_rejected(with_steps({{"inputs", {"a", 1}}}), "/inputs/1", "expected a string");
  check_rejected(with_steps({{"inputs", {"a", "b", "a"}}}), "/inputs/2", "duplicate input 'a'");
  check_rejected(with_steps({{"inputs", {"a b"}}}), "/inputs/0", "invalid input name");
  check_rejected(with_steps({{"limits", 3}}), "/limits", "expected an object");
  check_rejected(with_steps({{"limits", {{"max_depth", -1}}}}), "/limits/max_depth");
  check_rejected(with_steps({{"limits", {{"max_depth", 1.5}}}}), "/limits/max_depth");
  check_rejected(with_steps({{"limits", {{"max_steps", 0}}}}), "/limits/max_steps",
                 "integer >= 1");
  check_rejected(with_steps({{"limits", {{"max_steps", "10"}}}}), "/limits/max_steps");
  check_rejected(with_steps({{"limits", {{"budget", -0.5}}}}), "/limits/budget", ">= 0");
  check_rejected(with_steps({{"limits", {{"budget", true}}}}), "/limits/budget");
  check_rejected(with_steps({{"limits", {{"deadline", 30}}}}), "/limits/deadline",
                 "expected a duration");
  check_rejected(with_steps({{"outputs", {1, 2}}}), "/outputs", "expected an object");
  check_rejected(json::object(), "/steps", "missing 'steps'");
  check_rejected({{"steps", json::object()}}, "/steps", "at least one step");
  check_rejected({{"steps", {1}}}, "/steps");
  check_rejected({{"steps", {{"a", 1}}}}, "/steps/a", "a step must be an object");
  check_rejected({{"steps", {{"a b", {{"fn", "noop"}}}}}}, "/steps/a b", "invalid step id");
  check_rejected(step({{"needs", "b"}}), "/steps/a/needs", "expected an array");
  check_rejected(step({{"needs", {1}}}), "/steps/a/needs/0", "expected a step id");
  check_rejected(step({{"with", {1}}}), "/steps/a/with", "expected an object");
  check_rejected(step({{"env", {"A=1"}}}), "/steps/a/env", "expected an object");
  check_rejected(step({{"env", {{"A", 1}}}}), "/steps/a/env/A", "expected a string");
  check_rejected(step({{"stdin", 1}}), "/steps/a/stdin", "expected a string");
  check_rejected(step({{"cwd", json::array()}}), "/steps/a/cwd", "expected a string");
  check_rejected(step({{"retries", -1}}), "/steps/a/retries", "expected an integer >= 0");
  check_rejected(step({{"retries", 1.5}}), "/steps/a/retries");
  check_rejected(step({{"retries", "2"}}), "/steps/a/retries");
  check_rejected(step({{"cost", -1}}), "/steps/a/cost", "expected a number >= 0");
  check_rejected(step({{"cost", "1"}}), "/steps/a/cost");
  check_rejected(step({{"grace", "10s"}}), "/steps/a/grace", "expected an object");
  check_rejected(one_step({{"run", "echo hi"}}), "/steps/a/run", "non-empty array of strings");
  check_rejected(one_step({{"run", json::array()}}), "/steps/a/run", "empty array");
  check_rejected(one_step({{"run", {"echo", 1}}}), "/steps/a/run/1", "expected a string");
  check_rejected(one_step({{"fn", ""}}), "/steps/a/fn", "non-empty string");
  check_rejected(one_step({{"fn", 3}}), "/steps/a/fn");
  check_rejected(one_step({{"tool", ""}}), "/steps/a/tool", "non-empty string");
  check_rejected(one_step({{"agent", {"x"}}}), "/steps/a/agent", "non-empty string");
  check_rejected(one_step({{"plan", 1}}), "/steps/a/plan", "tool name or a non-empty argv");
  check_rejected(one_step({{"plan", json::array()}}), "/steps/a/plan");
  check_rejected(one_step({{"graph", 1}}), "/steps/a/graph", "expected a graph object");
  check_rejected(one_step({{"graph", ""}}), "/steps/a/graph");
}

TEST_CASE("a step with no kind is rejected at its path", "[persistence][graph]") {
  auto errors = errors_of(one_step({{"needs", json::array()}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a");
  CHECK(errors[0].message
        == "step 'a' has no kind (expected exactly one of run, tool, graph, plan, agent, fn, "
           "wait, llm)");
}

TEST_CASE("a step with two kinds is rejected at its path", "[persistence][graph]") {
  auto errors = errors_of(one_step({{"fn", "noop"}, {"run", {"true"}}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a");
  CHECK(errors[0].message == "step 'a' has 2 kinds (fn, run); expected exactly one");
}

TEST_CASE("every error is reported, not just the first", "[persistence][graph]") {
  auto doc = json::parse(R"({
    "bogus": 1,
    "steps": {
      "a": {"fn": "noop", "timeout": "soon"},
      "b": {"run": ["x"], "needs": ["ghost"], "retries": -2},
      "c": {}
    },
    "outputs": {"x": "${steps.zzz}"}
  })");
  auto errors = errors_of(doc);
  INFO(render(errors));
  CHECK(errors.size() == 6);
  CHECK(has_error(errors, "/bogus", "unknown key"));
  CHECK(has_error(errors, "/steps/a/timeout", "bad duration 'soon'"));
  CHECK(has_error(errors, "/steps/b/needs/0", "unknown step 'ghost'"));
  CHECK(has_error(errors, "/steps/b/retries"));
  CHECK(has_error(errors, "/steps/c", "no kind"));
  CHECK(has_error(errors, "/outputs/x", "unknown step 'zzz'"));
}

// -- dependencies --------------------------------------------------------------------

TEST_CASE("needs naming an unknown step is rejected at its index", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "a": {"fn": "noop"},
    "b": {"fn": "noop", "needs": ["a", "ghost"]}
  }})");
  auto errors = errors_of(doc);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/b/needs/1");
  CHECK(errors[0].message == "unknown step 'ghost' in needs");
}

TEST_CASE("a step needing itself is rejected", "[persistence][graph]") {
  auto errors = errors_of(one_step({{"fn", "noop"}, {"needs", {"a"}}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/needs/0");
  CHECK(errors[0].message == "step 'a' needs itself");
}

TEST_CASE("a dependency cycle is rejected with the cycle spelled out", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "a": {"fn": "noop", "needs": ["c"]},
    "b": {"fn": "noop", "needs": ["a"]},
    "c": {"fn": "noop", "needs": ["b"]},
    "d": {"fn": "noop", "needs": ["c"]},
    "e": {"fn": "noop"}
  }})");
  auto errors = errors_of(doc);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/needs");
  CHECK(errors[0].message == "dependency cycle: a -> c -> b -> a");
}

TEST_CASE("every separate dependency cycle is reported", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "a": {"fn": "noop", "needs": ["b"]},
    "b": {"fn": "noop", "needs": ["a"]},
    "x": {"fn": "noop", "needs": ["y", "a"]},
    "y": {"fn": "noop", "needs": ["x"]}
  }})");
  auto errors = errors_of(doc);
  INFO(render(errors));
  REQUIRE(errors.size() == 2);
  CHECK(has_error(errors, "/steps/a/needs", "dependency cycle: a -> b -> a"));
  CHECK(has_error(errors, "/steps/x/needs", "dependency cycle: x -> y -> x"));
}

// -- references ----------------------------------------------------------------------

TEST_CASE("a reference to an unknown input is rejected where it is written",
          "[persistence][graph]") {
  auto doc = json::parse(R"({"inputs": ["topic"], "steps": {
    "a": {"run": ["echo", "${inputs.nope}"]}
  }})");
  auto errors = errors_of(doc);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/run/1");
  CHECK(errors[0].message == "reference ${inputs.nope}: unknown input 'nope' (declared: topic)");
  check_rejected(one_step({{"run", {"echo", "${inputs.x}"}}}), "/steps/a/run/1",
                 "the graph declares no inputs");
}

TEST_CASE("a reference to an unknown step is rejected where it is written",
          "[persistence][graph]") {
  auto errors = errors_of(one_step({{"fn", "echo"}, {"with", {{"x", {"${steps.ghost.y}"}}}}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/with/x/0");
  CHECK(errors[0].message == "reference ${steps.ghost.y}: unknown step 'ghost'");
}

TEST_CASE("a reference to a step that is not upstream is rejected", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "a": {"run": ["echo"]},
    "b": {"run": ["cat"], "stdin": "${steps.a.stdout}"},
    "c": {"run": ["cat"], "needs": ["a"], "cwd": "${steps.d.stdout}"},
    "d": {"run": ["cat"], "needs": ["c"]}
  }})");
  auto errors = errors_of(doc);
  INFO(render(errors));
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].path == "/steps/b/stdin");
  CHECK(errors[0].message
        == "reference ${steps.a.stdout}: step 'a' is not upstream of 'b' (add it to needs)");
  CHECK(has_error(errors, "/steps/c/cwd", "step 'd' is not upstream of 'c'"));
}

TEST_CASE("a step referencing itself is rejected", "[persistence][graph]") {
  check_rejected(one_step({{"run", {"echo", "${steps.a.stdout}"}}}), "/steps/a/run/1",
                 "step 'a' is not upstream of 'a'");
}

TEST_CASE("references are checked in every field that resolves them", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "r": {"run": ["x", "${inputs.q1}"], "env": {"E": "${inputs.q2}"},
          "stdin": "${inputs.q3}", "cwd": "${inputs.q4}", "with": {"w": {"k": ["${inputs.q5}"]}}},
    "g": {"agent": "bot", "message": {"text": "${inputs.q6}"}},
    "p": {"plan": ["planner", "${inputs.q7}"]}
  }, "outputs": {"o": "${inputs.q8}"}})");
  auto errors = errors_of(doc);
  INFO(render(errors));
  CHECK(errors.size() == 8);
  CHECK(has_error(errors, "/steps/r/run/1", "'q1'"));
  CHECK(has_error(errors, "/steps/r/env/E", "'q2'"));
  CHECK(has_error(errors, "/steps/r/stdin", "'q3'"));
  CHECK(has_error(errors, "/steps/r/cwd", "'q4'"));
  CHECK(has_error(errors, "/steps/r/with/w/k/0", "'q5'"));
  CHECK(has_error(errors, "/steps/g/message/text", "'q6'"));
  CHECK(has_error(errors, "/steps/p/plan/1", "'q7'"));
  CHECK(has_error(errors, "/outputs/o", "'q8'"));
}

TEST_CASE("malformed references and with-references are rejected in graphs",
          "[persistence][graph]") {
  check_rejected(one_step({{"run", {"echo", "${steps.a"}}}), "/steps/a/run/1",
                 "malformed reference");
  check_rejected(one_step({{"run", {"sh", "-c", "echo ${HOME}"}}}), "/steps/a/run/2",
                 "unknown scope 'HOME'");
  check_rejected(one_step({{"fn", "echo"}, {"with", {{"x", "${with.x}"}}}}), "/steps/a/with/x",
                 "only valid in tool argv templates");
}

// -- durations -----------------------------------------------------------------------

TEST_CASE("bad durations are rejected at their path", "[persistence][graph]") {
  auto doc = json::parse(R"({
    "limits": {"deadline": "1 day"},
    "steps": {"a": {"run": ["x"], "timeout": "5", "retry_delay": "1.5s",
                    "grace": {"interrupt": "-1s", "terminate": "1d"}}}
  })");
  auto errors = errors_of(doc);
  INFO(render(errors));
  REQUIRE(errors.size() == 5);
  CHECK(has_error(errors, "/limits/deadline", "bad duration '1 day'"));
  CHECK(has_error(errors, "/steps/a/timeout", "bad duration '5'"));
  CHECK(has_error(errors, "/steps/a/retry_delay", "bad duration '1.5s'"));
  CHECK(has_error(errors, "/steps/a/grace/interrupt", "bad duration '-1s'"));
  CHECK(has_error(errors, "/steps/a/grace/terminate", "bad duration '1d'"));
}

// -- functions, tools, plans, agents ---------------------------------------------------

TEST_CASE("fn steps must name a built-in or registered function", "[persistence][graph]") {
  for (auto name : {"noop", "sleep", "echo", "fail"})
    parse_ok(one_step({{"fn", name}}));
  auto errors = errors_of(one_step({{"fn", "mine"}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/fn");
  CHECK(errors[0].message == "unknown function 'mine' (known: echo, fail, noop, sleep)");
  parse_options opts;
  opts.fns = {"mine"};
  parse_ok(one_step({{"fn", "mine"}}), opts);
  parse_ok(one_step({{"fn", "echo"}}), opts);
}

TEST_CASE("tool steps must name a registered tool", "[persistence][graph]") {
  auto errors = errors_of(one_step({{"tool", "writer"}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/tool");
  CHECK(errors[0].message == "unknown tool 'writer' (no tools are registered on this node)");
  auto listed = errors_of(one_step({{"tool", "writer"}}), with_tools({"b", "a"}));
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].message == "unknown tool 'writer' (registered: a, b)");
  auto ok = parse_ok(one_step({{"tool", "writer"}}), with_tools({"writer"}));
  CHECK(ok.value->steps[0].target == "writer");
}

TEST_CASE("plan steps take a registered tool name or an argv", "[persistence][graph]") {
  check_rejected(one_step({{"plan", "planner"}}), "/steps/a/plan", "unknown tool 'planner'");
  auto named = parse_ok(one_step({{"plan", "planner"}}), with_tools({"planner"}));
  CHECK(named.value->steps[0].kind == step_kind::plan);
  CHECK(named.value->steps[0].target == "planner");
  auto argv = parse_ok(one_step({{"plan", {"./plan.sh", "x"}}}));
  CHECK(argv.value->steps[0].argv == json({"./plan.sh", "x"}));
  CHECK(argv.value->steps[0].target.empty());
}

// -- inline commands -------------------------------------------------------------

namespace {

/// Parse options of a node that refuses inline commands.
parse_options no_inline(std::set<std::string> tools = {}) {
  parse_options opts;
  opts.tools = std::move(tools);
  opts.allow_inline = false;
  return opts;
}

/// The errors with code `inline_commands_disabled`.
std::vector<graph_error> inline_refusals(const std::vector<graph_error>& errors) {
  std::vector<graph_error> result;
  for (auto& e : errors)
    if (e.code == "inline_commands_disabled")
      result.push_back(e);
  return result;
}

} // namespace

TEST_CASE("a run step is refused with its code when inline commands are disabled",
          "[persistence][graph]") {
  auto errors = errors_of(one_step({{"run", {"echo", "hi"}}}), no_inline());
  INFO(render(errors));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/run");
  CHECK(errors[0].code == "inline_commands_disabled");
  CHECK_THAT(errors[0].message, Catch::StartsWith("inline commands are disabled on this node"));
  // Allowed by default.
  auto ok = parse_ok(one_step({{"run", {"echo", "hi"}}}));
  CHECK(ok.value->steps[0].kind == step_kind::run);
}

TEST_CASE("an argv plan step is refused but a tool plan step is not when inline commands "
          "are disabled",
          "[persistence][graph]") {
  auto errors = errors_of(one_step({{"plan", {"./plan.sh"}}}), no_inline({"planner"}));
  INFO(render(errors));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/plan");
  CHECK(errors[0].code == "inline_commands_disabled");
  auto named = parse_ok(one_step({{"plan", "planner"}}), no_inline({"planner"}));
  CHECK(named.value->steps[0].target == "planner");
  auto tool = parse_ok(one_step({{"tool", "planner"}}), no_inline({"planner"}));
  CHECK(tool.value->steps[0].kind == step_kind::tool);
}

TEST_CASE("inline commands in an inline child graph are refused at the child's path",
          "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "ok": {"fn": "noop"},
    "sub": {"graph": {"steps": {"deep": {"graph": {"steps": {"r": {"run": ["true"]}}}},
                                "p": {"plan": ["./plan.sh"]},
                                "f": {"fn": "nope"}}}}
  }})");
  auto errors = errors_of(doc, no_inline());
  INFO(render(errors));
  auto refused = inline_refusals(errors);
  REQUIRE(refused.size() == 2);
  CHECK(has_error(refused, "/steps/sub/graph/steps/deep/graph/steps/r/run", "inline commands"));
  CHECK(has_error(refused, "/steps/sub/graph/steps/p/plan", "inline commands"));
  // Other errors keep an empty code.
  REQUIRE(errors.size() == 3);
  CHECK(has_error(errors, "/steps/sub/graph/steps/f/fn", "unknown function 'nope'"));
  for (auto& e : errors)
    if (e.path == "/steps/sub/graph/steps/f/fn")
      CHECK(e.code.empty());
}

TEST_CASE("inline commands in a child graph file are refused at the including step's path",
          "[persistence][graph]") {
  temp_dir dir;
  auto root = dir.write("root.json", json::parse(R"({"steps": {
    "review": {"graph": "sub/review.json"}
  }})"));
  dir.write("sub/review.json", json::parse(R"({"steps": {"a": {"run": ["true"]}}})"));
  auto refused = parse_graph_file(root, no_inline());
  INFO(render(refused.errors));
  REQUIRE_FALSE(refused);
  REQUIRE(refused.errors.size() == 1);
  CHECK(refused.errors[0].path == "/steps/review/graph/steps/a/run");
  CHECK(refused.errors[0].code == "inline_commands_disabled");
  // The same files with inline commands allowed: accepted.
  CHECK(parse_graph_file(root));
  // A stored bundle is refused too (resume on a node that disallows them).
  auto ok = parse_graph_file(root);
  REQUIRE(ok);
  json files = json::object();
  for (auto& [path, doc] : ok.value->files)
    files[path] = doc;
  auto bundle = parse_graph_bundle(ok.value->document, ok.value->base_dir, files, no_inline());
  REQUIRE(bundle.errors.size() == 1);
  CHECK(bundle.errors[0].code == "inline_commands_disabled");
}

TEST_CASE("errors other than inline refusals have an empty code", "[persistence][graph]") {
  auto errors = errors_of(json::parse(R"({"oops": 1, "steps": {"a": {"fn": "noop", "needs": ["x"]},
                                          "b": {"tool": "ghost"}, "c": {"timeout": "1y"}}})"));
  INFO(render(errors));
  REQUIRE(errors.size() >= 4);
  for (auto& e : errors)
    CHECK(e.code.empty());
}

TEST_CASE("grace_set records whether a step had its own grace", "[persistence][graph]") {
  auto result = parse_ok(json::parse(R"({"steps": {"a": {"fn": "noop"},
    "b": {"fn": "noop", "grace": {"interrupt": "1s"}}, "c": {"fn": "noop", "grace": {}}}})"));
  auto& g = *result.value;
  CHECK_FALSE(g.find("a")->grace_set);
  CHECK(g.find("b")->grace_set);
  CHECK(g.find("b")->grace.interrupt == millis{1000});
  CHECK(g.find("b")->grace.terminate == millis{5000});
  CHECK(g.find("c")->grace_set);
}

TEST_CASE("message is only allowed on agent steps", "[persistence][graph]") {
  auto errors = errors_of(one_step({{"fn", "noop"}, {"message", "hi"}}));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/a/message");
  CHECK(errors[0].message == "'message' is only valid on agent steps");
  auto ok = parse_ok(one_step({{"agent", "critic"}, {"message", {{"k", 1}}}}));
  CHECK(ok.value->steps[0].message == json({{"k", 1}}));
}

// -- child graphs --------------------------------------------------------------------

TEST_CASE("an inline graph step is parsed into a child graph", "[persistence][graph]") {
  auto doc = json::parse(R"({"inputs": ["t"], "steps": {
    "sub": {"graph": {"inputs": ["x"], "steps": {"e": {"fn": "echo", "with": {"v": "${inputs.x}"}}},
                      "outputs": {"v": "${steps.e.v}"}},
            "with": {"x": "${inputs.t}"}}
  }})");
  auto result = parse_ok(doc);
  auto& s = result.value->steps.at(0);
  CHECK(s.kind == step_kind::graph);
  REQUIRE(s.child != nullptr);
  CHECK(s.child->name == "sub");
  CHECK(s.child->inputs == std::vector<std::string>{"x"});
  CHECK(s.child->base_dir == "/tmp");
  CHECK(s.child->document == doc["steps"]["sub"]["graph"]);
  CHECK(s.child->find("e") != nullptr);
  CHECK(result.value->files.empty());
}

TEST_CASE("errors inside an inline graph carry the step's path", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "sub": {"graph": {"steps": {"e": {"fn": "noop", "oops": 1}, "f": {"run": ["${inputs.z}"]}}}}
  }})");
  auto errors = errors_of(doc);
  INFO(render(errors));
  REQUIRE(errors.size() == 2);
  CHECK(has_error(errors, "/steps/sub/graph/steps/e/oops", "unknown key 'oops'"));
  CHECK(has_error(errors, "/steps/sub/graph/steps/f/run/0", "unknown input 'z'"));
}

TEST_CASE("a graph step's with must match the child's inputs", "[persistence][graph]") {
  auto doc = json::parse(R"({"steps": {
    "sub": {"graph": {"inputs": ["x", "y"], "steps": {"e": {"fn": "noop"}}},
            "with": {"x": 1, "extra": 2}}
  }})");
  auto errors = errors_of(doc);
  INFO(render(errors));
  REQUIRE(errors.size() == 2);
  CHECK(has_error(errors, "/steps/sub/with", "missing input 'y' of graph 'sub'"));
  CHECK(has_error(errors, "/steps/sub/with/extra", "graph 'sub' declares no input 'extra'"));
  check_rejected(json::parse(R"({"steps": {
    "sub": {"graph": {"inputs": ["x"], "steps": {"e": {"fn": "noop"}}}}}})"),
                 "/steps/sub/with", "missing input 'x'");
}

TEST_CASE("a registered graph name leaves the child unparsed", "[persistence][graph]") {
  auto result = parse_ok(one_step({{"graph", "review"}, {"with", {{"anything", 1}}}}));
  auto& s = result.value->steps.at(0);
  CHECK(s.kind == step_kind::graph);
  CHECK(s.target == "review");
  CHECK(s.child == nullptr);
  CHECK(result.value->files.empty());
}

TEST_CASE("recursion past max_depth is rejected", "[persistence][graph]") {
  auto nest = [](int levels) {
    json doc = {{"steps", {{"leaf", {{"fn", "noop"}}}}}};
    for (int i = 0; i < levels; ++i)
      doc = {{"steps", {{"g", {{"graph", doc}}}}}};
    return doc;
  };
  parse_ok(nest(16));
  auto errors = errors_of(nest(17));
  REQUIRE(errors.size() == 1);
  std::string path;
  for (int i = 0; i < 17; ++i)
    path += "/steps/g/graph";
  CHECK(errors[0].path == path);
  CHECK_THAT(errors[0].message, Catch::StartsWith("max_depth 16 exceeded"));
  // max_depth 1 allows children, not grandchildren (runtime/docs/reference/graph-format.md#limits).
  auto one = nest(1);
  one["limits"] = {{"max_depth", 1}};
  parse_ok(one);
  auto two = nest(2);
  two["limits"] = {{"max_depth", 1}};
  auto deep = errors_of(two);
  REQUIRE(deep.size() == 1);
  CHECK(deep[0].path == "/steps/g/graph/steps/g/graph");
  CHECK_THAT(deep[0].message, Catch::StartsWith("max_depth 1 exceeded"));
  // max_depth 0: no child at all, not even a registered one.
  check_rejected({{"limits", {{"max_depth", 0}}}, {"steps", {{"g", {{"graph", "named"}}}}}},
                 "/steps/g/graph", "max_depth 0 exceeded");
}

TEST_CASE("a child's limits can only tighten max_depth", "[persistence][graph]") {
  // The child asks for more depth than the root allows: the root's limit wins.
  auto loosen = json::parse(R"({"limits": {"max_depth": 1}, "steps": {
    "g": {"graph": {"limits": {"max_depth": 10}, "steps": {
      "h": {"graph": {"steps": {"x": {"fn": "noop"}}}}}}}}})");
  check_rejected(loosen, "/steps/g/graph/steps/h/graph", "max_depth 1 exceeded");
  // The child tightens: its own children are fine at depth 1, not at depth 2.
  auto tighten = json::parse(R"({"steps": {
    "g": {"graph": {"limits": {"max_depth": 1}, "steps": {
      "h": {"graph": {"steps": {"x": {"fn": "noop"}}}}}}}}})");
  check_rejected(tighten, "/steps/g/graph/steps/h/graph", "max_depth 1 exceeded");
  auto ok = json::parse(R"({"steps": {
    "g": {"graph": {"limits": {"max_depth": 2}, "steps": {
      "h": {"graph": {"steps": {"x": {"fn": "noop"}}}}}}}}})");
  parse_ok(ok);
  // The caller's options count too: depth and inherited max_depth.
  parse_options opts;
  opts.depth = 3;
  opts.max_depth = 3;
  check_rejected(one_step({{"graph", "x"}}), "/steps/a/graph", "max_depth 3 exceeded", opts);
}

// -- graph files ---------------------------------------------------------------------

TEST_CASE("a graph step loads a file relative to the parent's folder", "[persistence][graph]") {
  temp_dir dir;
  auto root = dir.write("root.json", json::parse(R"({"steps": {
    "review": {"graph": "sub/review.json", "with": {"text": "hi"}}
  }})"));
  auto review_doc = json::parse(R"({"inputs": ["text"], "steps": {
    "inner": {"graph": "../leaf.json"},
    "again": {"graph": "leaf2.json"}
  }})");
  auto review = dir.write("sub/review.json", review_doc);
  auto leaf_doc = json::parse(R"({"name": "the-leaf", "steps": {"x": {"fn": "noop"}}})");
  auto leaf = dir.write("leaf.json", leaf_doc);
  auto leaf2 = dir.write("sub/leaf2.json", leaf_doc);
  auto result = parse_graph_file(root);
  INFO(render(result.errors));
  REQUIRE(result);
  auto& g = *result.value;
  CHECK(g.name == "root");
  CHECK(g.base_dir == dir.path.string());
  REQUIRE(g.files.size() == 3);
  CHECK(g.files.at(review) == review_doc);
  CHECK(g.files.at(leaf) == leaf_doc);
  CHECK(g.files.at(leaf2) == leaf_doc);
  auto child = g.find("review")->child;
  REQUIRE(child != nullptr);
  CHECK(child->name == "review");
  CHECK(child->base_dir == (dir.path / "sub").string());
  CHECK(child->document == review_doc);
  CHECK(child->files.size() == 2);
  CHECK(child->files.count(leaf) == 1);
  auto inner = child->find("inner")->child;
  REQUIRE(inner != nullptr);
  CHECK(inner->name == "the-leaf");
  CHECK(inner->files.empty());
  // parse_graph with an explicit base_dir finds the same files.
  auto direct = parse_graph(json::parse(R"({"steps": {
    "r": {"graph": "sub/review.json", "with": {"text": 1}}}})"),
                            dir.path.string());
  INFO(render(direct.errors));
  REQUIRE(direct);
  CHECK(direct.value->files.size() == 3);
}

TEST_CASE("errors inside a graph file carry the step's path", "[persistence][graph]") {
  temp_dir dir;
  auto root = dir.write("root.json", json::parse(R"({"steps": {
    "review": {"graph": "sub/review.json"},
    "missing": {"graph": "nope.json"},
    "broken": {"graph": "broken.json"}
  }})"));
  dir.write("sub/review.json", json::parse(R"({"steps": {"a": {"fn": "noop", "x": 1}}})"));
  dir.write("broken.json", std::string{"{\"steps\": "});
  auto result = parse_graph_file(root);
  INFO(render(result.errors));
  REQUIRE(result.errors.size() == 3);
  CHECK(has_error(result.errors, "/steps/review/graph/steps/a/x", "unknown key 'x'"));
  CHECK(has_error(result.errors, "/steps/missing/graph",
                  "cannot read graph file '" + (dir.path / "nope.json").string()
                    + "': No such file or directory"));
  CHECK(has_error(result.errors, "/steps/broken/graph", "malformed JSON"));
}

TEST_CASE("a graph file that includes itself is rejected", "[persistence][graph]") {
  temp_dir dir;
  auto self = dir.write("self.json", json::parse(R"({"steps": {"again": {"graph": "self.json"}}})"));
  auto errors = parse_graph_file(self).errors;
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/again/graph");
  CHECK_THAT(errors[0].message, Catch::StartsWith("recursive graph: 'self.json' includes itself"));
  // Transitively, through another folder.
  auto a = dir.write("a.json", json::parse(R"({"steps": {"to_b": {"graph": "sub/b.json"}}})"));
  dir.write("sub/b.json", json::parse(R"({"steps": {"to_a": {"graph": "../a.json"}}})"));
  auto chain = parse_graph_file(a).errors;
  INFO(render(chain));
  REQUIRE(chain.size() == 1);
  CHECK(chain[0].path == "/steps/to_b/graph/steps/to_a/graph");
  CHECK_THAT(chain[0].message, Catch::Contains("'a.json' includes itself"));
  CHECK_THAT(chain[0].message, Catch::Contains("sub/b.json ->"));
  // parse_graph on the document of b.json: a.json -> b.json -> a.json.
  auto via_doc = parse_graph(json::parse(R"({"steps": {"to_a": {"graph": "../a.json"}}})"),
                             (dir.path / "sub").string());
  REQUIRE(via_doc.errors.size() == 1);
  CHECK(via_doc.errors[0].path == "/steps/to_a/graph/steps/to_b/graph/steps/to_a/graph");
  CHECK_THAT(via_doc.errors[0].message, Catch::Contains("includes itself"));
}

TEST_CASE("the same file included twice side by side is not recursion", "[persistence][graph]") {
  temp_dir dir;
  auto root = dir.write("root.json", json::parse(R"({"steps": {
    "one": {"graph": "leaf.json"}, "two": {"graph": "./leaf.json"}}})"));
  dir.write("leaf.json", json::parse(R"({"steps": {"x": {"fn": "noop"}}})"));
  auto result = parse_graph_file(root);
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.value->files.size() == 1);
}

TEST_CASE("load_file replaces the file system, e.g. for resume", "[persistence][graph]") {
  std::map<std::string, json> stored{
    {"/stored/sub/child.json",
     json::parse(R"({"inputs": ["v"], "steps": {"e": {"graph": "grand.json"}}})")},
    {"/stored/sub/grand.json", json::parse(R"({"steps": {"x": {"fn": "noop"}}})")}};
  std::vector<std::string> asked;
  parse_options opts;
  opts.load_file = [&](const std::string& path) -> caf::expected<json> {
    asked.push_back(path);
    auto it = stored.find(path);
    if (it == stored.end())
      return make_error(persistence_errc::not_found, "no stored file '" + path + "'");
    return it->second;
  };
  auto doc = json::parse(R"({"steps": {"c": {"graph": "sub/child.json", "with": {"v": 1}}}})");
  auto result = parse_graph(doc, "/stored", opts);
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(asked == std::vector<std::string>{"/stored/sub/child.json", "/stored/sub/grand.json"});
  CHECK(result.value->files == stored);
  auto missing = parse_graph(one_step({{"graph", "other.json"}}), "/stored", opts);
  REQUIRE(missing.errors.size() == 1);
  CHECK(missing.errors[0].path == "/steps/a/graph");
  CHECK(missing.errors[0].message == "no stored file '/stored/other.json'");
}

TEST_CASE("parse_graph_file reports a missing file as one error", "[persistence][graph]") {
  auto result = parse_graph_file("/nonexistent/canopy/graph.json");
  REQUIRE_FALSE(result);
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].path.empty());
  CHECK(result.errors[0].message
        == "cannot read graph file '/nonexistent/canopy/graph.json': No such file or directory");
}

TEST_CASE("parse_graph_file rejects a document over 8 MiB", "[persistence][graph]") {
  temp_dir dir;
  std::string big = R"({"name": ")" + std::string(max_graph_bytes, 'x') + R"(", "steps": {}})";
  auto path = dir.write("big.json", big);
  auto result = parse_graph_file(path);
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].path.empty());
  CHECK(result.errors[0].message == "graph document is larger than 8 MiB");
  // Exactly at the limit is fine as far as size goes.
  std::string edge = R"({"steps": {"a": {"fn": "noop"}}})";
  edge += std::string(max_graph_bytes - edge.size(), ' ');
  REQUIRE(edge.size() == max_graph_bytes);
  auto ok = parse_graph_file(dir.write("edge.json", edge));
  INFO(render(ok.errors));
  CHECK(ok);
}

TEST_CASE("parse_graph_file reports malformed JSON with its position", "[persistence][graph]") {
  temp_dir dir;
  auto path = dir.write("bad.json", std::string{"{\n  \"steps\": {\n    \"a\": tru\n  }\n}\n"});
  auto result = parse_graph_file(path);
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].path.empty());
  CHECK_THAT(result.errors[0].message, Catch::StartsWith("malformed JSON at byte "));
  CHECK_THAT(result.errors[0].message, Catch::Contains("line 3"));
}

TEST_CASE("parse_graph_file uses the file's absolute folder and stem", "[persistence][graph]") {
  temp_dir dir;
  dir.write("g/flow.json", json::parse(R"({"steps": {"a": {"fn": "noop"}}})"));
  dir.write("g/named.json", json::parse(R"({"name": "custom", "steps": {"a": {"fn": "noop"}}})"));
  auto cwd = fs::current_path();
  fs::current_path(dir.path);
  auto flow = parse_graph_file("g/../g/flow.json");
  auto named = parse_graph_file("g/named.json");
  fs::current_path(cwd);
  REQUIRE(flow);
  CHECK(flow.value->name == "flow");
  CHECK(flow.value->base_dir == (dir.path / "g").string());
  REQUIRE(named);
  CHECK(named.value->name == "custom");
}

// -- JSON text -----------------------------------------------------------------------

TEST_CASE("parse_json_text parses a document", "[persistence][graph]") {
  auto doc = parse_json_text(R"({"a": [1, 2.5, "x", null, true]})");
  REQUIRE(doc);
  CHECK(*doc == json({{"a", {1, 2.5, "x", nullptr, true}}}));
}

TEST_CASE("deeply nested JSON is rejected without a crash", "[persistence][graph]") {
  auto nested = [](int levels) {
    return std::string(static_cast<size_t>(levels), '[')
           + std::string(static_cast<size_t>(levels), ']');
  };
  CHECK(parse_json_text(nested(max_json_nesting)));
  auto over = parse_json_text(nested(max_json_nesting + 1));
  REQUIRE_FALSE(over);
  CHECK_THAT(message_of(over.error()), Catch::Contains("nesting deeper than 128 levels"));
  CHECK_THAT(message_of(over.error()), Catch::Contains("byte 128"));
  auto huge = parse_json_text(std::string(1'000'000, '[') + "{\"a\": 1");
  REQUIRE_FALSE(huge);
  CHECK_THAT(message_of(huge.error()), Catch::Contains("nesting deeper"));
  auto objects = std::string{};
  for (int i = 0; i < 200; ++i)
    objects += "{\"k\":";
  auto deep_objects = parse_json_text(objects + "1" + std::string(200, '}'));
  REQUIRE_FALSE(deep_objects);
  temp_dir dir;
  auto result = parse_graph_file(dir.write("deep.json", std::string(100'000, '[')));
  REQUIRE(result.errors.size() == 1);
  CHECK_THAT(result.errors[0].message, Catch::Contains("nesting deeper"));
}

TEST_CASE("invalid UTF-8 is an error with a printable message", "[persistence][graph]") {
  for (auto text : {std::string{"{\"name\": \"\xff\xfe\"}"}, std::string{"{\"a\xc3\": 1}"},
                    std::string{"\xef\xbb\xbf\xff"}, std::string{"[\"\xed\xa0\x80\"]"}}) {
    auto doc = parse_json_text(text);
    REQUIRE_FALSE(doc);
    auto msg = message_of(doc.error());
    CHECK_THAT(msg, Catch::StartsWith("malformed JSON at byte "));
    CHECK_NOTHROW(json(msg).dump());
  }
}

TEST_CASE("malformed JSON text is an error, never an exception", "[persistence][graph]") {
  for (auto text : {"", "   ", "{", "{\"a\": }", "[1, 2", "nul", "{\"a\": 1} trailing", "\"\\u12\""}) {
    caf::expected<json> doc = json{};
    CHECK_NOTHROW(doc = parse_json_text(text));
    CHECK_FALSE(doc);
  }
}

// -- rendering -----------------------------------------------------------------------

TEST_CASE("errors and kinds render as text", "[persistence][graph]") {
  CHECK(to_string(graph_error{"/steps/a", "bad", {}}) == "/steps/a: bad");
  CHECK(to_string(graph_error{"", "bad", {}}) == "bad");
  CHECK(std::string{to_string(step_kind::run)} == "run");
  CHECK(std::string{to_string(step_kind::tool)} == "tool");
  CHECK(std::string{to_string(step_kind::graph)} == "graph");
  CHECK(std::string{to_string(step_kind::plan)} == "plan");
  CHECK(std::string{to_string(step_kind::agent)} == "agent");
  CHECK(std::string{to_string(step_kind::fn)} == "fn");
}

// -- fixtures ------------------------------------------------------------------------

TEST_CASE("every invalid fixture is rejected with the expected path and message",
          "[persistence][graph]") {
  auto dir = fixtures_dir() / "invalid";
  std::ifstream in{dir / "expected.json"};
  REQUIRE(in);
  std::stringstream buf;
  buf << in.rdbuf();
  auto expected = parse_json_text(buf.str());
  REQUIRE(expected);
  REQUIRE(expected->size() >= 12);
  std::set<std::string> listed;
  for (auto& entry : *expected) {
    auto file = entry.at("file").get<std::string>();
    listed.insert(file);
    auto result = parse_graph_file((dir / file).string());
    INFO(file << ":\n" << render(result.errors));
    CHECK_FALSE(result);
    CHECK(has_error(result.errors, entry.at("path").get<std::string>(),
                    entry.at("contains").get<std::string>()));
  }
  // Every fixture file is listed.
  for (auto& f : fs::directory_iterator{dir})
    if (f.path().filename() != "expected.json")
      CHECK(listed.count(f.path().filename().string()) == 1);
}

TEST_CASE("every valid fixture parses", "[persistence][graph]") {
  auto dir = fixtures_dir() / "valid";
  size_t n = 0;
  for (auto& f : fs::directory_iterator{dir}) {
    if (f.path().extension() != ".json")
      continue;
    ++n;
    auto result = parse_graph_file(f.path().string());
    INFO(f.path().string() << ":\n" << render(result.errors));
    CHECK(result);
  }
  CHECK(n >= 3);
  auto nested = parse_graph_file((dir / "nested.json").string());
  REQUIRE(nested);
  CHECK(nested.value->files.size() == 1);
  CHECK(nested.value->find("review")->child != nullptr);
}

TEST_CASE("a graph may name its JSON Schema with a $schema string, and nothing else there",
          "[persistence][graph]") {
  auto doc = one_step({{"run", {"true"}}});
  doc["$schema"] = "https://example.invalid/graph.schema.json";
  auto g = parse_ok(doc);
  CHECK(g.value->steps.size() == 1);
  doc["$schema"] = 1;
  check_rejected(doc, "/$schema", "expected a string");
  auto unknown = one_step({{"run", {"true"}}});
  unknown["schema"] = "x";
  check_rejected(unknown, "/schema", "unknown key 'schema'");
}
