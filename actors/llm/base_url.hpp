#pragma once

// A provider's `base_url` split for an HTTP client. Header-only: the config
// parser checks URLs with it without linking the client.

#include <string>

namespace canopy::core {

/// Splits `base_url` into the scheme-host-port part and the path prefix
/// (`http://h:8080/v1` → `http://h:8080`, `/v1`). @returns false when it is
/// not an `http://` or `https://` URL with a host.
inline bool split_base_url(const std::string& base_url, std::string& origin,
                           std::string& prefix) {
  auto scheme = base_url.find("://");
  if (scheme == std::string::npos)
    return false;
  auto name = base_url.substr(0, scheme);
  if (name != "http" && name != "https")
    return false;
  auto path = base_url.find('/', scheme + 3);
  origin = base_url.substr(0, path);
  prefix = path == std::string::npos ? std::string{} : base_url.substr(path);
  while (!prefix.empty() && prefix.back() == '/')
    prefix.pop_back();
  return origin.size() > scheme + 3;
}

} // namespace canopy::core
