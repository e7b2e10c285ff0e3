#pragma once

// MessagePack writing and reading for the store's binary records: scalars,
// maps and arrays written directly, and any JSON value (inputs, outputs,
// results, event data) embedded as plain MessagePack. Strings are valid
// UTF-8 on both sides: invalid sequences become U+FFFD when written and
// again when read, so every decoded `json` dumps without throwing.

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace canopy::core::msgpack {

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
///
/// Bytes gather in a small buffer of the writer's own and reach `out` in
/// pieces (one `append` per ~128 bytes instead of one per item): `out` is
/// complete only after `flush()` (the destructor flushes too). Threading:
/// one writer, one thread.
class writer {
public:
  explicit writer(std::string& out) : out_(out) {}
  ~writer() { flush(); }
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;

  void map(size_t n);
  void array(size_t n);
  void nil() { put('\xc0'); }
  void boolean(bool v) { put(v ? '\xc3' : '\xc2'); }
  void integer(int64_t v);
  void uinteger(uint64_t v);
  void real(double v);
  /// A string; invalid UTF-8 is replaced.
  void str(std::string_view s);
  /// A key known to be short ASCII (no check).
  void key(std::string_view k) {
    if (k.size() < 32 && k.size() < capacity - n_) { // the common case, inline
      buf_[n_++] = static_cast<char>(0xa0 | k.size());
      std::memcpy(buf_ + n_, k.data(), k.size());
      n_ += k.size();
      return;
    }
    str_header(k.size());
    put(k.data(), k.size());
  }
  /// Any JSON value, strings sanitised.
  void value(const nlohmann::json& v);
  /// Appends what is buffered to `out`.
  void flush() {
    if (n_ != 0)
      out_.append(buf_, n_);
    n_ = 0;
  }

private:
  static constexpr size_t capacity = 128;

  void put(char c) {
    if (n_ == capacity)
      flush();
    buf_[n_++] = c;
  }
  void put(const char* p, size_t n) {
    if (n <= capacity - n_) {
      std::memcpy(buf_ + n_, p, n);
      n_ += n;
      return;
    }
    put_slow(p, n);
  }
  void put_slow(const char* p, size_t n);
  void str_header(size_t n);
  void be(uint64_t v, int bytes);

  std::string& out_;
  size_t n_ = 0;
  char buf_[capacity];
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

} // namespace canopy::core::msgpack
