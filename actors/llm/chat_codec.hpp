#pragma once

// The OpenAI chat completions protocol as plain data and functions: the
// request body canopy sends, the answer (whole, or streamed as SSE chunks)
// decoded into one `chat_reply`, and a provider's error body made into a
// message. No sockets and no threads: `chat_client` (chat_client.hpp) moves
// the bytes, tests feed these directly. The protocol is the one llama.cpp's
// server, vLLM, Ollama and hosted APIs speak at `/v1/chat/completions`.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace canopy::core {

using json = nlohmann::json;

/// What one model call asks for.
struct chat_request {
  std::string model;
  json messages = json::array(); ///< `[{role, content}, ...]`, references resolved
  std::optional<double> temperature;
  std::optional<int64_t> max_tokens;
  json response_format; ///< null: none
  /// `[{"type": "function", "function": {...}}]` offered to the model; empty: none.
  json tools = json::array();
  bool stream = true;
};

/// The token counts a provider reported.
struct chat_usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

/// One model answer.
struct chat_reply {
  std::string content;
  /// `[{id, name, arguments}]`, `arguments` parsed when it is JSON (else
  /// the provider's text); empty when the model called no tool.
  json tool_calls = json::array();
  std::optional<chat_usage> usage; ///< none when the provider did not say
  std::string model;
  std::string finish_reason;
};

/// A provider's prices per million tokens, in the unit of a graph's `budget`.
struct token_price {
  double input = 0;
  double output = 0;
};

/// The prompt tokens `messages` are taken to cost before a provider says:
/// a token per 4 bytes of their JSON text, rounded up (an over-estimate for
/// English text with most tokenizers).
int64_t estimate_prompt_tokens(const json& messages);

/// What a call may cost at most: `prompt_tokens` in, `max_tokens` out.
double reservation(const token_price& p, int64_t prompt_tokens, int64_t max_tokens);

/// What a call cost, from the `usage` of its result (`{prompt_tokens,
/// completion_tokens}`); none when `usage` is not such an object.
std::optional<double> spend_of(const token_price& p, const json& usage);

/// @returns the JSON body of `r` (with `stream_options.include_usage` when
/// streaming, so that a streamed answer reports its tokens too).
json request_body(const chat_request& r);

/// Decodes a whole (non-streamed) answer body.
/// @returns the reply, or an error naming what is missing or malformed.
caf::expected<chat_reply> parse_completion(std::string_view body);

/// The result of an `llm` step that got `r`: `{content, json, tool_calls,
/// usage: {prompt_tokens, completion_tokens} | null, model, finish_reason}`;
/// `json` is the parsed content when `want_json` (a response format was
/// asked) and it parses, else null.
json llm_result(const chat_reply& r, bool want_json);

/// The message of a provider's error answer: `error.message` of an OpenAI
/// error body, else the body's first 300 bytes, prefixed with the status.
std::string provider_error(int status, std::string_view body);

/// @returns `text` with every occurrence of `secret` (when not empty)
/// replaced by `[redacted]`.
std::string redact(std::string text, const std::string& secret);

/// Decodes a streamed answer (`text/event-stream` of `chat.completion.chunk`
/// objects ending with `data: [DONE]`) fed in pieces of any size.
/// Not thread-safe: one stream, one thread.
class chat_stream_decoder {
public:
  /// `on_text` receives each piece of content as it is decoded.
  explicit chat_stream_decoder(std::function<void(std::string_view)> on_text);

  /// Feeds the next bytes. @returns false once a chunk is malformed (see `error`).
  bool feed(std::string_view bytes);

  /// True once `data: [DONE]` was read.
  bool done() const { return done_; }

  /// Why `feed` failed (empty: it did not).
  const std::string& error() const { return error_; }

  /// The reply decoded so far (complete once `done`).
  chat_reply take();

private:
  bool line(std::string_view text);
  bool chunk(const json& doc);

  std::function<void(std::string_view)> on_text_;
  std::string pending_; ///< an unfinished line
  chat_reply reply_;
  /// Tool calls by index while their arguments arrive in pieces.
  json calls_ = json::array();
  bool done_ = false;
  std::string error_;
};

} // namespace canopy::core
