#include "runtime/server/assets.hpp"

#include <cctype>
#include <fstream>
#include <sstream>

namespace canopy::core {

const asset* find_asset(std::string_view path) {
  for (size_t i = 0; i < embedded_asset_count; ++i)
    if (path == embedded_assets[i].path)
      return &embedded_assets[i];
  return nullptr;
}

std::string_view content_type_of(std::string_view name) {
  auto dot = name.rfind('.');
  auto ext = dot == std::string_view::npos ? std::string_view{} : name.substr(dot);
  if (ext == ".html")
    return "text/html; charset=utf-8";
  if (ext == ".js")
    return "text/javascript; charset=utf-8";
  if (ext == ".css")
    return "text/css; charset=utf-8";
  if (ext == ".json")
    return "application/json";
  if (ext == ".svg")
    return "image/svg+xml";
  return {};
}

std::optional<std::string> read_web_file(const std::string& dir, std::string_view name) {
  if (name.empty() || name.front() == '.' || content_type_of(name).empty())
    return std::nullopt;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return std::nullopt;
  std::ifstream in{dir + "/" + std::string{name}, std::ios::binary};
  if (!in)
    return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

} // namespace canopy::core
