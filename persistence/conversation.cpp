#include "persistence/conversation.hpp"

#include <algorithm>

#include "persistence/duration.hpp"
#include "persistence/json_text.hpp"
#include "persistence/value_schema.hpp"

namespace canopy::core {

namespace {

/// `doc[key]` when it is a string, else "".
std::string text_at(const json& doc, const char* key) {
  if (!doc.is_object())
    return {};
  auto i = doc.find(key);
  return i != doc.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

std::string escape_text(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{')
      out += '$';
    out += s[i];
  }
  return out;
}

std::string offered(const llm_def& def) {
  std::string out;
  for (auto& t : def.tools)
    out += (out.empty() ? "" : ", ") + t;
  return out;
}

} // namespace

caf::expected<json> resolve_messages(const json& messages, const reference_scope& scope) {
  auto out = resolve(messages, scope);
  if (!out)
    return out;
  for (auto& m : *out)
    if (auto c = m.find("content"); c != m.end() && !c->is_string() && !c->is_null())
      *c = c->dump();
  return out;
}

json escape_references(const json& v) {
  if (v.is_string())
    return escape_text(v.get_ref<const std::string&>());
  if (v.is_array()) {
    json out = json::array();
    for (auto& x : v)
      out.push_back(escape_references(x));
    return out;
  }
  if (v.is_object()) {
    json out = json::object();
    for (auto& [key, val] : v.items())
      out[key] = escape_references(val);
    return out;
  }
  return v;
}

json tool_specs(const llm_def& def, const tool_table& tools) {
  json out = json::array();
  for (auto& name : def.tools) {
    json fn = {{"name", name}};
    auto t = tools.find(name);
    if (t != tools.end() && !t->second.description.empty())
      fn["description"] = t->second.description;
    fn["parameters"] = t != tools.end() && !t->second.parameters.is_null()
                         ? t->second.parameters
                         : json{{"type", "object"}, {"properties", json::object()}};
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

json check_tool_call(const llm_def& def, const tool_table& tools, const std::string& name,
                     const std::string& arguments, std::string& error) {
  if (std::find(def.tools.begin(), def.tools.end(), name) == def.tools.end()) {
    error = "there is no tool '" + name + "' (the tools are " + offered(def) + ")";
    return nullptr;
  }
  json args = json::object();
  if (!arguments.empty()) {
    args = json::parse(arguments, nullptr, false);
    if (args.is_discarded() || !args.is_object()) {
      error = "the arguments of '" + name + "' must be a JSON object, got: "
              + arguments.substr(0, 200);
      return nullptr;
    }
  }
  auto t = tools.find(name);
  if (t == tools.end() || t->second.parameters.is_null())
    return args;
  auto bad = validate_value(t->second.parameters, args);
  if (bad.empty())
    return args;
  error = "the arguments of '" + name + "' do not fit its parameters:";
  for (auto& e : bad)
    error += " " + to_string(e) + ";";
  return nullptr;
}

json turn_graph(const step_def& step, const tool_table& tools, const json& history) {
  auto& def = *step.llm;
  json sent = escape_references(history);
  json steps = json::object();
  json needs = json::array();
  const json* last = history.empty() ? nullptr : &history.back();
  if (last != nullptr && text_at(*last, "role") == "assistant" && last->contains("tool_calls")
      && (*last)["tool_calls"].is_array()) {
    int i = 0;
    for (auto& c : (*last)["tool_calls"]) {
      ++i;
      auto fn = c.is_object() ? c.value("function", json::object()) : json::object();
      auto name = text_at(fn, "name");
      std::string error;
      auto with = check_tool_call(def, tools, name, text_at(fn, "arguments"), error);
      json answer;
      if (error.empty()) {
        auto id = name + "_" + std::to_string(i);
        steps[id] = {{"tool", name}, {"with", escape_references(with)}};
        needs.push_back(id);
        answer = "${steps." + id + ".stdout}";
      } else {
        answer = escape_references(json("error: " + error));
      }
      sent.push_back({{"role", "tool"},
                      {"tool_call_id", escape_references(json(text_at(c, "id")))},
                      {"content", std::move(answer)}});
    }
  }
  json llm = {{"provider", def.provider}, {"model", def.model},     {"messages", sent},
              {"tools", def.tools},       {"max_turns", 1}};
  if (def.temperature)
    llm["temperature"] = *def.temperature;
  if (def.max_tokens)
    llm["max_tokens"] = *def.max_tokens;
  if (!def.response_format.is_null())
    llm["response_format"] = def.response_format;
  json model = {{"llm", std::move(llm)}};
  if (!needs.empty())
    model["needs"] = std::move(needs);
  if (step.timeout)
    model["timeout"] = to_duration_string(*step.timeout);
  steps[turn_model_step] = std::move(model);
  return {{"name", step.id},
          {"steps", std::move(steps)},
          {"outputs", {{"sent", std::move(sent)}, {"reply", "${steps.model}"}}}};
}

json next_history(const json& outputs) {
  json out = outputs.is_object() ? outputs.value("sent", json::array()) : json::array();
  auto reply = outputs.is_object() ? outputs.value("reply", json::object()) : json::object();
  auto calls = reply.is_object() ? reply.value("tool_calls", json::array()) : json::array();
  json msg = {{"role", "assistant"}, {"content", text_at(reply, "content")}};
  if (calls.is_array() && !calls.empty()) {
    json wire = json::array();
    int i = 0;
    for (auto& c : calls) {
      ++i;
      auto id = text_at(c, "id");
      auto args = c.is_object() ? c.value("arguments", json{}) : json{};
      wire.push_back({{"id", id.empty() ? "call_" + std::to_string(i) : id},
                      {"type", "function"},
                      {"function",
                       {{"name", text_at(c, "name")},
                        {"arguments", args.is_string() ? args.get<std::string>()
                                      : args.is_null() ? std::string{"{}"}
                                                       : args.dump()}}}});
    }
    msg["tool_calls"] = std::move(wire);
    if (msg["content"] == "")
      msg["content"] = nullptr;
  }
  out.push_back(std::move(msg));
  return out;
}

json loop_result(const json& outputs, int turns) {
  json out = outputs.is_object() ? outputs.value("reply", json::object()) : json::object();
  if (!out.is_object())
    out = json::object();
  out["turns"] = turns;
  out["messages"] = next_history(outputs);
  return out;
}

} // namespace canopy::core
