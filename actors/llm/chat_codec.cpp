#include "actors/llm/chat_codec.hpp"

#include "actors/error.hpp"

namespace canopy::core {

namespace {

/// `arguments` as JSON when it parses, else the text as it came.
json arguments_of(const std::string& text) {
  auto parsed = json::parse(text, nullptr, false);
  return parsed.is_discarded() ? json(text) : parsed;
}

std::string text_of(const json& doc, const char* key) {
  auto i = doc.find(key);
  return i != doc.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

std::optional<chat_usage> usage_of(const json& doc) {
  auto u = doc.find("usage");
  if (u == doc.end() || !u->is_object())
    return std::nullopt;
  chat_usage out;
  out.prompt_tokens = u->value("prompt_tokens", int64_t{0});
  out.completion_tokens = u->value("completion_tokens", int64_t{0});
  return out;
}

} // namespace

// -- prices ----------------------------------------------------------------------------

int64_t estimate_prompt_tokens(const json& messages) {
  auto bytes = static_cast<int64_t>(messages.dump().size());
  return (bytes + 3) / 4;
}

double reservation(const token_price& p, int64_t prompt_tokens, int64_t max_tokens) {
  return (static_cast<double>(prompt_tokens) * p.input
          + static_cast<double>(max_tokens) * p.output)
         / 1e6;
}

std::optional<double> spend_of(const token_price& p, const json& usage) {
  if (!usage.is_object())
    return std::nullopt;
  auto in = usage.find("prompt_tokens");
  auto out = usage.find("completion_tokens");
  if (in == usage.end() || out == usage.end() || !in->is_number() || !out->is_number())
    return std::nullopt;
  return (in->get<double>() * p.input + out->get<double>() * p.output) / 1e6;
}

json request_body(const chat_request& r) {
  json body = {{"model", r.model}, {"messages", r.messages}, {"stream", r.stream}};
  if (r.stream)
    body["stream_options"] = {{"include_usage", true}};
  if (r.temperature)
    body["temperature"] = *r.temperature;
  if (r.max_tokens)
    body["max_tokens"] = *r.max_tokens;
  if (!r.response_format.is_null())
    body["response_format"] = r.response_format;
  if (r.tools.is_array() && !r.tools.empty())
    body["tools"] = r.tools;
  return body;
}

caf::expected<chat_reply> parse_completion(std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return make_error(actors_errc::step_failed, "the model's answer is not a JSON object");
  auto choices = doc.find("choices");
  if (choices == doc.end() || !choices->is_array() || choices->empty()
      || !(*choices)[0].is_object())
    return make_error(actors_errc::step_failed, "the model's answer has no choices");
  auto& choice = (*choices)[0];
  auto message = choice.find("message");
  if (message == choice.end() || !message->is_object())
    return make_error(actors_errc::step_failed,
                      "the model's answer has no choices[0].message");
  chat_reply out;
  out.content = text_of(*message, "content");
  if (auto calls = message->find("tool_calls"); calls != message->end() && calls->is_array())
    for (auto& c : *calls) {
      auto fn = c.value("function", json::object());
      out.tool_calls.push_back({{"id", text_of(c, "id")},
                                {"name", text_of(fn, "name")},
                                {"arguments", arguments_of(text_of(fn, "arguments"))}});
    }
  out.usage = usage_of(doc);
  out.model = text_of(doc, "model");
  out.finish_reason = text_of(choice, "finish_reason");
  return out;
}

json llm_result(const chat_reply& r, bool want_json) {
  json parsed;
  if (want_json) {
    parsed = json::parse(r.content, nullptr, false);
    if (parsed.is_discarded())
      parsed = nullptr;
  }
  json usage;
  if (r.usage)
    usage = {{"prompt_tokens", r.usage->prompt_tokens},
             {"completion_tokens", r.usage->completion_tokens}};
  return {{"content", r.content},        {"json", std::move(parsed)},
          {"tool_calls", r.tool_calls},  {"usage", std::move(usage)},
          {"model", r.model},            {"finish_reason", r.finish_reason}};
}

std::string provider_error(int status, std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  std::string message;
  if (!doc.is_discarded() && doc.is_object()) {
    auto e = doc.find("error");
    if (e != doc.end() && e->is_object())
      message = text_of(*e, "message");
    else if (e != doc.end() && e->is_string())
      message = e->get<std::string>();
  }
  if (message.empty())
    message = std::string{body.substr(0, 300)};
  return "the model provider answered " + std::to_string(status)
         + (message.empty() ? std::string{} : ": " + message);
}

std::string redact(std::string text, const std::string& secret) {
  if (secret.empty())
    return text;
  static const std::string mark = "[redacted]";
  for (auto at = text.find(secret); at != std::string::npos;
       at = text.find(secret, at + mark.size()))
    text.replace(at, secret.size(), mark);
  return text;
}

// -- streams ------------------------------------------------------------------------

chat_stream_decoder::chat_stream_decoder(std::function<void(std::string_view)> on_text)
  : on_text_(std::move(on_text)) {
}

bool chat_stream_decoder::feed(std::string_view bytes) {
  if (!error_.empty())
    return false;
  pending_.append(bytes.data(), bytes.size());
  size_t start = 0;
  for (;;) {
    auto nl = pending_.find('\n', start);
    if (nl == std::string::npos)
      break;
    std::string_view text{pending_.data() + start, nl - start};
    if (!text.empty() && text.back() == '\r')
      text.remove_suffix(1);
    start = nl + 1;
    if (!line(text)) {
      pending_.clear();
      return false;
    }
  }
  pending_.erase(0, start);
  return true;
}

bool chat_stream_decoder::line(std::string_view text) {
  // SSE: `data: ...` lines carry the chunks; comments, `event:` and blank
  // lines carry nothing here.
  if (text.rfind("data:", 0) != 0 || done_)
    return true;
  text.remove_prefix(5);
  if (!text.empty() && text.front() == ' ')
    text.remove_prefix(1);
  if (text == "[DONE]") {
    done_ = true;
    return true;
  }
  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    error_ = "the model's stream holds a chunk that is not a JSON object";
    return false;
  }
  return chunk(doc);
}

bool chat_stream_decoder::chunk(const json& doc) {
  if (auto e = doc.find("error"); e != doc.end()) {
    error_ = "the model's stream ended with an error: "
             + (e->is_object() ? text_of(*e, "message") : e->dump());
    return false;
  }
  if (auto u = usage_of(doc))
    reply_.usage = u;
  if (reply_.model.empty())
    reply_.model = text_of(doc, "model");
  auto choices = doc.find("choices");
  if (choices == doc.end() || !choices->is_array())
    return true;
  for (auto& choice : *choices) {
    if (!choice.is_object())
      continue;
    if (auto f = text_of(choice, "finish_reason"); !f.empty())
      reply_.finish_reason = f;
    auto delta = choice.find("delta");
    if (delta == choice.end() || !delta->is_object())
      continue;
    if (auto c = text_of(*delta, "content"); !c.empty()) {
      reply_.content += c;
      if (on_text_)
        on_text_(c);
    }
    auto calls = delta->find("tool_calls");
    if (calls == delta->end() || !calls->is_array())
      continue;
    for (auto& c : *calls) {
      auto index = c.value("index", size_t{0});
      if (index > 1024) {
        error_ = "the model's stream names tool call " + std::to_string(index);
        return false;
      }
      while (calls_.size() <= index)
        calls_.push_back({{"id", ""}, {"name", ""}, {"arguments", ""}});
      auto& call = calls_[index];
      if (auto id = text_of(c, "id"); !id.empty())
        call["id"] = id;
      auto fn = c.value("function", json::object());
      if (auto name = text_of(fn, "name"); !name.empty())
        call["name"] = call["name"].get<std::string>() + name;
      call["arguments"] = call["arguments"].get<std::string>() + text_of(fn, "arguments");
    }
  }
  return true;
}

chat_reply chat_stream_decoder::take() {
  for (auto& c : calls_)
    reply_.tool_calls.push_back({{"id", c["id"]},
                                 {"name", c["name"]},
                                 {"arguments", arguments_of(c["arguments"].get<std::string>())}});
  calls_ = json::array();
  return std::move(reply_);
}

} // namespace canopy::core
