// The graph parser's document level: the top-level keys, `inputs` and
// `limits`, and the sorted graph it returns; also the helpers its files share.

#include "persistence/graph_parser.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include "persistence/error.hpp"
#include "persistence/graph_paths.hpp"
#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"

namespace canopy::core::detail {

namespace {

// -- constants -----------------------------------------------------------------

const std::vector<std::string> top_level_keys{"name", "inputs", "limits", "steps", "outputs"};

const std::vector<std::string> limit_keys{"max_depth", "max_steps", "budget", "deadline"};

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

} // namespace

// -- small helpers -------------------------------------------------------------

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

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

std::optional<double> non_negative_number(const json& v) {
  if (!v.is_number())
    return std::nullopt;
  auto x = v.get<double>();
  if (!std::isfinite(x) || x < 0)
    return std::nullopt;
  return x;
}

// -- the parser ----------------------------------------------------------------

graph_parser::graph_parser(const parse_options& opts, std::vector<std::string> chain)
  : opts_(opts), chain_(std::move(chain)) {
  loader_ = opts.load_file ? opts.load_file : loader_fn{load_graph_file};
  max_depth_ = opts.max_depth;
}

parse_result graph_parser::run(json document, const std::string& base_dir,
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
    if (key == schema_key) {
      if (!val.is_string())
        fail("/" + escape_pointer(key), "expected a string (the URL or path of a JSON Schema), "
                                          + got(val));
    } else if (!contains(top_level_keys, key))
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

// -- errors --------------------------------------------------------------------

void graph_parser::fail(std::string path, std::string message, std::string code) {
  errors_.push_back(graph_error{std::move(path), std::move(message), std::move(code)});
}

void graph_parser::refuse_inline(const std::string& path, const char* what) {
  errors_.push_back(detail::inline_refusal(path, what));
}

parse_result graph_parser::finish() {
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

// -- top level -----------------------------------------------------------------

void graph_parser::parse_inputs(const json& v) {
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

void graph_parser::parse_limits(const json& v) {
  if (!v.is_object()) {
    fail("/limits", "expected an object, " + got(v));
    return;
  }
  for (auto& [key, val] : v.items()) {
    auto path = "/limits/" + escape_pointer(key);
    if (key == "max_depth") {
      auto x = non_negative_integer(val);
      if (!x || *x > static_cast<uint64_t>(std::numeric_limits<int>::max()))
        fail(path, "expected an integer >= 0, " + got(val));
      else
        g_->limits.max_depth = static_cast<int>(*x);
    } else if (key == "max_steps") {
      auto x = non_negative_integer(val);
      if (!x || *x < 1)
        fail(path, "expected an integer >= 1, " + got(val));
      else
        g_->limits.max_steps = *x;
    } else if (key == "budget") {
      auto x = non_negative_number(val);
      if (!x)
        fail(path, "expected a number >= 0, " + got(val));
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
  // A child can only tighten the limit it inherits (runtime/docs/reference/graph-format.md#limits).
  if (g_->limits.max_depth)
    max_depth_ = std::min(max_depth_, *g_->limits.max_depth);
}

std::optional<millis> graph_parser::duration(const json& v, const std::string& path) {
  auto d = duration_from_json(v);
  if (!d) {
    fail(path, message_of(d.error()));
    return std::nullopt;
  }
  return *d;
}

} // namespace canopy::core::detail
