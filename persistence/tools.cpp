#include "persistence/tools.hpp"

#include <utility>

#include "persistence/error.hpp"
#include "persistence/graph_parser.hpp"
#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/shell_argv.hpp"
#include "persistence/value_schema.hpp"

namespace canopy::core {

namespace {

// -- constants -----------------------------------------------------------------

constexpr const char* tool_keys = "argv, max_parallel, timeout, grace, description, parameters";


// -- helpers -------------------------------------------------------------------

/// Collects the errors of one `tools` object.
class tools_parser {
public:
  explicit tools_parser(std::vector<graph_error>& errors) : errors_(errors) {
    // nop
  }

  tool_table run(const json& tools, const std::string& path) {
    tool_table result;
    if (!tools.is_object()) {
      fail(path, "expected an object of tools (name -> {\"argv\": [...]}), " + got(tools));
      return result;
    }
    for (auto& [name, val] : tools.items()) {
      auto before = errors_.size();
      auto def = parse_tool(name, val, path + "/" + escape_pointer(name));
      if (errors_.size() == before)
        result.emplace(name, std::move(def));
    }
    return result;
  }

private:
  void fail(std::string path, std::string message) {
    errors_.push_back(graph_error{std::move(path), std::move(message), {}});
  }

  tool_def parse_tool(const std::string& name, const json& v, const std::string& path) {
    tool_def def;
    def.name = name;
    if (name.empty())
      fail(path, "a tool name must not be empty");
    if (!v.is_object()) {
      fail(path, "a tool must be an object such as {\"argv\": [\"prog\", \"${with.arg}\"]}, "
                   + got(v));
      return def;
    }
    if (!v.contains("argv"))
      fail(path, "missing 'argv' (a non-empty array of strings)");
    for (auto& [key, val] : v.items()) {
      auto kpath = path + "/" + escape_pointer(key);
      if (key == "argv")
        parse_argv(def, val, kpath);
      else if (key == "max_parallel")
        parse_max_parallel(def, val, kpath);
      else if (key == "timeout")
        parse_timeout(def, val, kpath);
      else if (key == "grace")
        def.grace = detail::parse_grace_periods(val, kpath, errors_);
      else if (key == "description")
        parse_description(def, val, kpath);
      else if (key == "parameters")
        parse_parameters(def, val, kpath);
      else
        fail(kpath, "unknown key '" + key + "' (expected one of: " + tool_keys + ")");
    }
    return def;
  }

  void parse_argv(tool_def& def, const json& v, const std::string& path) {
    if (!v.is_array() || v.empty()) {
      fail(path, "expected a non-empty array of strings (argv), "
                   + (v.is_array() ? std::string{"got an empty array"} : got(v)));
      return;
    }
    auto before = errors_.size();
    for (size_t i = 0; i < v.size(); ++i) {
      auto ipath = path + "/" + std::to_string(i);
      if (!v[i].is_string()) {
        fail(ipath, "expected a string, " + got(v[i]));
        continue;
      }
      auto refs = find_references(v[i].get_ref<const std::string&>());
      if (!refs) {
        fail(ipath, message_of(refs.error()));
        continue;
      }
      for (auto& ref : *refs)
        if (ref.scope == reference::steps)
          fail(ipath, "reference " + ref.text
                        + ": a tool's argv may only use ${with.KEY} and ${inputs.KEY}"
                          " (pass step results through the step's 'with')");
    }
    if (errors_.size() == before)
      if (auto e = check_shell_argv(v, path, def.name))
        errors_.push_back(std::move(*e));
    if (errors_.size() == before)
      def.argv = v;
  }

  void parse_max_parallel(tool_def& def, const json& v, const std::string& path) {
    if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() > 0)) {
      auto n = v.get<uint64_t>();
      if (n > 0) {
        def.max_parallel = static_cast<size_t>(n);
        return;
      }
    }
    fail(path, "expected an integer >= 1, " + got(v));
  }

  void parse_description(tool_def& def, const json& v, const std::string& path) {
    if (!v.is_string())
      fail(path, "expected a string (what the tool does, for a model), " + got(v));
    else
      def.description = v.get<std::string>();
  }

  /// A model passes arguments as an object: the schema must say so.
  void parse_parameters(tool_def& def, const json& v, const std::string& path) {
    if (!is_name(def.name)) {
      fail(path, "a tool a model may call needs a name of letters, digits, '_' and '-'");
      return;
    }
    if (!v.is_object() || v.value("type", json{}) != "object") {
      fail(path, "expected a JSON Schema of type \"object\" (a model passes its arguments "
                 "as an object), " + got(v));
      return;
    }
    auto bad = check_schema(v);
    for (auto& e : bad)
      fail(path + e.path, e.message);
    if (bad.empty())
      def.parameters = v;
  }

  std::optional<millis> duration(const json& v, const std::string& path) {
    auto d = duration_from_json(v);
    if (!d) {
      fail(path, message_of(d.error()));
      return std::nullopt;
    }
    return *d;
  }

  void parse_timeout(tool_def& def, const json& v, const std::string& path) {
    auto d = duration(v, path);
    if (!d)
      return;
    if (d->count() == 0) {
      fail(path, "a timeout must be longer than 0ms");
      return;
    }
    def.timeout = *d;
  }

  std::vector<graph_error>& errors_;
};

} // namespace

// -- parsing -------------------------------------------------------------------

tool_table parse_tools(const json& tools, const std::string& path,
                       std::vector<graph_error>& errors) {
  try {
    return tools_parser{errors}.run(tools, path);
  } catch (const std::exception& ex) {
    errors.push_back(graph_error{path, std::string{"cannot read tools: "} + ex.what(), {}});
    return {};
  }
}

} // namespace canopy::core
