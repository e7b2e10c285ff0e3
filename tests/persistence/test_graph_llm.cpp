// `llm` steps in the graph model: the object parsed into an llm_def, its
// messages' references checked like any other, each rule rejecting at the
// JSON path of the offending key, and stored graphs loaded back the same.

#include "persistence/graph.hpp"

#include <catch2/catch.hpp>

#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;
using canopy::core::test::rejected_at;

namespace {

/// `draft` asks a model about `intro`'s topic, with `patch` merged into its `llm`.
json draft_with(const json& patch, json step_patch = json::object()) {
  auto doc = json::parse(R"({
    "inputs": ["topic"],
    "steps": {
      "intro": {"fn": "echo", "with": {"topic": "${inputs.topic}"}},
      "draft": {"needs": ["intro"], "timeout": "2m", "retries": 2, "llm": {
        "provider": "local", "model": "qwen2.5-7b-instruct",
        "messages": [{"role": "system", "content": "You write briefs."},
                     {"role": "user", "content": "Topic: ${steps.intro.topic}"}],
        "temperature": 0.2, "max_tokens": 800,
        "response_format": {"type": "json_object"}}}
    }
  })");
  doc["steps"]["draft"]["llm"].merge_patch(patch);
  doc["steps"]["draft"].merge_patch(step_patch);
  return doc;
}


} // namespace

TEST_CASE("an llm step parses into the exact llm_def", "[persistence][graph][llm]") {
  auto result = parse_graph(draft_with(json::object()), "/tmp");
  INFO(render(result.errors));
  REQUIRE(result);
  auto* draft = result.value->find("draft");
  REQUIRE(draft != nullptr);
  CHECK(draft->kind == step_kind::llm);
  REQUIRE(draft->llm != nullptr);
  CHECK(draft->llm->provider == "local");
  CHECK(draft->llm->model == "qwen2.5-7b-instruct");
  CHECK(draft->llm->messages[1]["content"] == "Topic: ${steps.intro.topic}");
  CHECK(draft->llm->temperature == 0.2);
  CHECK(draft->llm->max_tokens == 800);
  CHECK(draft->llm->response_format == json{{"type", "json_object"}});
  CHECK(draft->retries == 2);
  auto plain = parse_graph(draft_with({{"provider", nullptr}, {"temperature", nullptr},
                                       {"max_tokens", nullptr}, {"response_format", nullptr}}),
                           "/tmp");
  REQUIRE(plain);
  CHECK(plain.value->find("draft")->llm->provider == "default");
  CHECK_FALSE(plain.value->find("draft")->llm->max_tokens);

  auto loaded = load_stored_graph(result.value->document, "/tmp", json::object());
  INFO(render(loaded.errors));
  REQUIRE(loaded);
  auto& back = *loaded.value->find("draft")->llm;
  CHECK(back.provider == "local");
  CHECK(back.messages == draft->llm->messages);
  CHECK(back.temperature == 0.2);
  CHECK(back.max_tokens == 800);
  CHECK(back.response_format == draft->llm->response_format);
}

TEST_CASE("an llm step is rejected at the path of what is wrong", "[persistence][graph][llm]") {
  CHECK(rejected_at(draft_with({{"model", nullptr}}), "/steps/draft/llm", "missing 'model'"));
  CHECK(rejected_at(draft_with({{"messages", json::array()}}), "/steps/draft/llm/messages",
                    "expected a non-empty array"));
  CHECK(rejected_at(draft_with({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}),
                    "/steps/draft/llm/messages/0/role", "expected one of system, user, assistant"));
  CHECK(rejected_at(draft_with({{"messages", {{{"role", "user"}, {"content", 3}}}}}),
                    "/steps/draft/llm/messages/0/content", "expected a string"));
  CHECK(rejected_at(draft_with({{"messages", {{{"role", "user"}, {"content", "${steps.nope.x}"}}}}}),
                    "/steps/draft/llm/messages/0/content", "unknown step 'nope'"));
  CHECK(rejected_at(draft_with({{"temperature", 3}}), "/steps/draft/llm/temperature",
                    "expected a number from 0 to 2"));
  CHECK(rejected_at(draft_with({{"max_tokens", 0}}), "/steps/draft/llm/max_tokens",
                    "expected a positive integer"));
  CHECK(rejected_at(draft_with({{"response_format", "json"}}), "/steps/draft/llm/response_format",
                    "expected an object with a 'type'"));
  CHECK(rejected_at(draft_with({{"modle", "x"}}), "/steps/draft/llm/modle",
                    "did you mean 'model'"));
  CHECK(rejected_at(draft_with({{"provider", "a b"}}), "/steps/draft/llm/provider",
                    "expected a provider name"));
  CHECK(rejected_at(draft_with(json::object(), {{"with", {{"a", 1}}}}), "/steps/draft/with",
                    "an llm step takes no 'with'"));
  CHECK(rejected_at(draft_with(json::object(), {{"cost", 1}}), "/steps/draft/cost",
                    "its cost is its tokens"));
}

// -- tools ---------------------------------------------------------------------------

namespace {

/// `draft_with(patch)` parsed on a node whose tools are `search` and `read_url`.
parse_result with_tools(const json& patch, json step_patch = json::object()) {
  parse_options opts;
  opts.tools = {"search", "read_url"};
  return parse_graph(draft_with(patch, std::move(step_patch)), "/tmp", opts);
}

bool tools_rejected_at(const json& patch, const std::string& path, const std::string& part) {
  auto result = with_tools(patch);
  INFO(render(result.errors));
  CHECK_FALSE(result);
  for (auto& e : result.errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("an llm step with tools is a tool-calling loop of max_turns, 8 unless given",
          "[persistence][graph][llm]") {
  auto loop = with_tools({{"tools", {"search", "read_url"}}});
  INFO(render(loop.errors));
  REQUIRE(loop);
  auto* draft = loop.value->find("draft");
  CHECK(draft->llm->tools == std::vector<std::string>{"search", "read_url"});
  CHECK(draft->llm->max_turns == default_llm_turns);
  CHECK(is_loop(*draft));
  auto once = with_tools({{"tools", {"search"}}, {"max_turns", 1}});
  REQUIRE(once);
  CHECK(once.value->find("draft")->llm->max_turns == 1);
  CHECK_FALSE(is_loop(*once.value->find("draft"))); // one call: its tool calls are returned
  auto plain = with_tools(json::object());
  CHECK_FALSE(is_loop(*plain.value->find("draft")));

  // Stored and loaded back the same.
  auto loaded = load_stored_graph(loop.value->document, "/tmp", {}, {});
  REQUIRE(loaded);
  CHECK(loaded.value->find("draft")->llm->tools == draft->llm->tools);
  CHECK(loaded.value->find("draft")->llm->max_turns == default_llm_turns);
}

TEST_CASE("an llm step's tools and conversation messages are rejected at their paths",
          "[persistence][graph][llm]") {
  CHECK(tools_rejected_at({{"tools", {"serch"}}}, "/steps/draft/llm/tools/0",
                          "did you mean 'search'"));
  CHECK(tools_rejected_at({{"tools", json::array()}}, "/steps/draft/llm/tools",
                          "expected a non-empty array"));
  CHECK(tools_rejected_at({{"tools", {"search", "search"}}}, "/steps/draft/llm/tools/1",
                          "listed twice"));
  CHECK(tools_rejected_at({{"max_turns", 3}}, "/steps/draft/llm/max_turns", "needs 'tools'"));
  CHECK(tools_rejected_at({{"tools", {"search"}}, {"max_turns", 101}},
                          "/steps/draft/llm/max_turns", "expected an integer from 1 to 100"));
  CHECK(tools_rejected_at({{"messages", {{{"role", "tool"}, {"content", "x"}}}}},
                          "/steps/draft/llm/messages/0/tool_call_id", "expected the id"));
  CHECK(tools_rejected_at({{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_calls", 1}}}}},
                          "/steps/draft/llm/messages/0/tool_calls", "unknown key"));
  CHECK(tools_rejected_at(
    {{"messages", {{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {{{"id", "c"}}}}}}}},
    "/steps/draft/llm/messages/0/tool_calls/0", "\"arguments\": \"JSON text\""));
  // An assistant's call and the tool's answer, given whole, parse; their
  // references are checked like any other.
  auto given = with_tools({{"messages",
                            {{{"role", "user"}, {"content", "q"}},
                             {{"role", "assistant"}, {"content", nullptr},
                              {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                               {"function", {{"name", "search"},
                                                             {"arguments", "{}"}}}}}}},
                             {{"role", "tool"}, {"tool_call_id", "c1"},
                              {"content", "${steps.intro.topic}"}}}}});
  INFO(render(given.errors));
  CHECK(given);
  CHECK(tools_rejected_at({{"messages", {{{"role", "tool"}, {"tool_call_id", "c1"},
                                          {"content", "${steps.nope}"}}}}},
                          "/steps/draft/llm/messages/0/content", "unknown step 'nope'"));
}
