#include "persistence/graph.hpp"


#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <utility>

#include "persistence/error.hpp"
#include "persistence/graph_order.hpp"
#include "persistence/graph_paths.hpp"
#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"
#include "persistence/shell_argv.hpp"

namespace canopy {

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

// -- constants -----------------------------------------------------------------

const std::vector<std::string> top_level_keys{"name", "inputs", "limits", "steps", "outputs"};

const std::vector<std::string> limit_keys{"max_depth", "max_steps", "budget", "deadline"};

/// `a` then `b`.
std::vector<std::string> concat(const std::vector<std::string>& a,
                                const std::vector<std::string>& b) {
  auto out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

const std::vector<std::string> kind_keys{"run", "tool", "graph", "plan", "agent", "fn"};

const std::vector<std::string> step_field_keys{"needs",   "with",        "message", "env",
                                               "stdin",   "cwd",         "timeout", "retries",
                                               "retry_delay", "cost",    "grace"};

const std::vector<std::string> grace_keys{"interrupt", "terminate"};

const std::vector<std::string> builtin_fns{"echo", "fail", "noop", "sleep"};

// -- small helpers -------------------------------------------------------------

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

template <class Container>
std::string join(const Container& xs, const std::string& sep = ", ") {
  std::string result;
  for (auto& x : xs) {
    if (!result.empty())
      result += sep;
    result += x;
  }
  return result;
}


/// Returns true for `[A-Za-z0-9_-]+`, the names references can spell.
bool is_name(const std::string& s) {
  if (s.empty())
    return false;
  for (auto c : s) {
    auto u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '_' || c == '-'))
      return false;
  }
  return true;
}

std::string got(const json& v) {
  return std::string{"got "} + v.type_name();
}

/// Reads a non-negative integer; nullopt when `v` is not one.
std::optional<uint64_t> non_negative_integer(const json& v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>();
  if (v.is_number_integer()) {
    auto x = v.get<int64_t>();
    if (x >= 0)
      return static_cast<uint64_t>(x);
  }
  return std::nullopt;
}

/// Reads a finite non-negative number; nullopt when `v` is not one.
std::optional<double> non_negative_number(const json& v) {
  if (!v.is_number())
    return std::nullopt;
  auto x = v.get<double>();
  if (!std::isfinite(x) || x < 0)
    return std::nullopt;
  return x;
}

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

using detail::is_file_reference;
using detail::parent_of;

/// Reorders `xs` in place so that `xs[k]` becomes the old `xs[order[k]]`;
/// `order` is a permutation of every position. O(n) moves.
template <class T>
void permute(std::vector<T>& xs, const std::vector<size_t>& order) {
  std::vector<bool> placed(xs.size(), false);
  for (size_t start = 0; start < xs.size(); ++start) {
    if (placed[start])
      continue;
    // One cycle of the permutation: position k takes the value at order[k].
    T first = std::move(xs[start]);
    for (size_t k = start;;) {
      placed[k] = true;
      auto from = order[k];
      if (from == start) {
        xs[k] = std::move(first);
        break;
      }
      xs[k] = std::move(xs[from]);
      k = from;
    }
  }
}

std::string normalize(const fs::path& p) {
  return detail::normalize_path(p.string());
}

// -- the parser ----------------------------------------------------------------

/// A step while it is being validated.
struct step_work {
  explicit step_work(step_def& d) : def(d) {
    // nop
  }
  std::string path; ///< `/steps/ID`
  /// The step being built, in the parser's `defs_` (its place in the
  /// document's order until the steps are sorted).
  step_def& def;
  /// String `needs` entries with their index, as written.
  std::vector<std::pair<size_t, const std::string*>> raw_needs; ///< into the document
  /// Strings that may hold references: (JSON path, text).
  /// (JSON path after `path`, text in the document or in `def`).
  std::vector<std::pair<std::string, const std::string*>> texts;
  /// Set when `with` is present but not an object.
  bool bad_with = false;
};

using loader_fn = std::function<caf::expected<json>(const std::string&)>;

/// Validates one graph document; a new parser per (child) graph.
class graph_parser {
public:
  graph_parser(const parse_options& opts, std::vector<std::string> chain)
    : opts_(opts), chain_(std::move(chain)) {
    loader_ = opts.load_file ? opts.load_file : loader_fn{load_graph_file};
    max_depth_ = opts.max_depth;
  }

  /// Validates `document`, which becomes the graph's `document`.
  parse_result run(json document, const std::string& base_dir,
                   const std::string& default_name) {
    g_ = std::make_shared<graph>();
    g_->document = std::move(document);
    const json& doc = g_->document;
    g_->base_dir = base_dir;
    g_->name = default_name;
    base_abs_ = normalize(base_dir);
    if (!doc.is_object()) {
      fail("", "a graph document must be a JSON object, " + got(doc));
      return finish();
    }
    for (auto& [key, val] : doc.items())
      if (!contains(top_level_keys, key))
        fail("/" + escape_pointer(key),
             "unknown key '" + key + "' (expected one of: " + join(top_level_keys) + ")"
               + did_you_mean(key, top_level_keys));
    if (auto it = doc.find("name"); it != doc.end()) {
      if (!it->is_string())
        fail("/name", "expected a string, " + got(*it));
      else if (it->get_ref<const std::string&>().empty())
        fail("/name", "must not be empty");
      else
        g_->name = it->get<std::string>();
    }
    if (auto it = doc.find("inputs"); it != doc.end())
      parse_inputs(*it);
    if (auto it = doc.find("limits"); it != doc.end())
      parse_limits(*it);
    if (auto it = doc.find("outputs"); it != doc.end()) {
      if (!it->is_object())
        fail("/outputs", "expected an object, " + got(*it));
      else
        g_->outputs = *it;
    }
    auto it = doc.find("steps");
    if (it == doc.end()) {
      fail("/steps", "missing 'steps' (an object of at least one step)");
    } else if (!it->is_object() || it->empty()) {
      fail("/steps", "expected an object of at least one step, "
                       + (it->is_object() ? std::string{"got an empty object"} : got(*it)));
    } else {
      // Large graphs (100,000 steps) must not pay for regrowth.
      // (`defs_` must not move: each step_work refers into it.)
      work_.reserve(it->size());
      work_index_.reserve(it->size());
      defs_.reserve(it->size());
      needs_.reserve(it->size());
      for (auto& [id, val] : it->items())
        parse_step(id, val);
      check_needs();
      auto order = sort_steps();
      check_references(order);
      // Without errors every step is ordered (a step left out is in or
      // behind a cycle, which is an error).
      if (errors_.empty() && order.size() == defs_.size()) {
        // Sort the steps where they are: no second vector of 100,000 steps.
        work_.clear();
        permute(defs_, order);
        g_->steps = std::move(defs_);
        std::vector<size_t> rank(order.size());
        for (size_t k = 0; k < order.size(); ++k)
          rank[order[k]] = k;
        for (auto& entry : work_index_)
          entry.second = rank[entry.second]; // the graph's index, in `finish`
      }
    }
    if (g_->outputs.is_object())
      for_each_string(g_->outputs, "/outputs", [this](const std::string& path,
                                                      const std::string& text) {
        check_text(std::string{}, path, text, nullptr);
      });
    return finish();
  }

private:
  // -- errors -------------------------------------------------------------------

  void fail(std::string path, std::string message, std::string code = {}) {
    errors_.push_back(graph_error{std::move(path), std::move(message), std::move(code)});
  }

  /// Refuses an inline command (`run`, argv `plan`) when the node does not
  /// allow them (SPEC §13 rule 19).
  void refuse_inline(const std::string& path, const char* what) {
    errors_.push_back(detail::inline_refusal(path, what));
  }

  parse_result finish() {
    parse_result result;
    if (errors_.empty()) {
      g_->files = std::move(files_);
      g_->index = std::move(work_index_);
      result.value = std::move(g_);
    } else {
      result.errors = std::move(errors_);
    }
    return result;
  }

  // -- top level ----------------------------------------------------------------

  void parse_inputs(const json& v) {
    if (!v.is_array()) {
      fail("/inputs", "expected an array of input names, " + got(v));
      return;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      auto path = "/inputs/" + std::to_string(i);
      if (!v[i].is_string()) {
        fail(path, "expected a string, " + got(v[i]));
        continue;
      }
      auto name = v[i].get<std::string>();
      if (!is_name(name))
        fail(path, "invalid input name '" + name + "' (use letters, digits, '_' and '-')");
      else if (input_set_.count(name) > 0)
        fail(path, "duplicate input '" + name + "'");
      else {
        input_set_.insert(name);
        g_->inputs.push_back(name);
      }
    }
  }

  void parse_limits(const json& v) {
    if (!v.is_object()) {
      fail("/limits", "expected an object, " + got(v));
      return;
    }
    for (auto& [key, val] : v.items()) {
      auto path = "/limits/" + escape_pointer(key);
      if (key == "max_depth") {
        auto x = non_negative_integer(val);
        if (!x || *x > static_cast<uint64_t>(std::numeric_limits<int>::max()))
          fail(path, "expected an integer >= 0, " + describe(val));
        else
          g_->limits.max_depth = static_cast<int>(*x);
      } else if (key == "max_steps") {
        auto x = non_negative_integer(val);
        if (!x || *x < 1)
          fail(path, "expected an integer >= 1, " + describe(val));
        else
          g_->limits.max_steps = *x;
      } else if (key == "budget") {
        auto x = non_negative_number(val);
        if (!x)
          fail(path, "expected a number >= 0, " + describe(val));
        else
          g_->limits.budget = *x;
      } else if (key == "deadline") {
        if (auto d = duration(val, path))
          g_->limits.deadline = *d;
      } else {
        fail(path, "unknown key '" + key + "' (expected one of: " + join(limit_keys) + ")"
                     + did_you_mean(key, limit_keys));
      }
    }
    // A child can only tighten the limit it inherits (SPEC §13 rule 8).
    if (g_->limits.max_depth)
      max_depth_ = std::min(max_depth_, *g_->limits.max_depth);
  }

  static std::string describe(const json& v) {
    if (v.is_number())
      return "got " + v.dump();
    return got(v);
  }

  std::optional<millis> duration(const json& v, const std::string& path) {
    auto d = duration_from_json(v);
    if (!d) {
      fail(path, message_of(d.error()));
      return std::nullopt;
    }
    return *d;
  }

  // -- steps --------------------------------------------------------------------

  void parse_step(const std::string& id, const json& v) {
    work_index_.emplace(id, work_.size());
    work_.emplace_back(defs_.emplace_back());
    needs_.emplace_back();
    auto& w = work_.back();
    w.path = "/steps/" + escape_pointer(id);
    w.def.id = id;
    const auto& path = w.path;
    if (!is_name(id))
      fail(path, "invalid step id '" + id + "' (use letters, digits, '_' and '-')");
    if (!v.is_object()) {
      fail(path, "a step must be an object, " + got(v));
      return;
    }
    std::vector<std::string> kinds;
    for (auto& [key, val] : v.items()) {
      if (contains(kind_keys, key))
        kinds.push_back(key);
      else if (!contains(step_field_keys, key))
        fail(path + "/" + escape_pointer(key),
             "unknown key '" + key + "' (a step has one kind of " + join(kind_keys)
               + " and the fields " + join(step_field_keys) + ")"
               + did_you_mean(key, concat(kind_keys, step_field_keys)));
    }
    if (kinds.empty())
      fail(path, "step '" + id + "' has no kind (expected exactly one of " + join(kind_keys)
                   + ")");
    else if (kinds.size() > 1)
      fail(path, "step '" + id + "' has " + std::to_string(kinds.size()) + " kinds ("
                   + join(kinds) + "); expected exactly one");
    parse_step_fields(w, v, contains(kinds, "agent"));
    if (kinds.size() == 1)
      parse_kind(w, kinds.front(), v.at(kinds.front()));
  }

  void parse_step_fields(step_work& w, const json& v, bool is_agent) {
    const auto& path = w.path;
    auto& def = w.def;
    if (auto it = v.find("needs"); it != v.end()) {
      if (!it->is_array()) {
        fail(path + "/needs", "expected an array of step ids, " + got(*it));
      } else {
        for (size_t i = 0; i < it->size(); ++i) {
          const auto& x = (*it)[i];
          if (x.is_string())
            w.raw_needs.emplace_back(i, &x.get_ref<const std::string&>());
          else
            fail(path + "/needs/" + std::to_string(i), "expected a step id, " + got(x));
        }
      }
    }
    if (auto it = v.find("with"); it != v.end()) {
      if (!it->is_object()) {
        fail(path + "/with", "expected an object, " + got(*it));
        w.bad_with = true;
      } else {
        def.with = *it;
        collect_texts(w, *it, "/with");
      }
    }
    if (auto it = v.find("message"); it != v.end()) {
      if (!is_agent) {
        fail(path + "/message", "'message' is only valid on agent steps");
      } else {
        def.message = *it;
        collect_texts(w, *it, "/message");
      }
    }
    if (auto it = v.find("env"); it != v.end()) {
      if (!it->is_object()) {
        fail(path + "/env", "expected an object of strings, " + got(*it));
      } else {
        for (auto& [key, val] : it->items()) {
          auto vpath = path + "/env/" + escape_pointer(key);
          if (!val.is_string()) {
            fail(vpath, "expected a string, " + got(val));
            continue;
          }
          def.env.emplace(key, val.get<std::string>());
          w.texts.emplace_back(vpath.substr(path.size()), &val.get_ref<const std::string&>());
        }
      }
    }
    if (auto it = v.find("stdin"); it != v.end()) {
      if (!it->is_string()) {
        fail(path + "/stdin", "expected a string, " + got(*it));
      } else {
        def.stdin_data = it->get<std::string>();
        w.texts.emplace_back("/stdin", &*def.stdin_data);
      }
    }
    if (auto it = v.find("cwd"); it != v.end()) {
      if (!it->is_string()) {
        fail(path + "/cwd", "expected a string, " + got(*it));
      } else {
        def.cwd = it->get<std::string>();
        w.texts.emplace_back("/cwd", &*def.cwd);
      }
    }
    if (auto it = v.find("timeout"); it != v.end())
      def.timeout = duration(*it, path + "/timeout");
    if (auto it = v.find("retries"); it != v.end()) {
      auto x = non_negative_integer(*it);
      if (!x || *x > static_cast<uint64_t>(std::numeric_limits<int>::max()))
        fail(path + "/retries", "expected an integer >= 0, " + describe(*it));
      else
        def.retries = static_cast<int>(*x);
    }
    if (auto it = v.find("retry_delay"); it != v.end())
      if (auto d = duration(*it, path + "/retry_delay"))
        def.retry_delay = *d;
    if (auto it = v.find("cost"); it != v.end()) {
      auto x = non_negative_number(*it);
      if (!x)
        fail(path + "/cost", "expected a number >= 0, " + describe(*it));
      else
        def.cost = *x;
    }
    if (auto it = v.find("grace"); it != v.end()) {
      def.grace_set = true;
      parse_grace(def, *it, path + "/grace");
    }
  }

  void parse_grace(step_def& def, const json& v, const std::string& path) {
    if (!v.is_object()) {
      fail(path, "expected an object such as {\"interrupt\": \"10s\", \"terminate\": \"5s\"}, "
                   + got(v));
      return;
    }
    for (auto& [key, val] : v.items()) {
      auto kpath = path + "/" + escape_pointer(key);
      if (key == "interrupt") {
        if (auto d = duration(val, kpath))
          def.grace.interrupt = *d;
      } else if (key == "terminate") {
        if (auto d = duration(val, kpath))
          def.grace.terminate = *d;
      } else {
        fail(kpath, "unknown key '" + key + "' (expected one of: " + join(grace_keys) + ")"
                      + did_you_mean(key, grace_keys));
      }
    }
  }

  void collect_texts(step_work& w, const json& v, const std::string& path) {
    for_each_string(v, path, [&w](const std::string& p, const std::string& text) {
      w.texts.emplace_back(p, &text);
    });
  }

  // -- kinds --------------------------------------------------------------------

  void parse_kind(step_work& w, const std::string& key, const json& v) {
    auto path = w.path + "/" + key;
    auto& def = w.def;
    if (key == "run") {
      def.kind = step_kind::run;
      if (!opts_.allow_inline)
        refuse_inline(path, detail::run_refusal);
      if (parse_argv(w, v, path))
        def.argv = v;
    } else if (key == "tool") {
      def.kind = step_kind::tool;
      if (auto name = non_empty_string(v, path, "a tool name")) {
        def.target = *name;
        check_tool(*name, path);
      }
    } else if (key == "plan") {
      def.kind = step_kind::plan;
      if (v.is_string()) {
        if (auto name = non_empty_string(v, path, "a tool name")) {
          def.target = *name;
          def.argv = v;
          check_tool(*name, path);
        }
      } else if (v.is_array()) {
        if (!opts_.allow_inline)
          refuse_inline(path, detail::plan_refusal);
        if (parse_argv(w, v, path))
          def.argv = v;
      } else {
        fail(path, "expected a tool name or a non-empty argv array, " + got(v));
      }
    } else if (key == "agent") {
      def.kind = step_kind::agent;
      if (auto name = non_empty_string(v, path, "an agent name"))
        def.target = *name;
    } else if (key == "fn") {
      def.kind = step_kind::fn;
      if (auto name = non_empty_string(v, path, "a function name")) {
        def.target = *name;
        if (!contains(builtin_fns, *name) && opts_.fns.count(*name) == 0) {
          std::set<std::string> known{builtin_fns.begin(), builtin_fns.end()};
          known.insert(opts_.fns.begin(), opts_.fns.end());
          fail(path, "unknown function '" + *name + "' (known: " + join(known) + ")"
                       + did_you_mean(*name, {known.begin(), known.end()}));
        }
      }
    } else {
      def.kind = step_kind::graph;
      parse_child(w, v, path);
    }
  }

  std::optional<std::string> non_empty_string(const json& v, const std::string& path,
                                              const char* what) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
      fail(path, std::string{"expected "} + what + " (a non-empty string), "
                   + (v.is_string() ? std::string{"got an empty string"} : got(v)));
      return std::nullopt;
    }
    return v.get<std::string>();
  }

  bool parse_argv(step_work& w, const json& v, const std::string& path) {
    if (!v.is_array() || v.empty()) {
      fail(path, "expected a non-empty array of strings (argv), "
                   + (v.is_array() ? std::string{"got an empty array"} : got(v)));
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
      auto ipath = path + "/" + std::to_string(i);
      if (!v[i].is_string()) {
        fail(ipath, "expected a string, " + got(v[i]));
        ok = false;
      } else {
        w.texts.emplace_back(ipath.substr(w.path.size()), &v[i].get_ref<const std::string&>());
      }
    }
    if (auto e = ok ? check_shell_argv(v, path, "") : std::nullopt) {
      errors_.push_back(std::move(*e));
      ok = false;
    }
    return ok;
  }

  void check_tool(const std::string& name, const std::string& path) {
    if (opts_.any_tool || opts_.tools.count(name) > 0)
      return;
    if (opts_.tools.empty())
      fail(path, "unknown tool '" + name + "' (no tools are registered on this node)");
    else
      fail(path, "unknown tool '" + name + "' (registered: " + join(opts_.tools) + ")"
                   + did_you_mean(name, {opts_.tools.begin(), opts_.tools.end()}));
  }

  // -- child graphs -------------------------------------------------------------

  void parse_child(step_work& w, const json& v, const std::string& path) {
    auto& def = w.def;
    if (v.is_string() && v.get_ref<const std::string&>().empty()) {
      fail(path, "expected a graph object, a file path or a graph name, got an empty string");
      return;
    }
    if (!v.is_string() && !v.is_object()) {
      fail(path, "expected a graph object, a file path or a graph name, " + got(v));
      return;
    }
    if (opts_.depth + 1 > max_depth_) {
      fail(path, "max_depth " + std::to_string(max_depth_) + " exceeded (this step would start a "
                   "child at depth " + std::to_string(opts_.depth + 1) + ")");
      return;
    }
    auto child_opts = opts_;
    child_opts.depth = opts_.depth + 1;
    child_opts.max_depth = max_depth_;
    child_opts.load_file = loader_;
    parse_result result;
    if (v.is_object()) {
      graph_parser child{child_opts, chain_};
      child.cache_ = cache_;
      result = child.run(v, g_->base_dir, w.def.id);
    } else {
      auto target = v.get<std::string>();
      if (!is_file_reference(target)) {
        if (opts_.check_graph_name)
          if (auto why = opts_.check_graph_name(target); !why.empty())
            fail(path, why);
        def.target = std::move(target); // a registered graph, resolved when it runs
        return;
      }
      auto abs = normalize(fs::path(base_abs_) / target);
      if (auto it = std::find(chain_.begin(), chain_.end(), abs); it != chain_.end()) {
        std::vector<std::string> cycle{it, chain_.end()};
        cycle.push_back(abs);
        fail(path, "recursive graph: '" + fs::path(abs).filename().string()
                     + "' includes itself (" + join(cycle, " -> ") + ")");
        return;
      }
      // A file used by many steps (a fan-out of identical sub-graphs) is
      // read and parsed once per depth; the steps share the parsed graph.
      auto key = abs + '\0' + std::to_string(child_opts.depth) + '\0'
                 + std::to_string(child_opts.max_depth);
      auto cached = cache_->find(key);
      if (cached == cache_->end()) {
        auto doc = loader_(abs);
        if (!doc) {
          fail(path, message_of(doc.error()));
          return;
        }
        auto chain = chain_;
        chain.push_back(abs);
        graph_parser child{child_opts, std::move(chain)};
        child.cache_ = cache_;
        auto parsed = child.run(*doc, parent_of(abs), detail::stem_of(abs));
        cached = cache_->emplace(key, cached_file{std::move(parsed), std::move(*doc)}).first;
      }
      result = cached->second.result;
      files_.emplace(abs, cached->second.doc);
    }
    for (auto& e : result.errors)
      fail(path + e.path, std::move(e.message), std::move(e.code));
    if (!result.value)
      return;
    for (auto& [file, doc] : result.value->files)
      files_.emplace(file, doc);
    check_child_inputs(w, *result.value);
    def.child = std::move(result.value);
  }

  /// A `graph` step's `with` is the child's `inputs` (SPEC §13 rule 1).
  void check_child_inputs(const step_work& w, const graph& child) {
    const auto& with = w.def.with;
    if (w.bad_with || !with.is_object())
      return;
    for (auto& input : child.inputs)
      if (!with.contains(input))
        fail(w.path + "/with", "missing input '" + input + "' of graph '" + child.name + "'");
    for (auto& [key, val] : with.items())
      if (std::find(child.inputs.begin(), child.inputs.end(), key) == child.inputs.end())
        fail(w.path + "/with/" + escape_pointer(key),
             "graph '" + child.name + "' declares no input '" + key + "'"
               + (child.inputs.empty() ? std::string{" (it declares no inputs)"}
                                       : " (declared: " + join(child.inputs) + ")"));
  }

  // -- dependencies -------------------------------------------------------------

  /// Resolves `needs` to positions (`needs_`), without duplicates.
  void check_needs() {
    std::vector<size_t> added(work_.size(), work_.size()); // added[j] == i: i needs j
    for (size_t i = 0; i < work_.size(); ++i) {
      auto& w = work_[i];
      for (auto& [k, name_ptr] : w.raw_needs) {
        auto& name = *name_ptr;
        auto it = work_index_.find(name);
        if (name == w.def.id) {
          fail(w.path + "/needs/" + std::to_string(k), "step '" + w.def.id + "' needs itself");
        } else if (it == work_index_.end()) {
          fail(w.path + "/needs/" + std::to_string(k),
               "unknown step '" + name + "' in needs" + did_you_mean(name, step_ids()));
        } else if (added[it->second] != i) {
          added[it->second] = i;
          needs_[i].push_back(it->second);
          w.def.needs.push_back(name);
        }
      }
      decltype(w.raw_needs){}.swap(w.raw_needs); // done with: free it now
    }
  }

  /// Returns the steps in topological order (ties by id); reports one cycle
  /// per group of steps that need each other.
  std::vector<size_t> sort_steps() {
    auto sorted = detail::order_steps(needs_);
    for (auto& cycle : sorted.cycles) {
      std::string names;
      for (auto i : cycle)
        names += work_[i].def.id + " -> ";
      names += work_[cycle.front()].def.id;
      fail(work_[cycle.front()].path + "/needs", "dependency cycle: " + names);
    }
    return std::move(sorted.order);
  }

  // -- references ---------------------------------------------------------------

  /// Checks every step's references; whether a named step is upstream is
  /// decided for all of them at once (`detail::upstream`), and the error of
  /// each that is not goes where it was found among the others.
  void check_references(const std::vector<size_t>& order) {
    for (size_t i = 0; i < work_.size(); ++i)
      for (auto& [rel, text] : work_[i].texts)
        check_text(work_[i].path, rel, *text, &i);
    if (queries_.empty())
      return;
    auto answers = detail::upstream(needs_, order, queries_);
    std::vector<graph_error> merged;
    size_t e = 0;
    for (size_t q = 0; q < queries_.size(); ++q) {
      if (answers[q])
        continue;
      auto& p = pending_[q];
      for (; e < p.at; ++e)
        merged.push_back(std::move(errors_[e]));
      merged.push_back(graph_error{*p.base + *p.rel,
                                   "reference " + p.text + ": step '"
                                     + work_[queries_[q].ancestor].def.id
                                     + "' is not upstream of '" + work_[queries_[q].step].def.id
                                     + "' (add it to needs)",
                                   {}});
    }
    if (merged.empty())
      return;
    for (; e < errors_.size(); ++e)
      merged.push_back(std::move(errors_[e]));
    errors_ = std::move(merged);
  }

  /// Checks the references in `text` at JSON path `base + rel`; `step` is
  /// the referencing step, or nullptr for `outputs` (where any step may be
  /// named).
  void check_text(const std::string& base, const std::string& rel, const std::string& text,
                  const size_t* step) {
    // The path is made only for an error: most texts have none.
    auto fail = [&](std::string message) { this->fail(base + rel, std::move(message)); };
    auto refs = find_references(text);
    if (!refs) {
      fail(message_of(refs.error()));
      return;
    }
    for (auto& ref : *refs) {
      auto prefix = [&ref] { return "reference " + ref.text + ": "; };
      switch (ref.scope) {
        case reference::inputs:
          if (input_set_.count(ref.name) == 0)
            fail(prefix() + "unknown input '" + ref.name + "'"
                         + (input_set_.empty() ? std::string{" (the graph declares no inputs)"}
                                               : " (declared: " + join(g_->inputs) + ")"));
          break;
        case reference::with:
          fail(prefix() + "${with.KEY} is only valid in tool argv templates");
          break;
        case reference::steps: {
          auto it = work_index_.find(ref.name);
          if (it == work_index_.end())
            fail(prefix() + "unknown step '" + ref.name + "'" + did_you_mean(ref.name, step_ids()));
          else if (step != nullptr) {
            // Decided in `check_references`, for all steps at once.
            queries_.push_back(detail::upstream_query{*step, it->second});
            pending_.push_back(pending_ref{errors_.size(), &base, &rel, ref.text});
          }
          break;
        }
      }
    }
  }

  // -- state --------------------------------------------------------------------

  const parse_options& opts_;
  std::vector<std::string> chain_; ///< absolute paths of the files being parsed
  /// A parsed file and its document.
  struct cached_file {
    parse_result result;
    json doc;
  };
  /// Files parsed so far in this parse (shared with child parsers).
  std::shared_ptr<std::map<std::string, cached_file>> cache_
    = std::make_shared<std::map<std::string, cached_file>>();
  loader_fn loader_;
  int max_depth_;
  std::string base_abs_;
  std::shared_ptr<graph> g_;
  std::set<std::string> input_set_;
  std::vector<step_work> work_;
  /// Step id → position in the work list; becomes the graph's index.
  std::unordered_map<std::string, size_t> work_index_;

  /// The ids of the graph's steps, for suggestions.
  std::vector<std::string> step_ids() const {
    std::vector<std::string> out;
    for (auto& w : work_)
      out.push_back(w.def.id);
    return out;
  }
  /// The steps, in the document's order (then sorted into the graph).
  std::vector<step_def> defs_;
  /// `needs` of each step as positions in the work list.
  detail::needs_lists needs_;
  /// Where an upstream check was asked: its error goes before `errors_[at]`.
  struct pending_ref {
    size_t at;
    const std::string* base; ///< the step's path
    const std::string* rel;  ///< in the step's `texts`
    std::string text;        ///< the reference as written
  };
  /// Pending upstream checks, and where each was asked.
  std::vector<detail::upstream_query> queries_;
  std::vector<pending_ref> pending_;
  std::map<std::string, json> files_;
  std::vector<graph_error> errors_;
};

} // namespace

// -- model ---------------------------------------------------------------------

const char* to_string(step_kind x) {
  switch (x) {
    case step_kind::run: return "run";
    case step_kind::tool: return "tool";
    case step_kind::graph: return "graph";
    case step_kind::plan: return "plan";
    case step_kind::agent: return "agent";
    case step_kind::fn: return "fn";
  }
  return "unknown";
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

} // namespace canopy

namespace canopy {

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

} // namespace canopy
