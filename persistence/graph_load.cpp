// Loading a stored graph without validating it again (resume): the store
// only keeps graphs that `parse_graph` accepted, so this builds the model
// straight from the document. What it must still do: the topological order
// (ties by id, as the parser sorts), the index, child graphs from the stored
// files, durations, and the one node policy nothing checks at launch
// (inline commands).

#include "persistence/graph.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "persistence/error.hpp"
#include "persistence/graph_paths.hpp"
#include "persistence/reference.hpp"

namespace canopy::core {

namespace {

/// Thrown for a stored form that `parse_graph` did not produce.
struct corrupt_graph : std::runtime_error {
  using std::runtime_error::runtime_error;
};

millis duration_of(const json& v) {
  auto d = duration_from_json(v);
  if (!d)
    throw corrupt_graph(message_of(d.error()));
  return *d;
}

const std::string& string_of(const json& v) {
  return v.get_ref<const std::string&>(); // throws on another type
}

/// Copies `xs` without repeats, keeping the first of each.
std::vector<std::string> unique_needs(const json& xs) {
  std::vector<std::string> result;
  result.reserve(xs.size());
  if (xs.size() <= 16) {
    for (auto& x : xs)
      if (std::find(result.begin(), result.end(), string_of(x)) == result.end())
        result.push_back(string_of(x));
    return result;
  }
  std::unordered_set<std::string_view> seen;
  seen.reserve(xs.size());
  for (auto& x : xs)
    if (seen.insert(string_of(x)).second)
      result.push_back(string_of(x));
  return result;
}

/// A loaded graph, or the errors found in it (paths relative to it).
struct loaded {
  std::shared_ptr<const graph> value;
  std::vector<graph_error> errors;
};

/// Loads one stored graph and, recursively, its children. One loader per
/// call of `load_stored_graph`: it shares each included file's graph among
/// the steps that include it.
class graph_loader {
public:
  graph_loader(const json& files, bool allow_inline)
    : files_(files), allow_inline_(allow_inline) {
  }

  loaded load(json doc, std::string base_dir, std::string default_name) {
    loaded out;
    auto g = std::make_shared<graph>();
    g->document = std::move(doc);
    g->base_dir = std::move(base_dir);
    g->name = std::move(default_name);
    const json& d = g->document;
    if (!d.is_object())
      throw corrupt_graph("a graph document is not an object");
    if (auto it = d.find("name"); it != d.end() && !string_of(*it).empty())
      g->name = string_of(*it);
    if (auto it = d.find("inputs"); it != d.end())
      for (auto& x : *it)
        g->inputs.push_back(string_of(x));
    if (auto it = d.find("limits"); it != d.end())
      load_limits(g->limits, *it);
    if (auto it = d.find("outputs"); it != d.end())
      g->outputs = *it;
    load_steps(*g, d.at("steps"), out.errors);
    if (out.errors.empty())
      out.value = std::move(g);
    return out;
  }

private:
  static void load_limits(graph_limits& lim, const json& v) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto& key = it.key();
      if (key == "max_depth")
        lim.max_depth = static_cast<int>(it->get<int64_t>());
      else if (key == "max_steps")
        lim.max_steps = it->get<uint64_t>();
      else if (key == "budget")
        lim.budget = it->get<double>();
      else if (key == "deadline")
        lim.deadline = duration_of(*it);
      else
        throw corrupt_graph("unknown limit '" + key + "'");
    }
  }

  /// Builds the steps in the parser's order: Kahn's sort taking the smallest
  /// ready position in id order first. The order comes first (from the ids
  /// and `needs` alone), then each step is built in its place: a large graph's
  /// steps are large, and building them elsewhere to move them costs as much
  /// again (measured: runtime/docs/benchmarks.md#design-measurements).
  void load_steps(graph& g, const json& steps, std::vector<graph_error>& errors) {
    auto n = steps.size();
    // Values are positions in id order (a JSON object is a sorted map)
    // until sorted.
    std::vector<json::const_iterator> by_id;
    by_id.reserve(n);
    g.index.reserve(n);
    for (auto it = steps.begin(); it != steps.end(); ++it) {
      g.index.emplace(it.key(), by_id.size());
      by_id.push_back(it);
    }
    std::vector<size_t> pending(n, 0);
    std::vector<std::vector<size_t>> dependents(n);
    for (size_t i = 0; i < n; ++i) {
      auto needs = by_id[i]->find("needs");
      if (needs == by_id[i]->end())
        continue;
      for (auto& need : *needs) {
        auto j = g.index.find(string_of(need));
        if (j == g.index.end())
          throw corrupt_graph("step '" + by_id[i].key() + "' needs an unknown step '"
                              + string_of(need) + "'");
        auto& ds = dependents[j->second];
        if (!ds.empty() && ds.back() == i)
          continue; // named twice
        ds.push_back(i);
        ++pending[i];
      }
    }
    std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
    for (size_t i = 0; i < n; ++i)
      if (pending[i] == 0)
        ready.push(i);
    std::vector<size_t> position(n);
    std::vector<std::pair<size_t, graph_error>> found; // by position in id order
    g.steps.reserve(n);
    while (!ready.empty()) {
      auto i = ready.top();
      ready.pop();
      position[i] = g.steps.size();
      g.steps.emplace_back();
      std::vector<graph_error> step_errors;
      load_step(g, g.steps.back(), by_id[i].key(), by_id[i].value(), step_errors);
      for (auto& e : step_errors)
        found.emplace_back(i, std::move(e));
      for (auto d : dependents[i])
        if (--pending[d] == 0)
          ready.push(d);
    }
    if (g.steps.size() != n)
      throw corrupt_graph("its steps' needs form a cycle");
    // Report in the parser's order: by step id.
    std::stable_sort(found.begin(), found.end(),
                     [](auto& x, auto& y) { return x.first < y.first; });
    for (auto& [i, e] : found)
      errors.push_back(std::move(e));
    for (auto& kv : g.index)
      kv.second = position[kv.second];
  }

  void load_step(graph& g, step_def& def, const std::string& id, const json& v,
                 std::vector<graph_error>& errors) {
    def.id = id;
    if (!v.is_object())
      throw corrupt_graph("step '" + id + "' is not an object");
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto& key = it.key();
      const json& val = it.value();
      if (key == "needs") {
        def.needs = unique_needs(val);
      } else if (key == "fn") {
        def.kind = step_kind::fn;
        def.target = string_of(val);
      } else if (key == "with") {
        def.with = val;
      } else if (key == "run") {
        def.kind = step_kind::run;
        def.argv = val;
        if (!allow_inline_)
          errors.push_back(detail::inline_refusal(step_path(id, key), detail::run_refusal));
      } else if (key == "tool") {
        def.kind = step_kind::tool;
        def.target = string_of(val);
      } else if (key == "plan") {
        def.kind = step_kind::plan;
        def.argv = val;
        if (val.is_string())
          def.target = string_of(val);
        else if (!allow_inline_)
          errors.push_back(detail::inline_refusal(step_path(id, key), detail::plan_refusal));
      } else if (key == "agent") {
        def.kind = step_kind::agent;
        def.target = string_of(val);
      } else if (key == "graph") {
        def.kind = step_kind::graph;
        load_child(g, def, val, errors);
      } else if (key == "wait") {
        def.kind = step_kind::wait;
        def.wait = load_wait(def.id, val);
      } else if (key == "llm") {
        def.kind = step_kind::llm;
        def.llm = load_llm(def.id, val);
      } else {
        load_field(def, key, val);
      }
    }
  }

  static void load_field(step_def& def, const std::string& key, const json& val) {
    if (key == "when") {
      def.when = val;
    } else if (key == "repeat") {
      def.repeat = load_repeat(def.id, val);
    } else if (key == "after") {
      if (!from_string(string_of(val), def.after))
        throw corrupt_graph("step '" + def.id + "': unknown after '" + string_of(val) + "'");
    } else if (key == "message") {
      def.message = val;
    } else if (key == "env") {
      for (auto it = val.begin(); it != val.end(); ++it)
        def.env.emplace(it.key(), string_of(*it));
    } else if (key == "stdin") {
      def.stdin_data = string_of(val);
    } else if (key == "cwd") {
      def.cwd = string_of(val);
    } else if (key == "timeout") {
      def.timeout = duration_of(val);
    } else if (key == "retries") {
      def.retries = static_cast<int>(val.get<int64_t>());
    } else if (key == "retry_delay") {
      def.retry_delay = duration_of(val);
    } else if (key == "cost") {
      def.cost = val.get<double>();
    } else if (key == "grace") {
      def.grace_set = true;
      for (auto it = val.begin(); it != val.end(); ++it) {
        if (it.key() == "interrupt")
          def.grace.interrupt = duration_of(*it);
        else if (it.key() == "terminate")
          def.grace.terminate = duration_of(*it);
        else
          throw corrupt_graph("step '" + def.id + "': unknown grace key '" + it.key() + "'");
      }
    } else {
      throw corrupt_graph("step '" + def.id + "': unknown key '" + key + "'");
    }
  }

  /// A `wait` step's object, as `parse_graph` reads it (graph_parse_wait.cpp).
  static std::shared_ptr<const wait_def> load_wait(const std::string& id, const json& v) {
    auto def = std::make_shared<wait_def>();
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto& key = it.key();
      const json& val = it.value();
      if (key == "signal") {
        def->signal = string_of(val);
      } else if (key == "prompt") {
        def->prompt = string_of(val);
      } else if (key == "schema") {
        def->schema = val;
      } else if (key == "options") {
        def->options = val;
      } else if (key == "timeout") {
        def->timeout = duration_of(val);
      } else if (key == "on_timeout") {
        if (!from_string(string_of(val), def->on_timeout))
          throw corrupt_graph("step '" + id + "': unknown on_timeout '" + string_of(val) + "'");
      } else if (key == "default") {
        def->default_value = val;
      } else if (key == "approvers") {
        for (auto& x : val)
          def->approvers.push_back(string_of(x));
      } else {
        throw corrupt_graph("step '" + id + "': unknown wait key '" + key + "'");
      }
    }
    return def;
  }

  /// An `llm` step's object, as `parse_graph` reads it (graph_parse_llm.cpp).
  static std::shared_ptr<const llm_def> load_llm(const std::string& id, const json& v) {
    auto def = std::make_shared<llm_def>();
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto& key = it.key();
      const json& val = it.value();
      if (key == "provider") {
        def->provider = string_of(val);
      } else if (key == "model") {
        def->model = string_of(val);
      } else if (key == "messages") {
        if (!val.is_array())
          throw corrupt_graph("step '" + id + "': llm messages are not an array");
        def->messages = val;
      } else if (key == "temperature") {
        def->temperature = val.get<double>();
      } else if (key == "max_tokens") {
        def->max_tokens = val.get<int64_t>();
      } else if (key == "response_format") {
        def->response_format = val;
      } else if (key == "tools") {
        def->tools = val.get<std::vector<std::string>>();
        if (def->max_turns == 0)
          def->max_turns = default_llm_turns;
      } else if (key == "max_turns") {
        def->max_turns = val.get<int>();
      } else {
        throw corrupt_graph("step '" + id + "': unknown llm key '" + key + "'");
      }
    }
    return def;
  }

  /// A `graph` step's `repeat`, as `parse_graph` reads it (graph_parse_repeat.cpp).
  static std::shared_ptr<const repeat_def> load_repeat(const std::string& id, const json& v) {
    auto def = std::make_shared<repeat_def>();
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto& key = it.key();
      const json& val = it.value();
      if (key == "until") {
        def->until = val;
      } else if (key == "max") {
        def->max = static_cast<int>(val.get<int64_t>());
      } else if (key == "carry") {
        def->carry = val;
      } else if (key == "on_max") {
        if (!from_string(string_of(val), def->on_max))
          throw corrupt_graph("step '" + id + "': unknown on_max '" + string_of(val) + "'");
      } else {
        throw corrupt_graph("step '" + id + "': unknown repeat key '" + key + "'");
      }
    }
    return def;
  }

  static std::string step_path(const std::string& id, const std::string& key) {
    return "/steps/" + escape_pointer(id) + "/" + key;
  }

  /// A `graph` step: an inline graph, a file from the stored files (read
  /// once per load, shared by the steps that include it), or a registered
  /// graph's name (resolved when the step runs).
  void load_child(graph& g, step_def& def, const json& v, std::vector<graph_error>& errors) {
    loaded child;
    if (v.is_object()) {
      child = load(v, g.base_dir, def.id);
    } else {
      auto& target = string_of(v);
      if (!detail::is_file_reference(target)) {
        def.target = target;
        return;
      }
      auto abs = detail::normalize_path(
        (std::filesystem::path{detail::normalize_path(g.base_dir)} / target).string());
      auto cached = cache_.find(abs);
      if (cached == cache_.end()) {
        auto doc = files_.is_object() ? files_.find(abs) : files_.end();
        if (doc == files_.end())
          throw corrupt_graph("graph file '" + abs + "' is not part of the stored graph");
        cached = cache_.emplace(abs, load(*doc, detail::parent_of(abs), detail::stem_of(abs)))
                   .first;
      }
      child = cached->second;
      if (child.value)
        g.files.emplace(abs, child.value->document);
    }
    auto prefix = step_path(def.id, "graph");
    for (auto& e : child.errors)
      errors.push_back(graph_error{prefix + e.path, e.message, e.code});
    if (!child.value)
      return;
    for (auto& [file, doc] : child.value->files)
      g.files.emplace(file, doc);
    def.child = std::move(child.value);
  }

  const json& files_;
  bool allow_inline_;
  /// Included files loaded so far: absolute path → graph (or its errors).
  std::map<std::string, loaded> cache_;
};

} // namespace

parse_result load_stored_graph(json document, const std::string& base_dir, const json& files,
                               const parse_options& opts) {
  parse_result result;
  try {
    graph_loader loader{files, opts.allow_inline};
    auto out = loader.load(std::move(document), base_dir, "");
    result.value = std::move(out.value);
    result.errors = std::move(out.errors);
  } catch (const std::exception& ex) {
    result.value = nullptr;
    result.errors = {graph_error{"", std::string{"the stored graph cannot be loaded: "}
                                       + ex.what(), {}}};
  }
  return result;
}

} // namespace canopy::core
