#pragma once

// The states behind the library's public handles (<canopy/...>) and the
// conversions between the public types and the runtime's own. Internal to
// runtime/lib/: not installed.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <canopy/canopy.hpp>

#include "runtime/node/runtime.hpp"

namespace canopy {

struct graph::state {
  std::shared_ptr<const core::graph> model;
};

struct fn_context::state {
  core::fn_context* ctx;
};

struct subscription::state {
  std::mutex mtx; ///< one drain or cancel at a time
  core::subscription sub;
  std::string root_id; ///< the tree it follows; empty: every event
};

struct runtime::state {
  std::unique_ptr<core::runtime> rt;
  std::mutex subs_mtx;
  /// Subscriptions made through this runtime, for `execution::wait`.
  std::vector<std::weak_ptr<subscription::state>> subs;

  /// Subscribes `f` to tree `root_id` (empty: every event) and remembers it.
  subscription subscribe(std::function<void(const event&)> f, const std::string& root_id);

  /// Returns once every live subscription that follows tree `root_id` was
  /// handed every event committed before this call.
  void drain_followers(const std::string& root_id);

  /// Ends every live subscription (the runtime closes).
  void cancel_all();
};

struct execution::state {
  runtime::state* rt;
  core::execution_handle h;
};

namespace facade {

/// The public error for a runtime error (`caf::error`), by category and code.
error to_error(const caf::error& err);

/// `errc::invalid` with every graph error as a problem.
error to_error(const std::vector<core::graph_error>& errs);

execution_info to_info(const core::execution_record& rec);

event to_event(const core::event_record& e);

/// The public graph for a parse result: the graph, or `errc::invalid`.
result<graph> to_graph(const core::parse_result& parsed);

} // namespace facade

} // namespace canopy
