// One model call against the provider double (tests/fake_llm): a streamed
// answer arrives piece by piece with its usage and tool calls, the key goes
// in the Authorization header, 429s are retried after their Retry-After, a
// 400 fails at once with the provider's message, a hang-up mid-stream is
// retried, and a cancel closes the connection so the provider sees it go
// within 100 ms.

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "actors/llm/chat_client.hpp"
#include "tests/fake_llm/fake_llm.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

chat_request ask(bool stream = true) {
  chat_request r;
  r.model = "fake-7b";
  r.messages = json::array({{{"role", "user"}, {"content", "Say hello"}}});
  r.stream = stream;
  return r;
}

chat_provider provider_of(const fake_llm& llm) {
  chat_provider p;
  p.name = "default";
  p.base_url = llm.base_url();
  p.api_key = "sk-test-123";
  p.max_retries = 3;
  return p;
}

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

} // namespace

TEST_CASE("a streamed model answer arrives in pieces with its usage, and the key is sent as a "
          "bearer token",
          "[integration][llm]") {
  fake_llm llm{json::array({{{"content", "Hello there, friend"},
                             {"chunks", 4},
                             {"usage", {{"prompt_tokens", 9}, {"completion_tokens", 4}}}},
                            {{"tool_calls", {{{"id", "c1"}, {"name", "search"},
                                              {"arguments", {{"q", "canopy"}}}}}}}})};
  std::vector<std::string> pieces;
  chat_call call{provider_of(llm), ask(), [&](std::string_view t) { pieces.emplace_back(t); }, -1};
  auto r = call.run();
  INFO(r.error);
  REQUIRE(r.outcome == chat_outcome::completed);
  CHECK(r.reply.content == "Hello there, friend");
  CHECK(pieces.size() == 4);
  CHECK(r.reply.finish_reason == "stop");
  REQUIRE(r.reply.usage);
  CHECK(r.reply.usage->prompt_tokens == 9);
  CHECK(r.tries == 1);
  auto requests = llm.events("request");
  REQUIRE(requests.size() == 1);
  CHECK(requests[0]["authorization"] == "Bearer sk-test-123");
  CHECK(requests[0]["body"]["model"] == "fake-7b");
  CHECK(requests[0]["body"]["stream"] == true);

  chat_call tools{provider_of(llm), ask(false), nullptr, -1};
  auto t = tools.run();
  REQUIRE(t.outcome == chat_outcome::completed);
  CHECK(t.reply.finish_reason == "tool_calls");
  CHECK(t.reply.tool_calls
        == json::array({{{"id", "c1"}, {"name", "search"}, {"arguments", {{"q", "canopy"}}}}}));
}

TEST_CASE("429 twice then an answer: one completed call after the Retry-After of each",
          "[integration][llm]") {
  fake_llm llm{json::array({{{"status", 429}, {"retry_after", 1}, {"error", "slow down"}},
                            {{"status", 429}, {"retry_after", 1}, {"error", "slow down"}},
                            {{"content", "ok"}}})};
  chat_call call{provider_of(llm), ask(), nullptr, -1};
  auto r = call.run();
  INFO(r.error);
  REQUIRE(r.outcome == chat_outcome::completed);
  CHECK(r.reply.content == "ok");
  CHECK(r.tries == 3);
  auto requests = llm.events("request");
  REQUIRE(requests.size() == 3);
  // Each try came after the Retry-After of the one before.
  CHECK(requests[1]["at_ms"].get<int64_t>() - requests[0]["at_ms"].get<int64_t>() >= 950);
  CHECK(requests[2]["at_ms"].get<int64_t>() - requests[1]["at_ms"].get<int64_t>() >= 950);
}

TEST_CASE("a 400 fails the call at once with the provider's message, a hang-up is tried again",
          "[integration][llm]") {
  fake_llm llm{json::array({{{"status", 400}, {"error", "model 'x' does not exist"}},
                            {{"content", "abcdefgh"}, {"chunks", 4}, {"disconnect_after_chunks", 2}},
                            {{"content", "whole"}}})};
  chat_call bad{provider_of(llm), ask(), nullptr, -1};
  auto r = bad.run();
  CHECK(r.outcome == chat_outcome::failed);
  CHECK(r.tries == 1);
  CHECK(r.error == "the model provider answered 400: model 'x' does not exist");
  CHECK(r.error.find("sk-test") == std::string::npos);

  std::string streamed;
  chat_call cut{provider_of(llm), ask(), [&](std::string_view t) { streamed += t; }, -1};
  auto again = cut.run();
  INFO(again.error);
  REQUIRE(again.outcome == chat_outcome::completed);
  CHECK(again.tries == 2);
  CHECK(again.reply.content == "whole");
  CHECK(llm.events("hung_up").size() == 1);
}

TEST_CASE("a cancel during a stream closes the connection: the provider sees it long before "
          "the next piece is due",
          "[integration][llm]") {
  // Pieces a minute apart: a cancel that waited for the next one would take
  // over the hang bound below.
  fake_llm llm{json::array(
    {{{"content", "one two three four five six"}, {"chunks", 6}, {"chunk_delay_ms", 60000}}})};
  std::atomic<bool> first_piece{false};
  chat_call call{provider_of(llm), ask(),
                 [&](std::string_view) { first_piece = true; }, -1};
  chat_result r;
  std::thread runner{[&] { r = call.run(); }};
  REQUIRE(eventually([&] { return first_piece.load(); }));
  auto cancelled_at = wall_ms();
  call.cancel();
  runner.join();
  CHECK(r.outcome == chat_outcome::cancelled);
  CHECK(wall_ms() - cancelled_at < 30000);
  REQUIRE(eventually([&] { return !llm.events("disconnected").empty(); }));
  auto seen = llm.events("disconnected")[0]["at_ms"].get<int64_t>();
  CHECK(seen - cancelled_at < 30000);
  CHECK(llm.events("answered").empty());
}

TEST_CASE("an unreachable provider is tried again, then fails naming the provider",
          "[integration][llm]") {
  chat_provider p;
  p.name = "local";
  p.base_url = "http://127.0.0.1:9/v1"; // discard: nothing listens
  p.max_retries = 1;
  chat_call call{p, ask(), nullptr, 5000};
  auto r = call.run();
  CHECK(r.outcome == chat_outcome::failed);
  CHECK(r.tries == 2);
  CHECK(r.error.find("provider 'local' could not be reached") == 0);
}
