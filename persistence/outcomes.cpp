#include "persistence/outcomes.hpp"

#include <iterator>

#include "persistence/spelling.hpp"

namespace canopy::core {

namespace {

constexpr const char* reason_names[] = {
  "",          "requested",   "parent_stopped", "child_stopped", "sibling_failed",
  "budget_exceeded", "deadline", "max_steps",   "max_depth",     "interrupted",
  "node_lost", "shutdown",    "retry",          "step_failed",   "condition_false",
  "needs_skipped", "wait_timeout", "rejected", "max_iterations",
};

constexpr const char* mode_names[] = {"graceful", "force"};

constexpr const char* stop_result_names[] = {"stopping", "stopped", "no_execution"};

constexpr const char* event_names[] = {
  "execution.queued",   "execution.started",  "execution.resumed", "execution.stopping",
  "execution.stopped",  "execution.completed", "execution.failed", "step.queued",
  "step.started",       "step.iteration",     "step.output",       "step.signalled",
  "step.waiting",       "step.retry",         "step.pending",      "step.skipped",
  "step.completed",     "step.failed",        "signal.received",   "signal.consumed",
  "stop.requested",     "stop.handled",       "agent.message",     "agent.reply",
  "agent.cancelled",    "subtree.stopped",
};
static_assert(std::size(event_names) == event_type_count);

} // namespace

event_family family_of(event_type x) {
  if (x <= event_type::execution_failed)
    return event_family::execution;
  if (x <= event_type::step_failed)
    return event_family::step;
  if (x <= event_type::signal_consumed)
    return event_family::signal;
  if (x <= event_type::stop_handled)
    return event_family::stop;
  if (x <= event_type::agent_cancelled)
    return event_family::agent;
  return event_family::internal;
}

bool is_final(event_type x) {
  return x == event_type::execution_completed || x == event_type::execution_failed
         || x == event_type::execution_stopped;
}

const char* to_string(step_reason x) {
  return spelling_of(reason_names, x);
}

const char* to_string(stop_mode x) {
  return spelling_of(mode_names, x);
}

const char* to_string(stop_result x) {
  return spelling_of(stop_result_names, x);
}

const char* to_string(event_type x) {
  return spelling_of(event_names, x);
}

bool from_string(const std::string& s, step_reason& x) {
  return parse_spelling(reason_names, s, x);
}

bool from_string(const std::string& s, stop_mode& x) {
  return parse_spelling(mode_names, s, x);
}

bool from_string(const std::string& s, stop_result& x) {
  return parse_spelling(stop_result_names, s, x);
}

bool from_string(const std::string& s, event_type& x) {
  return parse_spelling(event_names, s, x);
}

} // namespace canopy::core
