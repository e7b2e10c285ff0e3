#pragma once

/// Internal to persistence/: the dependency algorithms of graph validation
/// (topological order, cycles, upstream checks), on steps numbered 0..n-1.
/// Each runs in time and memory linear in steps plus needs (the upstream
/// check: see `upstream`), and none recurses, so 100,000-deep chains are fine.

#include <cstddef>
#include <vector>

namespace canopy::core::detail {

/// `needs[i]` lists the steps that step `i` needs: valid positions, without
/// duplicates and without `i` itself.
using needs_lists = std::vector<std::vector<size_t>>;

/// The steps in topological order and the cycles that keep the rest out.
struct step_order {
  /// Every step whose needs are all ordered, dependencies first, ties by
  /// position. Steps in a cycle, or needing one, are absent.
  std::vector<size_t> order;
  /// One cycle per strongly connected component of two or more steps, in
  /// the order of their smallest positions; each lists its steps in `needs`
  /// direction (each needs the next, the last needs the first), starting at
  /// its smallest position.
  std::vector<std::vector<size_t>> cycles;
};

/// Orders the steps (Kahn's algorithm) and finds one cycle per strongly
/// connected component of what is left (Tarjan's, iterative).
/// @returns the order and the cycles, in O(n log n + e) time and O(n + e) memory.
step_order order_steps(const needs_lists& needs);

/// One question for `upstream`: does `step` depend, directly or not, on `ancestor`?
struct upstream_query {
  size_t step;
  size_t ancestor;
};

/// Answers every query; `order` is `order_steps(needs).order`. A step
/// absent from `order` (in or behind a cycle) answers true for any
/// ancestor: its cycle is the error to report; an ancestor absent from it
/// is upstream of no ordered step. Direct needs and queries against
/// the order cost O(1) each; the others are answered together with 64-bit
/// ancestor masks propagated in topological order over the window of ranks
/// between each group of 64 ancestors and the steps asking about them:
/// O(n + e + q log q) when references stay near (the usual case), at worst
/// O((n + e) * q / 64) time; O(n + q) memory always.
/// @returns one answer per query, in the order given.
std::vector<bool> upstream(const needs_lists& needs, const std::vector<size_t>& order,
                           const std::vector<upstream_query>& queries);

} // namespace canopy::core::detail
