#include "persistence/msgpack.hpp"

#include <cstring>

namespace canopy::core::msgpack {

using json = nlohmann::json;

namespace {

/// Deeper nesting is refused instead of overflowing the stack.
constexpr int max_depth = 512;

/// The length of the valid UTF-8 sequence at `p`, or 0 when it is invalid.
size_t utf8_sequence(const unsigned char* p, const unsigned char* end) {
  unsigned c = p[0];
  auto cont = [&](ptrdiff_t i) { return (p[i] & 0xc0) == 0x80; };
  if (c < 0x80)
    return 1;
  if (c < 0xc2)
    return 0;
  if (c < 0xe0)
    return end - p >= 2 && cont(1) ? 2 : 0;
  if (c < 0xf0) {
    if (end - p < 3 || !cont(1) || !cont(2))
      return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))
      return 0; // overlong, or a surrogate
    return 3;
  }
  if (c < 0xf5) {
    if (end - p < 4 || !cont(1) || !cont(2) || !cont(3))
      return 0;
    if ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))
      return 0; // overlong, or past U+10FFFF
    return 4;
  }
  return 0;
}

/// True when `s` is plain ASCII (the common case: ids, names, reasons);
/// checks eight bytes at a time.
bool ascii(std::string_view s) {
  auto p = s.data();
  auto n = s.size();
  uint64_t high = 0;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    high |= w;
  }
  for (; n > 0; ++p, --n)
    high |= static_cast<unsigned char>(*p);
  return (high & 0x8080808080808080ull) == 0;
}

} // namespace

bool valid_utf8(std::string_view s) {
  if (ascii(s))
    return true;
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  auto end = p + s.size();
  while (p < end) {
    auto n = utf8_sequence(p, end);
    if (n == 0)
      return false;
    p += n;
  }
  return true;
}

void append_sanitized(std::string& out, std::string_view s) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  auto end = p + s.size();
  while (p < end) {
    auto n = utf8_sequence(p, end);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++p;
      continue;
    }
    out.append(reinterpret_cast<const char*>(p), n);
    p += n;
  }
}

// -- writer ------------------------------------------------------------------------

void writer::put_slow(const char* p, size_t n) {
  flush();
  if (n > capacity) {
    out_.append(p, n);
    return;
  }
  std::memcpy(buf_, p, n);
  n_ = n;
}

void writer::be(uint64_t v, int bytes) {
  char buf[8];
  for (int i = bytes - 1; i >= 0; --i, v >>= 8)
    buf[i] = static_cast<char>(v & 0xff);
  put(buf, static_cast<size_t>(bytes));
}

void writer::map(size_t n) {
  if (n < 16) {
    put(static_cast<char>(0x80 | n));
  } else if (n <= 0xffff) {
    put('\xde');
    be(n, 2);
  } else {
    put('\xdf');
    be(n, 4);
  }
}

void writer::array(size_t n) {
  if (n < 16) {
    put(static_cast<char>(0x90 | n));
  } else if (n <= 0xffff) {
    put('\xdc');
    be(n, 2);
  } else {
    put('\xdd');
    be(n, 4);
  }
}

void writer::uinteger(uint64_t v) {
  if (v < 128) {
    put(static_cast<char>(v));
  } else if (v <= 0xff) {
    put('\xcc');
    be(v, 1);
  } else if (v <= 0xffff) {
    put('\xcd');
    be(v, 2);
  } else if (v <= 0xffffffffu) {
    put('\xce');
    be(v, 4);
  } else {
    put('\xcf');
    be(v, 8);
  }
}

void writer::integer(int64_t v) {
  if (v >= 0) {
    uinteger(static_cast<uint64_t>(v));
  } else if (v >= -32) {
    put(static_cast<char>(static_cast<uint8_t>(v)));
  } else if (v >= INT8_MIN) {
    put('\xd0');
    be(static_cast<uint64_t>(v), 1);
  } else if (v >= INT16_MIN) {
    put('\xd1');
    be(static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN) {
    put('\xd2');
    be(static_cast<uint64_t>(v), 4);
  } else {
    put('\xd3');
    be(static_cast<uint64_t>(v), 8);
  }
}

void writer::real(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put('\xcb');
  be(bits, 8);
}

void writer::str_header(size_t n) {
  if (n < 32) {
    put(static_cast<char>(0xa0 | n));
  } else if (n <= 0xff) {
    put('\xd9');
    be(n, 1);
  } else if (n <= 0xffff) {
    put('\xda');
    be(n, 2);
  } else {
    put('\xdb');
    be(n, 4);
  }
}

void writer::str(std::string_view s) {
  if (valid_utf8(s)) {
    key(s);
    return;
  }
  std::string clean;
  clean.reserve(s.size() + 8);
  append_sanitized(clean, s);
  key(clean);
}

void writer::value(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
    case json::value_t::discarded:
      nil();
      return;
    case json::value_t::boolean:
      boolean(v.get<bool>());
      return;
    case json::value_t::number_integer:
      integer(v.get<int64_t>());
      return;
    case json::value_t::number_unsigned:
      uinteger(v.get<uint64_t>());
      return;
    case json::value_t::number_float:
      real(v.get<double>());
      return;
    case json::value_t::string:
      str(v.get_ref<const std::string&>());
      return;
    case json::value_t::array:
      array(v.size());
      for (auto& x : v)
        value(x);
      return;
    case json::value_t::object:
      map(v.size());
      for (auto& kv : v.items()) {
        str(kv.key());
        value(kv.value());
      }
      return;
    case json::value_t::binary: {
      auto& b = v.get_binary();
      auto n = b.size();
      if (n <= 0xff) {
        put('\xc4');
        be(n, 1);
      } else if (n <= 0xffff) {
        put('\xc5');
        be(n, 2);
      } else {
        put('\xc6');
        be(n, 4);
      }
      put(reinterpret_cast<const char*>(b.data()), n);
      return;
    }
  }
}

// -- reader ------------------------------------------------------------------------

uint8_t reader::byte() {
  if (p_ == end_)
    throw format_error("truncated record");
  return static_cast<uint8_t>(*p_++);
}

uint64_t reader::be(int bytes) {
  auto p = reinterpret_cast<const unsigned char*>(take(static_cast<size_t>(bytes)));
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = (v << 8) | p[i];
  return v;
}

const char* reader::take(size_t n) {
  if (static_cast<size_t>(end_ - p_) < n)
    throw format_error("truncated record");
  auto p = p_;
  p_ += n;
  return p;
}

size_t reader::map() {
  auto t = byte();
  if ((t & 0xf0) == 0x80)
    return t & 0x0f;
  if (t == 0xde)
    return be(2);
  if (t == 0xdf)
    return be(4);
  throw format_error("expected a map");
}

size_t reader::array() {
  auto t = byte();
  if ((t & 0xf0) == 0x90)
    return t & 0x0f;
  if (t == 0xdc)
    return be(2);
  if (t == 0xdd)
    return be(4);
  throw format_error("expected an array");
}

bool reader::nil() {
  if (p_ != end_ && static_cast<uint8_t>(*p_) == 0xc0) {
    ++p_;
    return true;
  }
  return false;
}

bool reader::boolean() {
  auto t = byte();
  if (t == 0xc2 || t == 0xc3)
    return t == 0xc3;
  throw format_error("expected a boolean");
}

int64_t reader::integer() {
  auto t = byte();
  if (t < 0x80)
    return t;
  if (t >= 0xe0)
    return static_cast<int8_t>(t);
  switch (t) {
    case 0xcc: return static_cast<int64_t>(be(1));
    case 0xcd: return static_cast<int64_t>(be(2));
    case 0xce: return static_cast<int64_t>(be(4));
    case 0xcf: {
      auto v = be(8);
      if (v > static_cast<uint64_t>(INT64_MAX))
        throw format_error("integer out of range");
      return static_cast<int64_t>(v);
    }
    case 0xd0: return static_cast<int8_t>(be(1));
    case 0xd1: return static_cast<int16_t>(be(2));
    case 0xd2: return static_cast<int32_t>(be(4));
    case 0xd3: return static_cast<int64_t>(be(8));
    default: throw format_error("expected an integer");
  }
}

uint64_t reader::uinteger() {
  if (p_ != end_ && static_cast<uint8_t>(*p_) == 0xcf) {
    ++p_;
    return be(8);
  }
  auto v = integer();
  if (v < 0)
    throw format_error("expected a non-negative integer");
  return static_cast<uint64_t>(v);
}

double reader::real() {
  if (p_ == end_)
    throw format_error("truncated record");
  auto t = static_cast<uint8_t>(*p_);
  if (t == 0xcb || t == 0xca) {
    ++p_;
    if (t == 0xca) {
      auto bits = static_cast<uint32_t>(be(4));
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    auto bits = be(8);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (t == 0xcf)
    return static_cast<double>(uinteger());
  return static_cast<double>(integer());
}

size_t reader::str_length(uint8_t t) {
  if ((t & 0xe0) == 0xa0)
    return t & 0x1f;
  switch (t) {
    case 0xd9: return be(1);
    case 0xda: return be(2);
    case 0xdb: return be(4);
    default: throw format_error("expected a string");
  }
}

std::string_view reader::raw_str() {
  auto n = str_length(byte());
  return {take(n), n};
}

std::string reader::str() {
  auto s = raw_str();
  if (valid_utf8(s))
    return std::string{s};
  std::string out;
  out.reserve(s.size() + 8);
  append_sanitized(out, s);
  return out;
}

json reader::value() {
  if (p_ == end_)
    throw format_error("truncated record");
  auto t = static_cast<uint8_t>(*p_);
  if (t < 0x80 || t == 0xcc || t == 0xcd || t == 0xce || t == 0xcf)
    return uinteger();
  if (t >= 0xe0 || (t >= 0xd0 && t <= 0xd3))
    return integer();
  if ((t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb))
    return str();
  if (t == 0xca || t == 0xcb)
    return real();
  if (t == 0xc0 || t == 0xc2 || t == 0xc3) {
    ++p_;
    return t == 0xc0 ? json() : json(t == 0xc3);
  }
  if (++depth_ > max_depth)
    throw format_error("nesting too deep");
  json out;
  if ((t & 0xf0) == 0x90 || t == 0xdc || t == 0xdd) {
    auto n = array();
    out = json::array();
    auto& a = *out.get_ptr<json::array_t*>();
    a.reserve(std::min<size_t>(n, static_cast<size_t>(end_ - p_)));
    for (size_t i = 0; i < n; ++i)
      a.push_back(value());
  } else if ((t & 0xf0) == 0x80 || t == 0xde || t == 0xdf) {
    auto n = map();
    out = json::object();
    auto& o = *out.get_ptr<json::object_t*>();
    for (size_t i = 0; i < n; ++i) {
      auto k = str();
      auto v = value();
      o.insert_or_assign(std::move(k), std::move(v));
    }
  } else if (t == 0xc4 || t == 0xc5 || t == 0xc6) {
    ++p_;
    auto n = be(t == 0xc4 ? 1 : t == 0xc5 ? 2 : 4);
    auto b = reinterpret_cast<const uint8_t*>(take(n));
    out = json::binary(std::vector<uint8_t>(b, b + n));
  } else {
    throw format_error("unsupported MessagePack type");
  }
  --depth_;
  return out;
}

void reader::skip() {
  if (p_ == end_)
    throw format_error("truncated record");
  auto t = static_cast<uint8_t>(*p_);
  if ((t & 0xf0) == 0x90 || t == 0xdc || t == 0xdd) {
    if (++depth_ > max_depth)
      throw format_error("nesting too deep");
    for (auto n = array(); n > 0; --n)
      skip();
    --depth_;
    return;
  }
  if ((t & 0xf0) == 0x80 || t == 0xde || t == 0xdf) {
    if (++depth_ > max_depth)
      throw format_error("nesting too deep");
    for (auto n = map(); n > 0; --n) {
      skip();
      skip();
    }
    --depth_;
    return;
  }
  ++p_;
  if (t < 0x80 || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
    return;
  if ((t & 0xe0) == 0xa0) {
    take(t & 0x1f);
    return;
  }
  switch (t) {
    case 0xcc: case 0xd0: take(1); return;
    case 0xcd: case 0xd1: take(2); return;
    case 0xce: case 0xd2: case 0xca: take(4); return;
    case 0xcf: case 0xd3: case 0xcb: take(8); return;
    case 0xd9: case 0xc4: take(be(1)); return;
    case 0xda: case 0xc5: take(be(2)); return;
    case 0xdb: case 0xc6: take(be(4)); return;
    case 0xd4: take(2); return;  // fixext 1
    case 0xd5: take(3); return;
    case 0xd6: take(5); return;
    case 0xd7: take(9); return;
    case 0xd8: take(17); return;
    case 0xc7: { auto n = be(1); take(n + 1); return; }
    case 0xc8: { auto n = be(2); take(n + 1); return; }
    case 0xc9: { auto n = be(4); take(n + 1); return; }
    default: throw format_error("unsupported MessagePack type");
  }
}

} // namespace canopy::core::msgpack
