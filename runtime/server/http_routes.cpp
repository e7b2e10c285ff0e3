#include "runtime/server/http_routes.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace canopy::core {

// -- labels -----------------------------------------------------------------------

const std::vector<std::string>& http_methods() {
  static const std::vector<std::string> methods{"GET",    "HEAD",  "POST",   "PUT",
                                                "DELETE", "PATCH", "OPTIONS"};
  return methods;
}

const std::string& method_label(std::string_view method) {
  static const std::string other = "other";
  for (auto& m : http_methods())
    if (method == m)
      return m;
  return other;
}

std::string log_text(std::string_view s) {
  constexpr size_t max_bytes = 256;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_bytes)
    out += "...";
  return out + "\"";
}

// -- route table ------------------------------------------------------------------

const std::string route_table::unknown = "unknown";

size_t route_table::add(std::string method, const std::string& pattern) {
  if (pattern.empty() || pattern[0] != '/')
    throw std::invalid_argument("route pattern must start with '/': " + pattern);
  entry e{std::move(method), pattern, {}};
  size_t begin = 1;
  for (;;) {
    auto end = std::min(pattern.find('/', begin), pattern.size());
    auto text = pattern.substr(begin, end - begin);
    bool placeholder = text.size() > 2 && text.front() == '{' && text.back() == '}';
    e.segments.push_back({placeholder ? std::string{} : text, placeholder});
    if (end == pattern.size())
      break;
    begin = end + 1;
  }
  routes_.push_back(std::move(e));
  return routes_.size() - 1;
}

route_match route_table::match(std::string_view method, std::string_view path) const {
  route_match found;
  if (path.empty() || path[0] != '/')
    return found;
  // Segment count of the path: one scan, stopped as soon as it exceeds every
  // route's count.
  size_t longest = 0;
  for (auto& r : routes_)
    longest = std::max(longest, r.segments.size());
  size_t count = 1;
  for (size_t i = 1; i < path.size() && count <= longest; ++i)
    count += path[i] == '/' ? 1 : 0;
  if (count > longest)
    return found;
  for (size_t index = 0; index < routes_.size(); ++index) {
    auto& r = routes_[index];
    if (r.segments.size() != count)
      continue;
    std::string_view captures[4];
    size_t captured = 0;
    bool ok = true;
    size_t begin = 1;
    for (auto& seg : r.segments) {
      auto end = std::min(path.find('/', begin), path.size());
      auto text = path.substr(begin, end - begin);
      if (seg.placeholder ? text.empty() : text != seg.text) {
        ok = false;
        break;
      }
      if (seg.placeholder && captured < 4)
        captures[captured++] = text;
      begin = end + 1;
    }
    if (!ok)
      continue;
    found.path_known = true;
    if (r.method == method || (method == "HEAD" && r.method == "GET")) {
      found.index = index;
      if (captured > 0)
        found.capture = std::string{captures[0]};
      for (size_t i = 1; i < captured; ++i)
        found.more.emplace_back(captures[i]);
      return found;
    }
  }
  return found;
}

std::vector<std::string> route_table::labels() const {
  std::vector<std::string> out;
  for (auto& r : routes_)
    if (std::find(out.begin(), out.end(), r.pattern) == out.end())
      out.push_back(r.pattern);
  out.push_back(unknown);
  return out;
}

const std::string& route_table::label(std::string_view method, std::string_view path) const {
  auto m = match(method, path);
  return m ? routes_[m.index].pattern : unknown;
}

} // namespace canopy::core
