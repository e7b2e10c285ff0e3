#include "persistence/json_text.hpp"

#include <cstdio>
#include <unordered_set>
#include <vector>

#include "persistence/error.hpp"

namespace canopy::core {

using json = nlohmann::json;

namespace {

// -- positions -----------------------------------------------------------------

/// Renders a byte offset as `byte N (line L, column C)`.
std::string position_of(std::string_view text, size_t offset) {
  size_t line = 1;
  size_t column = 1;
  auto end = std::min(offset, text.size());
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "byte " + std::to_string(offset) + " (line " + std::to_string(line) + ", column "
         + std::to_string(column) + ")";
}

/// Returns the offset of the bracket that opens nesting level `level + 1`.
size_t offset_of_nesting(std::string_view text, int level) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > level)
        return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

/// Escapes `~` and `/` for a JSON pointer component.
std::string pointer_component(const std::string& key) {
  std::string out;
  for (auto c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// -- the checker -----------------------------------------------------------------

/// A SAX consumer that builds nothing: it checks syntax, the nesting limit
/// and that no object repeats a key, keeping the keys of the open objects
/// and the position in each open container for the error's JSON path.
class json_checker : public nlohmann::json_sax<json> {
public:
  bool null() override {
    return value();
  }

  bool boolean(bool) override {
    return value();
  }

  bool number_integer(number_integer_t) override {
    return value();
  }

  bool number_unsigned(number_unsigned_t) override {
    return value();
  }

  bool number_float(number_float_t, const string_t&) override {
    return value();
  }

  bool string(string_t&) override {
    return value();
  }

  bool binary(binary_t&) override {
    return value();
  }

  bool start_object(std::size_t) override {
    return value() && enter(true);
  }

  bool key(string_t& k) override {
    auto& top = open_.back();
    if (!top.keys.insert(k).second) {
      duplicate_ = "malformed JSON at " + path() + "/" + sanitize_utf8(pointer_component(k))
                   + ": duplicate key '" + sanitize_utf8(k)
                   + "' (an object holds each key once)";
      return false;
    }
    top.key = k;
    return true;
  }

  bool end_object() override {
    open_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    return value() && enter(false);
  }

  bool end_array() override {
    open_.pop_back();
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception& ex) override {
    position_ = position;
    // Strip "[json.exception.parse_error.101] parse error at line 1, column 2: ".
    std::string what = ex.what();
    if (auto bracket = what.find("] "); bracket != std::string::npos)
      what.erase(0, bracket + 2);
    if (auto colon = what.find(": "); what.rfind("parse error", 0) == 0
                                      && colon != std::string::npos)
      what.erase(0, colon + 2);
    detail_ = sanitize_utf8(what);
    return false;
  }

  /// Renders the failure, given the text.
  std::string message(std::string_view text) const {
    if (!duplicate_.empty())
      return duplicate_;
    if (too_deep_)
      return "malformed JSON at " + position_of(text, offset_of_nesting(text, max_json_nesting))
             + ": nesting deeper than " + std::to_string(max_json_nesting) + " levels";
    // nlohmann counts positions from 1 (the character read last).
    auto offset = position_ > 0 ? position_ - 1 : 0;
    return "malformed JSON at " + position_of(text, offset) + ": " + detail_;
  }

private:
  struct container {
    bool object;
    std::unordered_set<std::string> keys; ///< objects: the keys seen so far
    std::string key;                      ///< objects: the key of the current value
    size_t count = 0;                     ///< arrays: values started so far
  };

  /// Counts a value started inside an array.
  bool value() {
    if (!open_.empty() && !open_.back().object)
      ++open_.back().count;
    return true;
  }

  bool enter(bool object) {
    if (static_cast<int>(open_.size()) >= max_json_nesting) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(container{object, {}, {}, 0});
    return true;
  }

  /// The JSON pointer of the innermost open container.
  std::string path() const {
    std::string out;
    for (size_t i = 0; i + 1 < open_.size(); ++i) {
      auto& c = open_[i];
      out += "/" + (c.object ? pointer_component(c.key) : std::to_string(c.count - 1));
    }
    return sanitize_utf8(out);
  }

  std::vector<container> open_;
  bool too_deep_ = false;
  std::string duplicate_;
  size_t position_ = 0;
  std::string detail_ = "syntax error";
};

caf::error malformed(std::string message) {
  return make_error(persistence_errc::invalid_graph, std::move(message));
}

/// A SAX consumer that builds the document in one pass and stops at the
/// first fault: bad syntax, nesting over the limit, or a key its object
/// already holds (found by the map insertion itself, at no extra cost).
/// `json_checker` explains a fault afterwards.
class strict_builder : public nlohmann::json_sax<json> {
public:
  bool null() override {
    return put(json(nullptr));
  }

  bool boolean(bool x) override {
    return put(json(x));
  }

  bool number_integer(number_integer_t x) override {
    return put(json(x));
  }

  bool number_unsigned(number_unsigned_t x) override {
    return put(json(x));
  }

  bool number_float(number_float_t x, const string_t&) override {
    return put(json(x));
  }

  bool string(string_t& x) override {
    return put(json(std::move(x)));
  }

  bool binary(binary_t& x) override {
    return put(json::binary(std::move(x)));
  }

  bool start_object(std::size_t) override {
    return open(json::object());
  }

  bool key(string_t& k) override {
    auto& members = open_.back()->get_ref<json::object_t&>();
    auto [it, fresh] = members.emplace(std::move(k), nullptr);
    slot_ = &it->second;
    return fresh;
  }

  bool end_object() override {
    open_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    return open(json::array());
  }

  bool end_array() override {
    open_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    return false;
  }

  json& result() {
    return root_;
  }

private:
  /// Places a value where the parse is: the root, an array's end, or the
  /// member of the last key. @returns where it went.
  json* place(json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    auto& top = *open_.back();
    if (top.is_array()) {
      top.get_ref<json::array_t&>().push_back(std::move(v));
      return &top.get_ref<json::array_t&>().back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  bool put(json&& v) {
    place(std::move(v));
    return true;
  }

  bool open(json&& container) {
    if (static_cast<int>(open_.size()) >= max_json_nesting)
      return false;
    open_.push_back(place(std::move(container)));
    return true;
  }

  json root_;
  std::vector<json*> open_;
  json* slot_ = nullptr;
};

} // namespace

// -- parsing -------------------------------------------------------------------

caf::expected<json> parse_json_text(std::string_view text) {
  try {
    // nlohmann's lexer takes a NUL byte for the end of the input: refuse it
    // first, or whatever follows one would be ignored.
    if (auto nul = text.find('\0'); nul != std::string_view::npos)
      return malformed("malformed JSON at " + position_of(text, nul)
                       + ": a NUL byte (JSON text may hold none, not even after the value)");
    auto first = text.data();
    auto last = text.data() + text.size();
    strict_builder builder;
    if (json::sax_parse(first, last, &builder, json::input_format_t::json, true, false))
      return std::move(builder.result());
    // Find what is wrong and where, in a second pass.
    json_checker checker;
    if (!json::sax_parse(first, last, &checker, json::input_format_t::json, true, false))
      return malformed(checker.message(text));
    return malformed("malformed JSON");
  } catch (const std::exception& ex) {
    return malformed(std::string{"malformed JSON: "} + sanitize_utf8(ex.what()));
  }
}

// -- messages ------------------------------------------------------------------

std::string sanitize_utf8(std::string_view text) {
  std::string result;
  size_t i = 0;
  auto n = text.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t len = 0;
    if (c < 0x80)
      len = 1;
    else if ((c & 0xE0) == 0xC0 && c >= 0xC2)
      len = 2;
    else if ((c & 0xF0) == 0xE0)
      len = 3;
    else if ((c & 0xF8) == 0xF0 && c <= 0xF4)
      len = 4;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok && len == 3) {
      auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    } else if (ok && len == 4) {
      auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      result.append(text.substr(i, len));
      i += len;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", static_cast<unsigned>(c));
      result += buf;
      ++i;
    }
  }
  return result;
}

std::string got(const nlohmann::json& v) {
  if (v.is_number() || v.is_boolean())
    return "got " + v.dump();
  return std::string{"got "} + v.type_name();
}

} // namespace canopy::core
