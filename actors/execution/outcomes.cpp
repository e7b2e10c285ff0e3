#include "actors/execution/outcomes.hpp"

#include <cstring>

namespace canopy::core {

namespace {

constexpr const char* reason_names[] = {
  "",          "requested",   "parent_stopped", "child_stopped", "sibling_failed",
  "budget_exceeded", "deadline", "max_steps",   "max_depth",     "interrupted",
  "node_lost", "shutdown",    "retry",          "step_failed",   "condition_false",
  "needs_skipped", "wait_timeout", "rejected", "max_iterations",
};

} // namespace

const char* to_string(step_reason x) {
  return reason_names[static_cast<size_t>(x)];
}

bool from_string(const std::string& s, step_reason& x) {
  for (size_t i = 0; i < sizeof(reason_names) / sizeof(reason_names[0]); ++i)
    if (s == reason_names[i]) {
      x = static_cast<step_reason>(i);
      return true;
    }
  return false;
}

const char* to_string(stop_mode x) {
  return x == stop_mode::force ? "force" : "graceful";
}

bool from_string(const std::string& s, stop_mode& x) {
  if (s == "graceful")
    x = stop_mode::graceful;
  else if (s == "force")
    x = stop_mode::force;
  else
    return false;
  return true;
}

const char* to_string(turn_verdict x) {
  switch (x) {
    case turn_verdict::granted: return "granted";
    case turn_verdict::nested: return "nested";
    case turn_verdict::busy: return "busy";
    case turn_verdict::cancelled: return "cancelled";
  }
  return "busy";
}

} // namespace canopy::core
