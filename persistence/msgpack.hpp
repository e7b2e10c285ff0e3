#pragma once

// MessagePack writing and reading for the store's binary records: scalars,
// maps and arrays written directly, and any JSON value (inputs, outputs,
// results, event data) embedded as plain MessagePack. Strings are valid
// UTF-8 on both sides: invalid sequences become U+FFFD when written and
// again when read, so every decoded `json` dumps without throwing.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace canopy::msgpack {

/// Thrown by `reader` on malformed or truncated input (a parsing seam: the
/// record decoders turn it into `persistence_errc::corrupt_record`).
struct format_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// True when `s` is valid UTF-8 (no overlongs, surrogates or code points
/// past U+10FFFF).
bool valid_utf8(std::string_view s);

/// Appends `s` to `out` with every invalid UTF-8 byte replaced by U+FFFD.
void append_sanitized(std::string& out, std::string_view s);

/// Appends MessagePack to a string. Integers take their smallest form;
/// floating-point numbers are always float64.
class writer {
public:
  explicit writer(std::string& out) : out_(out) {}

  void map(size_t n);
  void array(size_t n);
  void nil() { out_ += '\xc0'; }
  void boolean(bool v) { out_ += v ? '\xc3' : '\xc2'; }
  void integer(int64_t v);
  void uinteger(uint64_t v);
  void real(double v);
  /// A string; invalid UTF-8 is replaced.
  void str(std::string_view s);
  /// A key known to be short ASCII (no check).
  void key(std::string_view k);
  /// Any JSON value, strings sanitised.
  void value(const nlohmann::json& v);

private:
  void str_header(size_t n);
  void be(uint64_t v, int bytes);

  std::string& out_;
};

/// Reads MessagePack from a buffer it does not own. Every method throws
/// `format_error` when the next item is not of the kind asked for or the
/// buffer ends early.
class reader {
public:
  reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  explicit reader(std::string_view s) : reader(s.data(), s.size()) {}

  bool at_end() const { return p_ == end_; }

  /// The number of pairs of the map that follows.
  size_t map();
  /// The number of items of the array that follows.
  size_t array();
  /// Consumes a nil if one is next. @returns whether it did.
  bool nil();
  bool boolean();
  /// Any integer that fits an int64_t.
  int64_t integer();
  /// Any non-negative integer.
  uint64_t uinteger();
  /// Any number (integer or float) as a double.
  double real();
  /// A string as it is stored (keys: compare without copying).
  std::string_view raw_str();
  /// A string, invalid UTF-8 replaced.
  std::string str();
  /// Any value as JSON (strings sanitised; binary as a JSON binary).
  nlohmann::json value();
  /// Skips one value of any kind.
  void skip();

private:
  uint8_t byte();
  uint64_t be(int bytes);
  const char* take(size_t n);
  size_t str_length(uint8_t tag);

  const char* p_;
  const char* end_;
  int depth_ = 0;
};

} // namespace canopy::msgpack
