// The graph parser's `repeat`: a `graph` step that runs its child again
// until a condition over the last iteration holds, at most `max` times.
// `until` and `carry` reference the steps of the child graph (the iteration
// that just completed), never the parent's: the parent's references are
// checked by graph_check.cpp, these here.

#include "persistence/graph_parser.hpp"

#include <utility>

#include "persistence/condition.hpp"
#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"

namespace canopy::core::detail {

namespace {

const std::vector<std::string> repeat_keys{"until", "max", "carry", "on_max"};

} // namespace

void graph_parser::parse_repeat(step_work& w, const json& v, const std::string& path) {
  if (w.def.kind != step_kind::graph) {
    fail(path, "'repeat' is only valid on graph steps (it runs the child graph again)");
    return;
  }
  if (!v.is_object()) {
    fail(path, "expected an object such as {\"until\": \"${steps.check.json.done}\", "
               "\"max\": 5}, " + got(v));
    return;
  }
  auto def = std::make_shared<repeat_def>();
  for (auto& [key, val] : v.items())
    if (!contains(repeat_keys, key))
      fail(path + "/" + escape_pointer(key),
           "unknown key '" + key + "' (repeat has the keys " + join(repeat_keys) + ")"
             + did_you_mean(key, repeat_keys));
  const graph* child = w.def.child.get(); // null: a registered graph, checked when it runs
  // A reference of `until` or `carry`: a step of the child graph.
  auto check_ref_text = [&](const std::string& at, const std::string& text) {
    auto refs = find_references(text);
    if (!refs) {
      fail(at, message_of(refs.error()));
      return;
    }
    for (auto& ref : *refs) {
      if (ref.scope != reference::steps) {
        fail(at, "reference " + ref.text
                   + ": repeat may only reference the steps of the iteration that "
                     "completed (${steps.ID...} of the child graph)");
      } else if (child != nullptr && child->find(ref.name) == nullptr) {
        std::vector<std::string> ids;
        for (auto& s : child->steps)
          ids.push_back(s.id);
        fail(at, "reference " + ref.text + ": the child graph has no step '" + ref.name + "'"
                   + did_you_mean(ref.name, ids));
      }
    }
  };
  if (auto it = v.find("max"); it == v.end()) {
    fail(path, "missing 'max' (the most iterations it runs, 1 to "
                 + std::to_string(max_repeat_iterations) + ")");
  } else if (auto n = non_negative_integer(*it);
             !n || *n < 1 || *n > static_cast<uint64_t>(max_repeat_iterations)) {
    fail(path + "/max", "expected an integer from 1 to " + std::to_string(max_repeat_iterations)
                          + ", " + got(*it));
  } else {
    def->max = static_cast<int>(*n);
  }
  if (auto it = v.find("on_max"); it != v.end()) {
    if (!it->is_string() || !from_string(it->get<std::string>(), def->on_max))
      fail(path + "/on_max", "expected \"fail\" or \"complete\", "
                               + (it->is_string() ? "got \"" + it->get<std::string>() + "\""
                                                  : got(*it)));
  }
  if (auto it = v.find("until"); it != v.end()) {
    def->until = *it;
    check_condition(
      *it, path + "/until", [this](std::string p, std::string m) { fail(p, std::move(m)); },
      [&](std::string p, const std::string* text) { check_ref_text(p, *text); });
  } else if (def->on_max != on_max_rule::complete) {
    fail(path, "missing 'until' (the condition that ends the loop); a loop that always runs "
               "'max' iterations says \"on_max\": \"complete\"");
  }
  if (auto it = v.find("carry"); it != v.end()) {
    if (!it->is_object()) {
      fail(path + "/carry", "expected an object (child input → value), " + got(*it));
    } else {
      def->carry = *it;
      for (auto& [key, val] : it->items()) {
        auto kpath = path + "/carry/" + escape_pointer(key);
        if (child != nullptr && !contains(child->inputs, key))
          fail(kpath, "graph '" + child->name + "' declares no input '" + key + "'"
                        + (child->inputs.empty()
                             ? std::string{" (it declares no inputs)"}
                             : " (declared: " + join(child->inputs) + ")"));
        for_each_string(val, kpath, [&](const std::string& at, const std::string& text) {
          check_ref_text(at, text);
        });
      }
    }
  }
  w.def.repeat = std::move(def);
}

} // namespace canopy::core::detail
