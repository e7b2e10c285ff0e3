#include "actors/execution/outcomes.hpp"

namespace canopy::core {

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
