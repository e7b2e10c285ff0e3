#pragma once

// Graph errors as text, one per line, for test failure messages.

#include <string>
#include <vector>

#include "persistence/graph.hpp"

namespace canopy::test {

/// Every error of `errors`, indented, one per line.
inline std::string render(const std::vector<graph_error>& errors) {
  std::string result;
  for (auto& e : errors)
    result += "  " + to_string(e) + "\n";
  return result;
}

} // namespace canopy::test
