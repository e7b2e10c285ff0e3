#pragma once

// Helpers shared by the runtime's source files (runtime_agents.cpp,
// runtime_executions.cpp, runtime_graphs.cpp). Internal: not installed.

#include "persistence/store.hpp"

namespace canopy::core::runtime_detail {

/// The longest a commit through the store writer may take: the writers'
/// lock wait, plus headroom for the commit itself.
inline millis commit_bound(const store& db) {
  return db.write_wait() + millis{5000};
}

} // namespace canopy::core::runtime_detail
