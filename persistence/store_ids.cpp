// Execution ids: time-ordered, 26 characters (`make_execution_id`), and the
// time read back from one (`execution_id_ms`).

#include "persistence/store.hpp"

#include <mutex>
#include <random>

#include "persistence/duration.hpp"

namespace canopy::core {

std::string make_execution_id() {
  static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
  static std::mutex mtx;
  static std::mt19937_64 rng{std::random_device{}()};
  static uint64_t last_ms = 0;
  static uint64_t last_lo = 0, last_hi = 0;
  std::lock_guard<std::mutex> guard{mtx};
  auto ms = static_cast<uint64_t>(now_ms());
  uint64_t hi, lo; // 80 random bits: 16 in hi, 64 in lo
  if (ms <= last_ms) {
    // Same millisecond: increment the previous randomness to stay ordered.
    ms = last_ms;
    lo = last_lo + 1;
    hi = last_hi + (lo == 0 ? 1 : 0);
  } else {
    lo = rng();
    hi = rng() & 0x7fff; // leave headroom for increments
  }
  last_ms = ms;
  last_lo = lo;
  last_hi = hi;
  std::string out(26, '0');
  // 48-bit time → 10 chars; 80 random bits → 16 chars.
  for (int i = 9; i >= 0; --i) {
    out[static_cast<size_t>(i)] = alphabet[ms & 31];
    ms >>= 5;
  }
  for (int i = 25; i >= 10; --i) {
    out[static_cast<size_t>(i)] = alphabet[lo & 31];
    lo = (lo >> 5) | ((hi & 31) << 59);
    hi >>= 5;
  }
  return out;
}

int64_t execution_id_ms(std::string_view id) {
  static const std::string_view alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
  if (id.size() != 26)
    return -1;
  int64_t ms = 0;
  for (size_t i = 0; i < 10; ++i) {
    auto d = alphabet.find(id[i]);
    if (d == std::string_view::npos)
      return -1;
    ms = ms * 32 + static_cast<int64_t>(d);
  }
  return ms;
}

} // namespace canopy::core
