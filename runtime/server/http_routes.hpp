#pragma once

// The HTTP API's route table: plain string matching of request paths against
// patterns such as `/v1/executions/{id}/stop`, and the closed sets of labels
// (methods, routes) that metrics and logs may carry. No regular expressions:
// a match walks the path once, without recursion, so its cost and stack use
// do not grow with the path's length beyond one linear scan.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace canopy::core {

/// The methods the API knows; any other method is `other` in labels.
const std::vector<std::string>& http_methods();

/// The method's label: itself when it is one of http_methods(), else
/// `"other"`. Never holds a byte of an unknown method.
const std::string& method_label(std::string_view method);

/// A path as a log value: quoted, `"` and `\` escaped, control bytes and
/// bytes >= 0x7f written `\xHH`, cut at 256 bytes (then ending in `...`).
std::string log_text(std::string_view s);

/// A matched request: the route's index, and the text of its `{...}`
/// segments.
struct route_match {
  /// Index of the route in the order of route_table::add; npos when none.
  size_t index = npos;
  /// The text of the first `{...}` segment (empty when the route has none).
  std::string capture;
  /// The text of every `{...}` segment after the first, in order.
  std::vector<std::string> more;
  /// True when some route has this path, whatever its method (405, not 404).
  bool path_known = false;
  static constexpr size_t npos = static_cast<size_t>(-1);
  explicit operator bool() const { return index != npos; }
};

/// Routes: a method and a pattern each. Patterns are absolute paths whose
/// segments are literals or `{name}` placeholders, each of which matches
/// exactly one non-empty segment. Not thread-safe to add; match() is const and may
/// run on any number of threads at once.
class route_table {
public:
  /// The label of requests that match no route.
  static const std::string unknown;

  /// Adds a route. @returns its index.
  size_t add(std::string method, const std::string& pattern);

  /// Matches `method` and `path`; HEAD matches GET routes. Cost: one scan
  /// of `path` per route of the same segment count, constant stack.
  route_match match(std::string_view method, std::string_view path) const;

  /// The route's pattern, the label of its requests in metrics and logs.
  const std::string& pattern(size_t index) const { return routes_[index].pattern; }

  /// Every distinct pattern, then `unknown`: the closed set of route
  /// labels.
  std::vector<std::string> labels() const;

  /// The label of a request: its route's pattern, or `unknown`.
  const std::string& label(std::string_view method, std::string_view path) const;

private:
  /// One segment of a pattern: a literal, or the `{...}` placeholder.
  struct segment {
    std::string text;
    bool placeholder = false;
  };
  struct entry {
    std::string method;
    std::string pattern;
    std::vector<segment> segments; ///< the segments after the leading '/'
  };
  std::vector<entry> routes_;
};

} // namespace canopy::core
