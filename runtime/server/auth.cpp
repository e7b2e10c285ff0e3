#include "runtime/server/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <stdexcept>

namespace canopy::core {

// -- construction --------------------------------------------------------------

token_table::token_table(const std::map<std::string, std::string>& users) {
  for (auto& [user, token] : users)
    entries_.push_back(entry{sha256(token), user});
}

// -- lookup --------------------------------------------------------------------

std::optional<std::string> token_table::find(const std::string& token) const {
  auto presented = sha256(token);
  const entry* match = nullptr;
  for (auto& e : entries_) {
    // No early exit: every digest is compared in full, every user in turn.
    if (CRYPTO_memcmp(presented.data(), e.hash.data(), presented.size()) == 0)
      match = &e;
  }
  if (match == nullptr || token.empty())
    return std::nullopt;
  return match->user;
}

token_table::digest token_table::sha256(const std::string& text) {
  digest out{};
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), out.data(), &len, EVP_sha256(), nullptr) != 1
      || len != out.size())
    throw std::runtime_error("SHA-256 failed"); // OpenSSL out of memory
  return out;
}

} // namespace canopy::core
