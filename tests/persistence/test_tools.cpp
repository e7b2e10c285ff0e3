// Tests of the `tools` object (persistence/tools.hpp, runtime/docs/reference/config.md#node-config):
// valid tables and a corpus of bad ones, each rejected at its exact path.

#include "persistence/tools.hpp"
#include "tests/persistence/render_errors.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace canopy::core;
using canopy::core::test::render;

namespace {

// -- helpers -------------------------------------------------------------------

bool has_error(const std::vector<graph_error>& errors, const std::string& path,
               const std::string& part = "") {
  for (auto& e : errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

/// Parses `text` as the `tools` object at `/tools`; @returns the errors.
std::vector<graph_error> errors_of(const std::string& text) {
  std::vector<graph_error> errors;
  parse_tools(json::parse(text), "/tools", errors);
  return errors;
}

} // namespace

// -- valid tables --------------------------------------------------------------------

TEST_CASE("the SPEC tools object parses into tool definitions", "[persistence][tools]") {
  std::vector<graph_error> errors;
  auto table = parse_tools(json::parse(R"({
    "writer": {"argv": ["python3", "tools/writer.py", "${with.prompt}"],
               "max_parallel": 2, "timeout": "5m",
               "grace": {"interrupt": "10s", "terminate": "5s"}}
  })"),
                           "/tools", errors);
  INFO(render(errors));
  REQUIRE(errors.empty());
  REQUIRE(table.size() == 1);
  auto& w = table.at("writer");
  CHECK(w.name == "writer");
  CHECK(w.argv == json({"python3", "tools/writer.py", "${with.prompt}"}));
  CHECK(w.max_parallel == 2);
  CHECK(w.timeout == millis{300'000});
  REQUIRE(w.grace);
  CHECK(w.grace->interrupt == millis{10'000});
  CHECK(w.grace->terminate == millis{5'000});
}

TEST_CASE("a tool with only argv leaves its limits unset", "[persistence][tools]") {
  std::vector<graph_error> errors;
  auto table = parse_tools(json::parse(R"({"a": {"argv": ["true"]}, "b": {"argv": ["x"]}})"),
                           "/tools", errors);
  REQUIRE(errors.empty());
  REQUIRE(table.size() == 2);
  auto& a = table.at("a");
  CHECK(a.max_parallel == 0);
  CHECK_FALSE(a.timeout);
  CHECK_FALSE(a.grace);
  CHECK(table.count("b") == 1);
}

TEST_CASE("a partial grace keeps the default for the other period", "[persistence][tools]") {
  std::vector<graph_error> errors;
  auto table = parse_tools(json::parse(R"({"t": {"argv": ["x"], "grace": {"interrupt": "1s"}}})"),
                           "/tools", errors);
  REQUIRE(errors.empty());
  REQUIRE(table.at("t").grace);
  CHECK(table.at("t").grace->interrupt == millis{1000});
  CHECK(table.at("t").grace->terminate == millis{5000});
}

TEST_CASE("tool argv templates take with and inputs references and $${ literals",
          "[persistence][tools]") {
  std::vector<graph_error> errors;
  auto table = parse_tools(json::parse(R"({"t": {"argv": [
    "printf", "%s $${HOME} $$ ${with.a}", "${inputs.b}", "pre-${with.c}-post"]}})"),
                           "/tools", errors);
  INFO(render(errors));
  CHECK(errors.empty());
  CHECK(table.count("t") == 1);
}

TEST_CASE("an empty tools object is an empty table", "[persistence][tools]") {
  std::vector<graph_error> errors;
  CHECK(parse_tools(json::object(), "/tools", errors).empty());
  CHECK(errors.empty());
}

// -- rejections ----------------------------------------------------------------------

TEST_CASE("bad tools are rejected at their exact path", "[persistence][tools]") {
  struct bad_case {
    const char* text;
    const char* path;
    const char* part;
  };
  const std::vector<bad_case> corpus{
    {R"([])", "/tools", "expected an object of tools"},
    {R"("writer")", "/tools", "got string"},
    {R"({"": {"argv": ["x"]}})", "/tools/", "must not be empty"},
    {R"({"w": 1})", "/tools/w", "a tool must be an object"},
    {R"({"w": {}})", "/tools/w", "missing 'argv'"},
    {R"({"w": {"argv": []}})", "/tools/w/argv", "got an empty array"},
    {R"({"w": {"argv": "echo hi"}})", "/tools/w/argv", "got string"},
    {R"({"w": {"argv": ["echo", 1]}})", "/tools/w/argv/1", "expected a string, got 1"},
    {R"({"w": {"argv": ["echo", null]}})", "/tools/w/argv/1", "got null"},
    {R"({"w": {"argv": ["echo", "${steps.a.stdout}"]}})", "/tools/w/argv/1",
     "only use ${with.KEY} and ${inputs.KEY}"},
    {R"({"w": {"argv": ["echo", "${with.}"]}})", "/tools/w/argv/1", "empty name"},
    {R"({"w": {"argv": ["echo", "${with.a"]}})", "/tools/w/argv/1", "unterminated"},
    {R"({"w": {"argv": ["echo", "${env.HOME}"]}})", "/tools/w/argv/1", "unknown scope 'env'"},
    {R"({"w": {"argv": ["echo", "${with.a.b}"]}})", "/tools/w/argv/1",
     "only step references take a path"},
    {R"({"w": {"argv": ["x"], "max_parallel": 0}})", "/tools/w/max_parallel",
     "expected an integer >= 1, got 0"},
    {R"({"w": {"argv": ["x"], "description": 3}})", "/tools/w/description",
     "expected a string"},
    {R"({"w": {"argv": ["x"], "parameters": {"type": "string"}}})", "/tools/w/parameters",
     "expected a JSON Schema of type \"object\""},
    {R"({"w": {"argv": ["x"], "parameters": {"type": "object", "properties": {"q": {"type": "string", "pattern": "a+"}}}}})",
     "/tools/w/parameters/properties/q/pattern", "pattern"},
    {R"({"w w": {"argv": ["x"], "parameters": {"type": "object"}}})", "/tools/w w/parameters",
     "needs a name of letters"},
    {R"({"w": {"argv": ["x"], "max_parallel": -2}})", "/tools/w/max_parallel", "got -2"},
    {R"({"w": {"argv": ["x"], "max_parallel": 1.5}})", "/tools/w/max_parallel", "got 1.5"},
    {R"({"w": {"argv": ["x"], "max_parallel": "2"}})", "/tools/w/max_parallel", "got string"},
    {R"({"w": {"argv": ["x"], "max_parallel": true}})", "/tools/w/max_parallel", "got true"},
    {R"({"w": {"argv": ["x"], "timeout": "5 minutes"}})", "/tools/w/timeout",
     "bad duration '5 minutes'"},
    {R"({"w": {"argv": ["x"], "timeout": 300}})", "/tools/w/timeout",
     "expected a duration such as \"10s\", got 300"},
    {R"({"w": {"argv": ["x"], "timeout": "0s"}})", "/tools/w/timeout", "longer than 0ms"},
    {R"({"w": {"argv": ["x"], "grace": "10s"}})", "/tools/w/grace", "expected an object"},
    {R"({"w": {"argv": ["x"], "grace": {"interrupt": "soon"}}})", "/tools/w/grace/interrupt",
     "bad duration 'soon'"},
    {R"({"w": {"argv": ["x"], "grace": {"terminate": 5}}})", "/tools/w/grace/terminate",
     "got 5"},
    {R"({"w": {"argv": ["x"], "grace": {"kill": "1s"}}})", "/tools/w/grace/kill",
     "unknown key 'kill'"},
    {R"({"w": {"argv": ["x"], "grace": {"interupt": "1s"}}})", "/tools/w/grace/interupt",
     "did you mean 'interrupt'?"},
    {R"({"w": {"argv": ["x"], "env": {}}})", "/tools/w/env", "unknown key 'env'"},
    {R"({"a/b": {"argv": ["x"], "oops": 1}})", "/tools/a~1b/oops", "unknown key 'oops'"},
  };
  for (auto& c : corpus) {
    auto errors = errors_of(c.text);
    INFO("tools: " << c.text << "\nerrors:\n" << render(errors));
    CHECK(has_error(errors, c.path, c.part));
    for (auto& e : errors)
      CHECK(e.code.empty());
  }
}

TEST_CASE("every bad tool is reported and only good tools enter the table",
          "[persistence][tools]") {
  std::vector<graph_error> errors;
  auto table = parse_tools(json::parse(R"({
    "good": {"argv": ["true"], "max_parallel": 1},
    "bad1": {"argv": [], "timeout": "never"},
    "bad2": {"argv": ["x"], "max_parallel": 0, "grace": {"interrupt": "1s", "x": 1}}
  })"),
                           "/tools", errors);
  INFO(render(errors));
  CHECK(errors.size() == 4);
  CHECK(has_error(errors, "/tools/bad1/argv"));
  CHECK(has_error(errors, "/tools/bad1/timeout"));
  CHECK(has_error(errors, "/tools/bad2/max_parallel"));
  CHECK(has_error(errors, "/tools/bad2/grace/x"));
  REQUIRE(table.size() == 1);
  CHECK(table.count("good") == 1);
}

TEST_CASE("the path prefix is the one given", "[persistence][tools]") {
  std::vector<graph_error> errors;
  parse_tools(json::parse(R"({"w": {"argv": ["x"], "timeout": "x"}})"), "/worker/tools", errors);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/worker/tools/w/timeout");
}

TEST_CASE("a tool a model may call keeps its description and parameters", "[persistence][tools]") {
  std::vector<graph_error> errors;
  auto table = parse_tools(json::parse(R"({"search": {"argv": ["search", "${with.q}"],
      "description": "Searches the web.",
      "parameters": {"type": "object", "required": ["q"],
                     "properties": {"q": {"type": "string"}}}}})"),
                           "/tools", errors);
  REQUIRE(errors.empty());
  auto& t = table.at("search");
  CHECK(t.description == "Searches the web.");
  CHECK(t.parameters["required"] == json{"q"});
}
