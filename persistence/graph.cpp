// The graph model's functions and the public entry points that parse and
// validate a graph (a document, a file, a stored bundle); graph_parser does the work.

#include "persistence/graph.hpp"


#include <cctype>
#include <deque>
#include <filesystem>
#include <utility>

#include "persistence/error.hpp"
#include "persistence/graph_parser.hpp"
#include "persistence/graph_paths.hpp"
#include "persistence/json_text.hpp"

namespace canopy::core {

namespace fs = std::filesystem;

namespace detail {

std::string normalize_path(const std::string& p) {
  std::error_code ec;
  fs::path abs = p.empty() ? fs::current_path(ec) : fs::absolute(fs::path{p}, ec);
  if (ec)
    abs = p;
  auto result = abs.lexically_normal().string();
  while (result.size() > 1 && result.back() == '/')
    result.pop_back();
  return result;
}

std::string parent_of(const std::string& abs_path) {
  auto parent = fs::path(abs_path).parent_path().string();
  return parent.empty() ? std::string{"/"} : parent;
}

std::string stem_of(const std::string& abs_path) {
  return fs::path(abs_path).stem().string();
}

bool is_file_reference(const std::string& s) {
  return s.find('/') != std::string::npos
         || (s.size() >= 5 && s.compare(s.size() - 5, 5, ".json") == 0);
}

graph_error inline_refusal(std::string path, const char* what) {
  return graph_error{std::move(path),
                     std::string{"inline commands are disabled on this node: "} + what
                       + " (register a tool in the node's config and name it instead)",
                     "inline_commands_disabled"};
}

} // namespace detail

namespace {

// -- files ---------------------------------------------------------------------

caf::error too_large() {
  return make_error(persistence_errc::invalid_graph, "graph document is larger than "
                                                       + std::to_string(max_graph_bytes >> 20)
                                                       + " MiB");
}

/// Reads the regular file `path`, at most `max_graph_bytes`.
caf::expected<std::string> read_graph_text(const std::string& path) {
  auto text = read_regular_file(path, max_graph_bytes, "graph file");
  if (!text && is(text.error(), persistence_errc::invalid_graph))
    return too_large();
  return text;
}

} // namespace

namespace detail {

caf::expected<json> load_graph_file(const std::string& abs_path) {
  auto text = read_graph_text(abs_path);
  if (!text)
    return std::move(text.error());
  auto doc = parse_json_text(*text);
  if (!doc)
    return make_error(persistence_errc::invalid_graph,
                      "in '" + abs_path + "': " + message_of(doc.error()));
  return doc;
}

std::string normalize(const fs::path& p) {
  return detail::normalize_path(p.string());
}

} // namespace detail

using detail::graph_parser;
using detail::normalize;
using detail::parent_of;

// -- model ---------------------------------------------------------------------

const char* to_string(step_kind x) {
  switch (x) {
    case step_kind::run: return "run";
    case step_kind::tool: return "tool";
    case step_kind::graph: return "graph";
    case step_kind::plan: return "plan";
    case step_kind::agent: return "agent";
    case step_kind::fn: return "fn";
    case step_kind::wait: return "wait";
    case step_kind::llm: return "llm";
  }
  return "unknown";
}

const char* to_string(on_max_rule x) {
  return x == on_max_rule::complete ? "complete" : "fail";
}

bool from_string(const std::string& s, on_max_rule& x) {
  if (s == "fail")
    x = on_max_rule::fail;
  else if (s == "complete")
    x = on_max_rule::complete;
  else
    return false;
  return true;
}

const char* to_string(wait_timeout x) {
  return x == wait_timeout::use_default ? "default" : "fail";
}

bool from_string(const std::string& s, wait_timeout& x) {
  if (s == "fail")
    x = wait_timeout::fail;
  else if (s == "default")
    x = wait_timeout::use_default;
  else
    return false;
  return true;
}

bool is_loop(const step_def& def) {
  return def.repeat != nullptr || (def.llm != nullptr && def.llm->max_turns > 1);
}

const step_def* graph::find(const std::string& id) const {
  auto it = index.find(id);
  if (it == index.end() || it->second >= steps.size())
    return nullptr;
  return &steps[it->second];
}

bool graph::is_upstream(const std::string& ancestor, const std::string& step) const {
  auto start = find(step);
  if (start == nullptr)
    return false;
  std::set<std::string> seen;
  std::deque<const step_def*> todo{start};
  while (!todo.empty()) {
    auto s = todo.front();
    todo.pop_front();
    for (auto& need : s->needs) {
      if (need == ancestor)
        return true;
      if (!seen.insert(need).second)
        continue;
      if (auto next = find(need))
        todo.push_back(next);
    }
  }
  return false;
}

std::string to_string(const graph_error& e) {
  if (e.path.empty())
    return e.message;
  return e.path + ": " + e.message;
}

// -- parsing and validation ------------------------------------------------------

parse_result parse_graph(const json& doc, const std::string& base_dir,
                         const parse_options& opts) {
  return parse_graph(json(doc), base_dir, opts);
}

parse_result parse_graph(json&& doc, const std::string& base_dir, const parse_options& opts) {
  try {
    graph_parser parser{opts, {}};
    return parser.run(std::move(doc), base_dir, "");
  } catch (const std::exception& ex) {
    parse_result result;
    result.errors.push_back(
      graph_error{"", std::string{"cannot validate graph: "} + ex.what(), {}});
    return result;
  }
}

parse_result parse_graph_file(const std::string& path, const parse_options& opts) {
  auto fail = [](std::string message) {
    parse_result result;
    result.errors.push_back(graph_error{"", std::move(message), {}});
    return result;
  };
  try {
    caf::expected<json> doc{json{}};
    {
      auto text = read_graph_text(path);
      if (!text)
        return fail(message_of(text.error()));
      doc = parse_json_text(*text);
      if (!doc)
        return fail(message_of(doc.error()));
    } // the text is freed before the graph is built
    auto abs = normalize(path);
    graph_parser parser{opts, {abs}};
    return parser.run(std::move(*doc), parent_of(abs), detail::stem_of(abs));
  } catch (const std::exception& ex) {
    return fail(std::string{"cannot validate graph: "} + ex.what());
  }
}

parse_result parse_graph_bundle(const json& document, const std::string& base_dir,
                                const json& files, parse_options opts) {
  opts.load_file = [files](const std::string& path) -> caf::expected<json> {
    if (files.is_object()) {
      auto i = files.find(path);
      if (i != files.end())
        return *i;
    }
    return make_error(persistence_errc::not_found,
                      "graph file '" + path + "' is not part of the stored graph");
  };
  return parse_graph(document, base_dir, opts);
}

std::vector<graph_error> check_agent_graph(const graph& g) {
  std::vector<graph_error> errors;
  bool has_message = false;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    auto& in = g.inputs[i];
    if (in == "message")
      has_message = true;
    else if (in != "history")
      errors.push_back({"/inputs/" + std::to_string(i),
                        "an agent's graph may declare only the inputs 'message' and 'history', "
                        "not '" + in + "'", ""});
  }
  if (!has_message)
    errors.push_back({"/inputs", "an agent's graph must declare the input 'message'", ""});
  if (!g.outputs.is_object() || !g.outputs.contains("reply"))
    errors.push_back({"/outputs/reply", "an agent's graph must have the output 'reply'", ""});
  return errors;
}

namespace {

/// Checks a name of 1 to `max` characters of `A-Z a-z 0-9 _ . -`; `what` is
/// "an agent name" or "a node name". @returns what is wrong, or "".
std::string check_word(const std::string& name, const char* what, size_t max) {
  if (name.empty())
    return std::string{what} + " must not be empty";
  if (name.size() > max)
    return std::string{what} + " has at most " + std::to_string(max) + " characters";
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-')
      return std::string{what} + " may hold only letters, digits, '_', '.' and '-' (not '"
             + std::string(1, static_cast<char>(c)) + "')";
  return {};
}

} // namespace

std::string check_agent_name(const std::string& name) {
  return check_word(name, "an agent name", 128);
}

std::string check_graph_id(const std::string& name) {
  return check_word(name, "a graph id", 128);
}

std::string check_node_name(const std::string& name) {
  return check_word(name, "a node name", 255);
}

} // namespace canopy::core
