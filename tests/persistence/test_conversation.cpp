// A tool-calling loop's turns as plain data: text from a model escaped so it
// is never a reference, tool calls checked against the offered tools and
// their parameters, each turn's graph (calls in parallel, then the model),
// and the conversation carried from one turn to the next.

#include "persistence/conversation.hpp"

#include <catch2/catch.hpp>

#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;

namespace {

tool_table search_tools() {
  std::vector<graph_error> errors;
  auto t = parse_tools(json::parse(R"({
    "search": {"argv": ["search", "${with.q}"], "description": "Searches.",
               "parameters": {"type": "object", "required": ["q"],
                              "properties": {"q": {"type": "string"}}}},
    "clock": {"argv": ["date"]}})"),
                       "/tools", errors);
  REQUIRE(errors.empty());
  return t;
}

step_def ask_step() {
  parse_options opts;
  opts.tools = {"search", "clock"};
  auto r = parse_graph(json::parse(R"({"steps": {"ask": {"timeout": "1m", "llm": {
      "model": "m", "max_tokens": 50, "tools": ["search", "clock"], "max_turns": 4,
      "messages": [{"role": "user", "content": "what time is it?"}]}}}})"),
                       "/tmp", opts);
  INFO(render(r.errors));
  REQUIRE(r);
  return r.value->steps[0];
}

/// The history after the model asked for `calls` (wire form).
json asked(json calls) {
  return json::array({{{"role", "user"}, {"content", "what time is it?"}},
                      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}}});
}

json wire_call(const std::string& id, const std::string& name, const std::string& args) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

} // namespace

TEST_CASE("escaping makes every ${ of a value literal and leaves the rest as it is",
          "[persistence][conversation]") {
  json v = {{"a", "cost ${HOME} and $${x} and $5"}, {"b", {1, "${steps.x}", nullptr}}};
  auto e = escape_references(v);
  CHECK(e["a"] == "cost $${HOME} and $$${x} and $5");
  CHECK(e["b"] == json{1, "$${steps.x}", nullptr});
}

TEST_CASE("the offered tools go to the model with their description and parameters",
          "[persistence][conversation]") {
  auto specs = tool_specs(*ask_step().llm, search_tools());
  REQUIRE(specs.size() == 2);
  CHECK(specs[0]["type"] == "function");
  CHECK(specs[0]["function"]["name"] == "search");
  CHECK(specs[0]["function"]["description"] == "Searches.");
  CHECK(specs[0]["function"]["parameters"]["required"] == json{"q"});
  // Without parameters: an empty object.
  CHECK(specs[1]["function"]["parameters"]
        == json{{"type", "object"}, {"properties", json::object()}});
  CHECK_FALSE(specs[1]["function"].contains("description"));
}

TEST_CASE("a tool call is checked against the offered tools and the tool's parameters",
          "[persistence][conversation]") {
  auto step = ask_step();
  auto tools = search_tools();
  std::string error;
  CHECK(check_tool_call(*step.llm, tools, "search", R"({"q": "time"})", error)
        == json{{"q", "time"}});
  CHECK(error.empty());
  CHECK(check_tool_call(*step.llm, tools, "clock", "", error) == json::object());
  CHECK(error.empty());
  check_tool_call(*step.llm, tools, "rm", "{}", error);
  CHECK(error == "there is no tool 'rm' (the tools are search, clock)");
  error.clear();
  check_tool_call(*step.llm, tools, "search", "[1]", error);
  CHECK(error == "the arguments of 'search' must be a JSON object, got: [1]");
  error.clear();
  check_tool_call(*step.llm, tools, "search", R"({"q": 1})", error);
  CHECK_THAT(error, Catch::StartsWith("the arguments of 'search' do not fit its parameters: /q"));
}

TEST_CASE("a turn's graph runs the calls asked for in parallel, then the model over their "
          "answers, and parses as any graph",
          "[persistence][conversation]") {
  auto step = ask_step();
  auto history = asked({wire_call("c1", "search", R"({"q": "${HOME}"})"),
                        wire_call("c2", "clock", "{}"), wire_call("c3", "search", "{}")});
  auto doc = turn_graph(step, search_tools(), history);
  parse_options opts;
  opts.tools = {"search", "clock"};
  auto g = parse_graph(doc, "/tmp", opts);
  INFO(render(g.errors) << doc.dump());
  REQUIRE(g);
  CHECK(g.value->name == "ask");
  auto* search = g.value->find("search_1");
  REQUIRE(search);
  CHECK(search->with["q"] == "$${HOME}");
  REQUIRE(g.value->find("clock_2"));
  CHECK_FALSE(g.value->find("search_3")); // no `q`: nothing runs
  auto* model = g.value->find(turn_model_step);
  REQUIRE(model);
  CHECK(model->needs == std::vector<std::string>{"search_1", "clock_2"});
  CHECK(model->timeout == millis{60000});
  CHECK(model->llm->max_tokens == 50);
  CHECK(model->llm->max_turns == 1);
  auto& msgs = model->llm->messages;
  REQUIRE(msgs.size() == 5);
  CHECK(msgs[1]["tool_calls"][0]["function"]["arguments"] == R"({"q": "$${HOME}"})");
  CHECK(msgs[2] == json{{"role", "tool"}, {"tool_call_id", "c1"},
                        {"content", "${steps.search_1.stdout}"}});
  CHECK(msgs[3]["content"] == "${steps.clock_2.stdout}");
  CHECK_THAT(msgs[4]["content"].get<std::string>(),
             Catch::StartsWith("error: the arguments of 'search' do not fit"));
  CHECK(g.value->outputs["reply"] == "${steps.model}");
  CHECK(g.value->outputs["sent"] == json(msgs));
}

TEST_CASE("the first turn is the model alone, and the next conversation adds its reply in the "
          "wire form",
          "[persistence][conversation]") {
  auto step = ask_step();
  auto doc = turn_graph(step, search_tools(), step.llm->messages);
  CHECK(doc["steps"].size() == 1);
  CHECK_FALSE(doc["steps"]["model"].contains("needs"));

  json outputs = {{"sent", step.llm->messages},
                  {"reply",
                   {{"content", ""},
                    {"tool_calls", {{{"id", ""}, {"name", "clock"}, {"arguments", json::object()}},
                                    {{"id", "c9"}, {"name", "search"}, {"arguments", "not json"}}}}}}};
  auto next = next_history(outputs);
  REQUIRE(next.size() == 2);
  CHECK(next[1]["content"].is_null());
  CHECK(next[1]["tool_calls"][0] == wire_call("call_1", "clock", "{}"));
  CHECK(next[1]["tool_calls"][1] == wire_call("c9", "search", "not json"));

  json done = {{"sent", next}, {"reply", {{"content", "noon"}, {"tool_calls", json::array()}}}};
  auto result = loop_result(done, 2);
  CHECK(result["content"] == "noon");
  CHECK(result["turns"] == 2);
  CHECK(result["messages"].back() == json{{"role", "assistant"}, {"content", "noon"}});
}
