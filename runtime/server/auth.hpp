#pragma once

// Bearer-token lookup for the HTTP API (a 401 says nothing about
// which users exist). Tokens are kept as SHA-256 digests; a lookup hashes
// the presented token once and compares it with every user's digest in
// constant time, all users every time, so the work done does not depend on
// which stored token (if any) the presented one resembles.

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace canopy::core {

/// User name → bearer token, looked up in constant time. Immutable after
/// construction: `find` may be called from any thread.
class token_table {
public:
  token_table() = default;

  /// `users`: user name → token (tokens are unique: runtime/node/config.hpp).
  explicit token_table(const std::map<std::string, std::string>& users);

  /// The user whose token is `token`, or nothing (also for an empty token).
  /// Its running time depends on the length of `token` and the number of
  /// users only.
  std::optional<std::string> find(const std::string& token) const;

  /// The number of users.
  size_t size() const { return entries_.size(); }

private:
  using digest = std::array<unsigned char, 32>;

  static digest sha256(const std::string& text);

  struct entry {
    digest hash;
    std::string user;
  };

  std::vector<entry> entries_;
};

} // namespace canopy::core
