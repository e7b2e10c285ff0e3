#include "actors/agent_reply.hpp"

#include "persistence/spelling.hpp"

namespace canopy::core {

namespace {

constexpr const char* reply_names[] = {"completed", "failed", "stopped", "busy", "cancelled"};
constexpr const char* cancel_names[] = {"cancelled", "no_execution"};

} // namespace

reply_status reply_status_of(execution_status x) {
  switch (x) {
    case execution_status::completed: return reply_status::completed;
    case execution_status::stopped: return reply_status::stopped;
    default: return reply_status::failed;
  }
}

const char* to_string(reply_status x) {
  return spelling_of(reply_names, x);
}

const char* to_string(cancel_result x) {
  return spelling_of(cancel_names, x);
}

bool from_string(const std::string& s, reply_status& x) {
  return parse_spelling(reply_names, s, x);
}

bool from_string(const std::string& s, cancel_result& x) {
  return parse_spelling(cancel_names, s, x);
}

} // namespace canopy::core
