#include "actors/agent_reply.hpp"

namespace canopy::core {

namespace {

constexpr const char* reply_names[] = {"completed", "failed", "stopped", "busy", "cancelled"};
constexpr const char* cancel_names[] = {"cancelled", "no_execution"};

template <class Enum, size_t N>
bool parse(const char* const (&names)[N], const std::string& s, Enum& x) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) {
      x = static_cast<Enum>(i);
      return true;
    }
  return false;
}

} // namespace

reply_status reply_status_of(execution_status x) {
  switch (x) {
    case execution_status::completed: return reply_status::completed;
    case execution_status::stopped: return reply_status::stopped;
    default: return reply_status::failed;
  }
}

const char* to_string(reply_status x) {
  return reply_names[static_cast<size_t>(x)];
}

const char* to_string(cancel_result x) {
  return cancel_names[static_cast<size_t>(x)];
}

bool from_string(const std::string& s, reply_status& x) {
  return parse(reply_names, s, x);
}

bool from_string(const std::string& s, cancel_result& x) {
  return parse(cancel_names, s, x);
}

} // namespace canopy::core
