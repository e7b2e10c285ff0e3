// The graph parser's `llm` steps: one chat completion from a provider of the
// node (the node config's `providers`). It reads the provider's name, the
// model, the messages (whose contents may reference inputs and upstream
// steps, checked like any other reference) and the generation settings.
// Whether the provider exists is checked when the step runs: the provider
// is the node's, the graph may run on another.

#include "persistence/graph_parser.hpp"

#include <utility>

#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"

namespace canopy::core::detail {

namespace {

const std::vector<std::string> llm_keys{"provider",   "model",           "messages",
                                        "temperature", "max_tokens",     "response_format",
                                        "tools",       "max_turns"};

const std::vector<std::string> roles{"system", "user", "assistant", "tool"};

/// Step fields an `llm` step cannot have, and why.
const std::vector<std::pair<std::string, std::string>> refused_llm_fields{
  {"with", ": its messages are its input"},
  {"env", ": it runs no process"},
  {"stdin", ": it runs no process"},
  {"cwd", ": it runs no process"},
  {"message", ": that is an agent step's"},
  {"grace", ": a stop closes its connection at once"},
  {"cost", ": its cost is its tokens"},
};

} // namespace

void graph_parser::refuse_llm_fields(const step_work& w, const json& v) {
  for (auto& [field, why] : refused_llm_fields)
    if (v.contains(field))
      fail(w.path + "/" + field, "an llm step takes no '" + field + "'" + why);
}

void graph_parser::parse_llm(step_work& w, const json& v, const std::string& path) {
  if (!v.is_object()) {
    fail(path, "expected an object such as {\"model\": \"qwen2.5-7b-instruct\", \"messages\": "
               "[...]}, " + got(v));
    return;
  }
  // Built here, shared as const by the step; `w.texts` points into its messages.
  auto def = std::make_shared<llm_def>();
  w.def.llm = def;
  for (auto& [key, val] : v.items())
    if (!contains(llm_keys, key))
      fail(path + "/" + escape_pointer(key),
           "unknown key '" + key + "' (an llm step has the keys " + join(llm_keys) + ")"
             + did_you_mean(key, llm_keys));
  if (auto it = v.find("provider"); it != v.end()) {
    if (!it->is_string() || !is_name(it->get<std::string>()))
      fail(path + "/provider", "expected a provider name (letters, digits, '_' and '-'), "
                                 + got(*it));
    else
      def->provider = it->get<std::string>();
  }
  if (auto it = v.find("model"); it == v.end())
    fail(path, "missing 'model' (the model's name at the provider)");
  else if (!it->is_string() || it->get_ref<const std::string&>().empty())
    fail(path + "/model", "expected the model's name (a non-empty string), " + got(*it));
  else
    def->model = it->get<std::string>();
  if (auto it = v.find("messages"); it == v.end()) {
    fail(path, "missing 'messages' (e.g. [{\"role\": \"user\", \"content\": \"...\"}])");
  } else if (!it->is_array() || it->empty()) {
    fail(path + "/messages", "expected a non-empty array of messages, " + got(*it));
  } else {
    def->messages = *it;
    for (size_t i = 0; i < def->messages.size(); ++i)
      parse_message(w, def->messages[i], path + "/messages/" + std::to_string(i),
                    "/llm/messages/" + std::to_string(i));
  }
  if (auto it = v.find("temperature"); it != v.end()) {
    auto t = non_negative_number(*it);
    if (!t || *t > 2)
      fail(path + "/temperature", "expected a number from 0 to 2, " + got(*it));
    else
      def->temperature = *t;
  }
  if (auto it = v.find("max_tokens"); it != v.end()) {
    auto n = non_negative_integer(*it);
    if (!n || *n < 1 || *n > 10'000'000)
      fail(path + "/max_tokens", "expected a positive integer, " + got(*it));
    else
      def->max_tokens = static_cast<int64_t>(*n);
  }
  if (auto it = v.find("response_format"); it != v.end()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
      fail(path + "/response_format",
           "expected an object with a 'type' (\"json_object\" or \"json_schema\"), " + got(*it));
    else
      def->response_format = *it;
  }
  if (auto it = v.find("tools"); it != v.end()) {
    if (!it->is_array() || it->empty()) {
      fail(path + "/tools", "expected a non-empty array of tool names, " + got(*it));
    } else {
      for (size_t i = 0; i < it->size(); ++i) {
        auto& t = (*it)[i];
        auto tpath = path + "/tools/" + std::to_string(i);
        if (!t.is_string() || !is_name(t.get<std::string>()))
          fail(tpath, "expected a tool name (letters, digits, '_' and '-'), " + got(t));
        else if (contains(def->tools, t.get<std::string>()))
          fail(tpath, "tool '" + t.get<std::string>() + "' is listed twice");
        else {
          check_tool(t.get<std::string>(), tpath);
          def->tools.push_back(t.get<std::string>());
        }
      }
      def->max_turns = default_llm_turns;
    }
  }
  if (auto it = v.find("max_turns"); it != v.end()) {
    auto n = non_negative_integer(*it);
    if (!v.contains("tools"))
      fail(path + "/max_turns", "max_turns needs 'tools' (the turns of a tool-calling loop)");
    else if (!n || *n < 1 || *n > static_cast<uint64_t>(max_llm_turns))
      fail(path + "/max_turns", "expected an integer from 1 to " + std::to_string(max_llm_turns)
                                  + ", " + got(*it));
    else
      def->max_turns = static_cast<int>(*n);
  }
}

void graph_parser::parse_message(step_work& w, json& m, const std::string& mpath,
                                 const std::string& rel) {
  if (!m.is_object()) {
    fail(mpath, "expected a message {\"role\": ..., \"content\": ...}, " + got(m));
    return;
  }
  auto role = m.find("role");
  if (role == m.end() || !role->is_string() || !contains(roles, role->get<std::string>())) {
    fail(mpath + "/role", "expected one of " + join(roles) + ", "
                            + (role == m.end() ? std::string{"got nothing"} : got(*role)));
    return;
  }
  auto r = role->get<std::string>();
  // An assistant's tool calls and the tool answers that follow them (a
  // conversation given whole, or a tool-calling loop's turn).
  std::vector<std::string> keys{"role", "content"};
  if (r == "assistant")
    keys.push_back("tool_calls");
  if (r == "tool")
    keys.push_back("tool_call_id");
  for (auto& [key, val] : m.items())
    if (!contains(keys, key))
      fail(mpath + "/" + escape_pointer(key),
           "unknown key '" + key + "' (a " + r + " message has " + join(keys) + ")");
  auto content = m.find("content");
  bool calls = m.contains("tool_calls");
  if (content != m.end() && content->is_string())
    w.texts.emplace_back(rel + "/content", &content->get_ref<const std::string&>());
  else if (!(calls && (content == m.end() || content->is_null())))
    fail(mpath + "/content",
         "expected a string, "
           + (content == m.end() ? std::string{"got nothing"} : got(*content)));
  if (r == "tool") {
    auto id = m.find("tool_call_id");
    if (id == m.end() || !id->is_string())
      fail(mpath + "/tool_call_id", "expected the id of the tool call answered, "
                                      + (id == m.end() ? std::string{"got nothing"} : got(*id)));
    else
      w.texts.emplace_back(rel + "/tool_call_id", &id->get_ref<const std::string&>());
  }
  if (!calls)
    return;
  auto& list = m["tool_calls"];
  if (!list.is_array() || list.empty()) {
    fail(mpath + "/tool_calls", "expected a non-empty array of tool calls, " + got(list));
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    auto cpath = mpath + "/tool_calls/" + std::to_string(i);
    auto& c = list[i];
    auto fn = c.is_object() ? c.find("function") : json::iterator{};
    if (!c.is_object() || !c.value("id", json{}).is_string() || fn == c.end()
        || !fn->is_object() || !fn->value("name", json{}).is_string()
        || !fn->value("arguments", json{}).is_string()) {
      fail(cpath, "expected {\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., "
                  "\"arguments\": \"JSON text\"}}, " + got(c));
      continue;
    }
    w.texts.emplace_back(rel + "/tool_calls/" + std::to_string(i) + "/function/arguments",
                         &(*fn)["arguments"].get_ref<const std::string&>());
  }
}

} // namespace canopy::core::detail
