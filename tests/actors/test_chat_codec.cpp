// The model protocol as plain functions: request bodies, whole and streamed
// answers (content, tool calls, usage) fed in pieces of any size, provider
// errors, and when a failed try is tried again (backoff, Retry-After, the
// attempt's time, 4xx).

#include "actors/llm/chat_codec.hpp"
#include "actors/llm/chat_retry.hpp"

#include <catch2/catch.hpp>

using namespace canopy::core;

namespace {

/// A stream of chunks as a provider sends it.
std::string stream_of(const std::vector<json>& chunks) {
  std::string out;
  for (auto& c : chunks)
    out += "data: " + c.dump() + "\n\n";
  return out + "data: [DONE]\n\n";
}

json delta(json d, json finish = nullptr) {
  return {{"object", "chat.completion.chunk"},
          {"model", "m1"},
          {"choices", {{{"index", 0}, {"delta", std::move(d)}, {"finish_reason", finish}}}}};
}

} // namespace

TEST_CASE("a streamed answer decodes the same in pieces of any size",
          "[actors][llm]") {
  auto text = stream_of(
    {delta({{"role", "assistant"}}), delta({{"content", "Hel"}}), delta({{"content", "lo"}}),
     delta({{"tool_calls",
             {{{"index", 0}, {"id", "c1"}, {"function", {{"name", "search"}, {"arguments", "{\"q\":"}}}}}}}),
     delta({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "\"x\"}"}}}}}}}),
     delta(json::object(), "tool_calls"),
     {{"choices", json::array()}, {"usage", {{"prompt_tokens", 12}, {"completion_tokens", 3}}}}});
  for (size_t piece : {size_t{1}, size_t{7}, text.size()}) {
    INFO("pieces of " << piece);
    std::string streamed;
    chat_stream_decoder d{[&](std::string_view t) { streamed += t; }};
    for (size_t i = 0; i < text.size(); i += piece)
      REQUIRE(d.feed(std::string_view{text}.substr(i, piece)));
    CHECK(d.done());
    auto r = d.take();
    CHECK(streamed == "Hello");
    CHECK(r.content == "Hello");
    CHECK(r.model == "m1");
    CHECK(r.finish_reason == "tool_calls");
    REQUIRE(r.usage);
    CHECK(r.usage->prompt_tokens == 12);
    CHECK(r.usage->completion_tokens == 3);
    CHECK(r.tool_calls == json::array({{{"id", "c1"}, {"name", "search"}, {"arguments", {{"q", "x"}}}}}));
  }
}

TEST_CASE("a malformed chunk or an error chunk ends a stream with a message",
          "[actors][llm]") {
  chat_stream_decoder bad{nullptr};
  CHECK_FALSE(bad.feed("data: {not json\n\n"));
  CHECK(bad.error() == "the model's stream holds a chunk that is not a JSON object");
  chat_stream_decoder err{nullptr};
  CHECK_FALSE(err.feed("data: {\"error\": {\"message\": \"overloaded\"}}\n"));
  CHECK(err.error() == "the model's stream ended with an error: overloaded");
  chat_stream_decoder cut{nullptr};
  CHECK(cut.feed(stream_of({delta({{"content", "a"}})}).substr(0, 40)));
  CHECK_FALSE(cut.done());
}

TEST_CASE("a whole answer decodes its content, tool calls and usage", "[actors][llm]") {
  auto r = parse_completion(R"({"model": "m2", "choices": [{"index": 0, "finish_reason": "stop",
    "message": {"role": "assistant", "content": "Hi",
                "tool_calls": [{"id": "t", "type": "function",
                                "function": {"name": "read", "arguments": "not json"}}]}}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1}})");
  REQUIRE(r);
  CHECK(r->content == "Hi");
  CHECK(r->finish_reason == "stop");
  CHECK(r->tool_calls[0]["arguments"] == "not json"); // kept as the provider sent it
  CHECK(r->usage->completion_tokens == 1);
  CHECK_FALSE(parse_completion("[]"));
  CHECK_FALSE(parse_completion(R"({"choices": []})"));
}

TEST_CASE("a request body carries what was asked, and usage when streaming", "[actors][llm]") {
  chat_request r;
  r.model = "m";
  r.messages = json::array({{{"role", "user"}, {"content", "x"}}});
  r.max_tokens = 10;
  auto body = request_body(r);
  CHECK(body["stream"] == true);
  CHECK(body["stream_options"]["include_usage"] == true);
  CHECK(body["max_tokens"] == 10);
  CHECK_FALSE(body.contains("temperature"));
  r.stream = false;
  CHECK_FALSE(request_body(r).contains("stream_options"));
}

TEST_CASE("a provider's error body becomes its message", "[actors][llm]") {
  CHECK(provider_error(400, R"({"error": {"message": "bad model"}})")
        == "the model provider answered 400: bad model");
  CHECK(provider_error(502, "gateway down") == "the model provider answered 502: gateway down");
}

TEST_CASE("429, 5xx and connection errors are tried again with backoff, a 4xx is not",
          "[actors][llm]") {
  CHECK(decide_chat_retry(400, std::nullopt, 1, 5, -1, 0.5).again == false);
  CHECK(decide_chat_retry(404, std::nullopt, 1, 5, -1, 0.5).again == false);
  auto first = decide_chat_retry(429, std::nullopt, 1, 5, -1, 1.0);
  CHECK(first.again);
  CHECK(first.delay_ms == chat_backoff_base_ms);
  CHECK(decide_chat_retry(503, std::nullopt, 3, 5, -1, 1.0).delay_ms == 4 * chat_backoff_base_ms);
  CHECK(decide_chat_retry(0, std::nullopt, 2, 5, -1, 0.5).delay_ms == chat_backoff_base_ms);
  CHECK(decide_chat_retry(500, std::nullopt, 20, 30, -1, 1.0).delay_ms == chat_backoff_cap_ms);
  // Retry-After wins over the backoff; the tries and the attempt's time bound it.
  CHECK(decide_chat_retry(429, int64_t{2000}, 1, 5, -1, 0.0).delay_ms == 2000);
  CHECK_FALSE(decide_chat_retry(429, std::nullopt, 6, 5, -1, 0.5).again);
  CHECK_FALSE(decide_chat_retry(429, int64_t{2000}, 1, 5, 1500, 0.5).again);
  CHECK(decide_chat_retry(429, int64_t{1000}, 1, 5, 1500, 0.5).again);
}

TEST_CASE("Retry-After is read as seconds or as an HTTP date", "[actors][llm]") {
  CHECK(parse_retry_after("3", 0) == 3000);
  CHECK(parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", 4000) == 6000);
  CHECK(parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", 20000) == 0);
  CHECK_FALSE(parse_retry_after("soon", 0));
  CHECK_FALSE(parse_retry_after("", 0));
  CHECK_FALSE(parse_retry_after("-1", 0));
}

TEST_CASE("a priced call reserves its estimated prompt and max_tokens, and costs its usage",
          "[actors][llm][budget]") {
  json messages = {{{"role", "user"}, {"content", std::string(400, 'x')}}};
  auto tokens = estimate_prompt_tokens(messages);
  CHECK(tokens == static_cast<int64_t>((messages.dump().size() + 3) / 4));
  CHECK(tokens > 100); // at least a token per 4 bytes of text
  token_price p{0.15, 0.60};
  CHECK(reservation(p, 1000, 500) == Approx((1000 * 0.15 + 500 * 0.60) / 1e6));
  CHECK(*spend_of(p, {{"prompt_tokens", 200}, {"completion_tokens", 100}})
        == Approx((200 * 0.15 + 100 * 0.60) / 1e6));
  CHECK_FALSE(spend_of(p, nullptr));
  CHECK_FALSE(spend_of(p, {{"prompt_tokens", 1}}));
}

TEST_CASE("a provider's error that quotes the key is redacted", "[actors][llm]") {
  CHECK(redact("Incorrect API key provided: sk-1 (sk-1)", "sk-1")
        == "Incorrect API key provided: [redacted] ([redacted])");
  CHECK(redact("no key here", "") == "no key here");
  CHECK(redact("a key of one letter: a", "a") == "[redacted] key of one letter: [redacted]");
}
