// The graph parser's checks across steps: `needs` resolved and sorted (with
// the cycles that stop it), and every reference checked against the others.

#include "persistence/graph_parser.hpp"

#include <utility>

#include "persistence/error.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"

namespace canopy::core::detail {

// -- dependencies --------------------------------------------------------------

void graph_parser::check_needs() {
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

std::vector<size_t> graph_parser::sort_steps() {
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

// -- references ----------------------------------------------------------------

void graph_parser::check_references(const std::vector<size_t>& order) {
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

void graph_parser::check_text(const std::string& base, const std::string& rel,
                              const std::string& text, const size_t* step) {
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

} // namespace canopy::core::detail
