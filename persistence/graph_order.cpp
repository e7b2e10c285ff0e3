#include "persistence/graph_order.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>

namespace canopy::core::detail {

namespace {

constexpr size_t none = std::numeric_limits<size_t>::max();

// -- cycles --------------------------------------------------------------------

/// Tarjan's strongly connected components of the steps not `done`, with an
/// explicit call stack. @returns the component of each step (`none` if done).
std::vector<size_t> components(const needs_lists& needs, const std::vector<bool>& done) {
  auto n = needs.size();
  std::vector<size_t> index(n, none);
  std::vector<size_t> low(n, 0);
  std::vector<size_t> comp(n, none);
  std::vector<bool> on_stack(n, false);
  std::vector<size_t> stack;
  struct frame {
    size_t step;
    size_t next; ///< the next need to look at
  };
  std::vector<frame> calls;
  size_t counter = 0;
  size_t count = 0;
  auto visit = [&](size_t v) {
    index[v] = low[v] = counter++;
    stack.push_back(v);
    on_stack[v] = true;
    calls.push_back(frame{v, 0});
  };
  for (size_t s = 0; s < n; ++s) {
    if (done[s] || index[s] != none)
      continue;
    visit(s);
    while (!calls.empty()) {
      auto v = calls.back().step;
      auto& next = calls.back().next;
      if (next < needs[v].size()) {
        auto w = needs[v][next++];
        if (done[w])
          continue;
        if (index[w] == none)
          visit(w); // invalidates `next`: not used again this round
        else if (on_stack[w])
          low[v] = std::min(low[v], index[w]);
        continue;
      }
      if (low[v] == index[v]) {
        size_t w = none;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          comp[w] = count;
        } while (w != v);
        ++count;
      }
      calls.pop_back();
      if (!calls.empty()) {
        auto u = calls.back().step;
        low[u] = std::min(low[u], low[v]);
      }
    }
  }
  return comp;
}

/// Walks from `start` along needs inside its component until a step
/// repeats. @returns the cycle, rotated to start at its smallest position.
std::vector<size_t> cycle_from(const needs_lists& needs, const std::vector<size_t>& comp,
                               size_t start, std::vector<size_t>& seen_at) {
  std::vector<size_t> walk;
  auto cur = start;
  while (seen_at[cur] == none) {
    seen_at[cur] = walk.size();
    walk.push_back(cur);
    for (auto j : needs[cur])
      if (comp[j] == comp[cur]) {
        cur = j;
        break;
      }
  }
  std::vector<size_t> cycle{walk.begin() + static_cast<std::ptrdiff_t>(seen_at[cur]),
                            walk.end()};
  for (auto i : walk)
    seen_at[i] = none;
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
  return cycle;
}

} // namespace

// -- order ---------------------------------------------------------------------

step_order order_steps(const needs_lists& needs) {
  auto n = needs.size();
  std::vector<size_t> pending(n);
  std::vector<size_t> dependents_start(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    pending[i] = needs[i].size();
    for (auto j : needs[i])
      ++dependents_start[j + 1];
  }
  for (size_t i = 0; i < n; ++i)
    dependents_start[i + 1] += dependents_start[i];
  // Dependents as one flat array (CSR): no vector per step.
  std::vector<size_t> dependents(dependents_start[n]);
  {
    auto fill = dependents_start;
    for (size_t i = 0; i < n; ++i)
      for (auto j : needs[i])
        dependents[fill[j]++] = i;
  }
  step_order result;
  result.order.reserve(n);
  std::vector<bool> done(n, false);
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0)
      ready.push(i);
  while (!ready.empty()) {
    auto i = ready.top();
    ready.pop();
    done[i] = true;
    result.order.push_back(i);
    for (auto k = dependents_start[i]; k < dependents_start[i + 1]; ++k)
      if (--pending[dependents[k]] == 0)
        ready.push(dependents[k]);
  }
  if (result.order.size() == n)
    return result;
  // Whatever is left is in a cycle or behind one: one cycle per component.
  auto comp = components(needs, done);
  std::vector<size_t> size(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (comp[i] != none)
      ++size[comp[i]];
  std::vector<bool> reported(n, false);
  std::vector<size_t> seen_at(n, none);
  for (size_t i = 0; i < n; ++i) {
    auto c = comp[i];
    if (c == none || size[c] < 2 || reported[c])
      continue;
    reported[c] = true; // `i` is the component's smallest position
    result.cycles.push_back(cycle_from(needs, comp, i, seen_at));
  }
  return result;
}

// -- upstream ------------------------------------------------------------------

std::vector<bool> upstream(const needs_lists& needs, const std::vector<size_t>& order,
                           const std::vector<upstream_query>& queries) {
  auto n = needs.size();
  std::vector<bool> answers(queries.size(), false);
  std::vector<size_t> rank(n, none);
  for (size_t r = 0; r < order.size(); ++r)
    rank[order[r]] = r;
  // Direct needs and the order answer most queries; group by step to mark
  // each step's needs once.
  std::vector<size_t> by_step(queries.size());
  for (size_t q = 0; q < queries.size(); ++q)
    by_step[q] = q;
  std::stable_sort(by_step.begin(), by_step.end(), [&](size_t a, size_t b) {
    return queries[a].step < queries[b].step;
  });
  std::vector<size_t> direct(n, none); // direct[j] == i: step i needs j
  std::vector<size_t> open;            // queries left for the masks
  size_t marked = none;
  for (auto q : by_step) {
    auto [step, ancestor] = queries[q];
    if (rank[step] == none) {
      answers[q] = true; // in or behind a cycle: that is the error
      continue;
    }
    if (rank[ancestor] == none || rank[ancestor] >= rank[step])
      continue; // false
    if (marked != step) {
      for (auto j : needs[step])
        direct[j] = step;
      marked = step;
    }
    if (direct[ancestor] == step)
      answers[q] = true;
    else
      open.push_back(q);
  }
  if (open.empty())
    return answers;
  // The open ancestors, by rank, in groups of 64: one bit each.
  std::vector<size_t> targets;
  for (auto q : open)
    targets.push_back(rank[queries[q].ancestor]);
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  std::vector<size_t> slot(n, none); // by rank: position in `targets`
  for (size_t t = 0; t < targets.size(); ++t)
    slot[targets[t]] = t;
  std::sort(open.begin(), open.end(), [&](size_t a, size_t b) {
    return slot[rank[queries[a].ancestor]] < slot[rank[queries[b].ancestor]];
  });
  std::vector<uint64_t> mask(order.size(), 0); // by rank: ancestors among the group
  size_t k = 0;
  while (k < open.size()) {
    auto group = slot[rank[queries[open[k]].ancestor]] / 64;
    auto end = k;
    size_t hi = 0;
    while (end < open.size() && slot[rank[queries[open[end]].ancestor]] / 64 == group) {
      hi = std::max(hi, rank[queries[open[end]].step]);
      ++end;
    }
    auto lo = targets[group * 64];
    // A path from an ancestor of rank >= lo to a step of rank <= hi stays
    // inside [lo, hi]: propagate there only.
    for (auto r = lo; r <= hi; ++r) {
      uint64_t m = 0;
      for (auto j : needs[order[r]]) {
        auto rj = rank[j];
        if (rj < lo)
          continue;
        m |= mask[rj];
        auto s = slot[rj];
        if (s != none && s / 64 == group)
          m |= uint64_t{1} << (s % 64);
      }
      mask[r] = m;
    }
    for (; k < end; ++k) {
      auto& query = queries[open[k]];
      auto s = slot[rank[query.ancestor]];
      answers[open[k]] = (mask[rank[query.step]] >> (s % 64)) & 1u;
    }
  }
  return answers;
}

} // namespace canopy::core::detail
