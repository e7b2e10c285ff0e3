#pragma once

// Graph errors as text, one per line, for test failure messages, and the
// check that a document is rejected at a JSON path.

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "persistence/graph.hpp"

namespace canopy::core::test {

/// Every error of `errors`, indented, one per line.
inline std::string render(const std::vector<graph_error>& errors) {
  std::string result;
  for (auto& e : errors)
    result += "  " + to_string(e) + "\n";
  return result;
}

/// True when `doc` is rejected with an error at exactly `path` whose message has `part`.
inline bool rejected_at(const json& doc, const std::string& path, const std::string& part = "") {
  auto result = parse_graph(doc, "/tmp");
  INFO("document: " << doc.dump() << "\nerrors:\n" << render(result.errors));
  CHECK_FALSE(result);
  for (auto& e : result.errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

} // namespace canopy::core::test
