#include "persistence/value_schema.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string_view>

#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"

namespace canopy::core {

namespace {

// -- names ----------------------------------------------------------------------

const std::vector<std::string>& keywords() {
  static const std::vector<std::string> names{
    "type",      "enum",      "const",     "properties",       "required",
    "additionalProperties",   "items",     "minItems",         "maxItems",
    "minimum",   "maximum",   "exclusiveMinimum",              "exclusiveMaximum",
    "minLength", "maxLength", "title",     "description",      "default"};
  return names;
}

const std::vector<std::string>& type_names() {
  static const std::vector<std::string> names{"null",   "boolean", "integer", "number",
                                              "string", "array",   "object"};
  return names;
}

// -- rendering --------------------------------------------------------------------

/// Longest text of a value or name quoted in a message, in bytes.
constexpr size_t max_quoted = 200;

/// The first `max_quoted` bytes of `s` (cut at a code point), valid UTF-8,
/// with `...` when cut.
std::string excerpt(std::string_view s) {
  if (s.size() <= max_quoted)
    return sanitize_utf8(s);
  size_t n = max_quoted;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
    --n;
  return sanitize_utf8(s.substr(0, n)) + "...";
}

/// `v` as compact JSON text, cut short after `max_quoted` bytes.
std::string render(const json& v) {
  return excerpt(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

/// `s` as a JSON string, cut short after `max_quoted` bytes.
std::string quote(std::string_view s) {
  return json(excerpt(s)).dump();
}

/// A number as text; a float without fraction as an integer (`2000`, not `2000.0`).
std::string number_text(const json& v) {
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15)
      return std::to_string(static_cast<int64_t>(d));
  }
  return v.dump();
}

// -- values -----------------------------------------------------------------------

bool is_finite_number(const json& v) {
  return v.is_number() && (!v.is_number_float() || std::isfinite(v.get<double>()));
}

/// A number without a fractional part (`3`, `3.0`).
bool is_integer(const json& v) {
  double d = v.is_number_float() ? v.get<double>() : 0.5;
  return v.is_number_integer() || (std::isfinite(d) && std::floor(d) == d);
}

/// Exact for every int64, uint64 and double on x86-64 (64-bit mantissa).
long double number_of(const json& v) {
  return v.is_number_unsigned()  ? static_cast<long double>(v.get<uint64_t>())
         : v.is_number_integer() ? static_cast<long double>(v.get<int64_t>())
                                 : static_cast<long double>(v.get<double>());
}

bool is_count(const json& v) {
  return is_integer(v) && number_of(v) >= 0;
}

/// The number of code points of valid UTF-8 (the bytes that do not continue one).
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

bool has_type(const json& v, const std::string& type) {
  return type == "null"      ? v.is_null()
         : type == "boolean" ? v.is_boolean()
         : type == "integer" ? is_integer(v)
         : type == "number"  ? v.is_number()
         : type == "string"  ? v.is_string()
         : type == "array"   ? v.is_array()
         : type == "object"  && v.is_object();
}

/// A type name with its article: `a boolean`, `an object`, `null`.
std::string a_type(const std::string& type) {
  if (type == "null")
    return "null";
  bool vowel = type == "integer" || type == "array" || type == "object";
  return (vowel ? "an " : "a ") + type;
}

/// What `v` is, with its article: `an integer` for `2.0`, `a number` for `2.5`.
std::string type_of(const json& v) {
  for (auto& type : type_names())
    if (has_type(v, type))
      return a_type(type);
  return std::string{"a "} + v.type_name();
}

// -- checking a schema ------------------------------------------------------------

/// Bytes of `s` as a JSON string (quotes and escapes included).
size_t text_size(const std::string& s) {
  size_t n = 2;
  for (unsigned char c : s)
    n += c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t'
           ? 2
           : c < 0x20 ? 6 : 1;
  return n;
}

/// The error of a document over `max_schema_bytes` or nested deeper than
/// `max_json_nesting`, or "". Iterative: any depth is safe.
std::string extent_error(const json& schema) {
  struct frame {
    const json* v;
    int depth;
  };
  std::vector<frame> stack{{&schema, 1}};
  size_t bytes = 0;
  auto too_big = [&] {
    return "the schema is over " + std::to_string(max_schema_bytes) + " bytes as compact JSON";
  };
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (v->is_structured() && depth > max_json_nesting)
      return "the schema is nested deeper than " + std::to_string(max_json_nesting)
             + " levels as JSON";
    if (v->is_object()) {
      bytes += 1 + std::max<size_t>(2 * v->size(), 1); // braces, colons, commas
      for (auto& [key, member] : v->items()) {
        bytes += text_size(key);
        if (bytes > max_schema_bytes)
          return too_big();
        stack.push_back({&member, depth + 1});
      }
    } else if (v->is_array()) {
      bytes += 1 + std::max<size_t>(v->size(), 1);
      for (auto& element : *v)
        stack.push_back({&element, depth + 1});
    } else if (v->is_string()) {
      bytes += text_size(v->get_ref<const std::string&>());
    } else if (v->is_number() || v->is_boolean() || v->is_null()) {
      bytes += v->dump().size();
    }
    if (bytes > max_schema_bytes)
      return too_big();
  }
  return {};
}

/// Errors up to `max_schema_errors`, and whether more were found.
struct error_list {
  std::vector<schema_error> errors;
  bool truncated = false;

  void add(const std::string& path, std::string message) {
    if (errors.size() < max_schema_errors)
      errors.push_back({path, std::move(message)});
    else
      truncated = true;
  }

  /// The errors, with a last one saying that there were more when there were.
  std::vector<schema_error> finish() {
    if (truncated)
      errors.push_back({"", "more than " + std::to_string(max_schema_errors)
                              + " errors; only the first " + std::to_string(max_schema_errors)
                              + " are listed"});
    return std::move(errors);
  }
};

struct schema_checker : error_list {
  size_t subschemas = 0;

  void check(const json& s, const std::string& path, int depth) {
    if (truncated)
      return;
    if (!s.is_object())
      return add(path, "a schema must be an object, " + got(s));
    if (depth > max_schema_depth)
      return add(path, "schemas are nested deeper than " + std::to_string(max_schema_depth)
                         + " levels");
    if (++subschemas == max_subschemas + 1)
      add("", "the schema has more than " + std::to_string(max_subschemas) + " subschemas");
    if (subschemas > max_subschemas)
      return;
    for (auto& [key, v] : s.items())
      check_keyword(key, v, path + "/" + escape_pointer(key), depth);
  }

  void check_keyword(const std::string& key, const json& v, const std::string& at, int depth) {
    if (key == "type")
      check_type(v, at);
    else if (key == "enum") {
      if (!v.is_array())
        add(at, "enum must be an array of values, " + got(v));
      else if (v.empty())
        add(at, "enum must list at least one value");
    } else if (key == "const" || key == "default") {
      // Any JSON value.
    } else if (key == "title" || key == "description") {
      if (!v.is_string())
        add(at, key + " must be a string, " + got(v));
    } else if (key == "properties") {
      if (!v.is_object())
        return add(at, "properties must be an object of schemas, " + got(v));
      for (auto& [name, sub] : v.items())
        check(sub, at + "/" + escape_pointer(name), depth + 1);
    } else if (key == "required")
      check_required(v, at);
    else if (key == "additionalProperties") {
      if (!v.is_boolean())
        check(v, at, depth + 1);
    } else if (key == "items") {
      if (v.is_array())
        add(at, "items must be one schema (an object) for every element; "
                "the array form is not part of the schema subset");
      else
        check(v, at, depth + 1);
    } else if (key == "minItems" || key == "maxItems" || key == "minLength"
               || key == "maxLength") {
      if (!is_count(v))
        add(at, key + " must be a non-negative integer, " + got(v));
    } else if (key == "minimum" || key == "maximum") {
      if (!is_finite_number(v))
        add(at, key + " must be a number, " + got(v));
    } else if (key == "exclusiveMinimum" || key == "exclusiveMaximum") {
      if (!is_finite_number(v))
        add(at, key + " must be a number (draft 2020-12: not a boolean), " + got(v));
    } else if (key == "pattern")
      add(at, "'pattern' is not supported: regular expressions are not part of the schema "
              "subset");
    else
      add(at, "unknown keyword '" + excerpt(key) + "'" + did_you_mean(key, keywords()));
  }

  void check_type(const json& v, const std::string& at) {
    if (v.is_string())
      return check_type_name(v.get_ref<const std::string&>(), at);
    if (!v.is_array())
      return add(at, "type must be a type name or an array of them, " + got(v));
    if (v.empty())
      return add(at, "type must list at least one type");
    std::set<std::string> seen;
    for (size_t i = 0; i < v.size(); ++i) {
      auto element_at = at + "/" + std::to_string(i);
      if (!v[i].is_string()) {
        add(element_at, "a type must be a string, " + got(v[i]));
        continue;
      }
      auto& name = v[i].get_ref<const std::string&>();
      if (!seen.insert(name).second)
        add(element_at, "type must list each type once: " + quote(name) + " is there twice");
      else
        check_type_name(name, element_at);
    }
  }

  void check_type_name(const std::string& name, const std::string& at) {
    auto& names = type_names();
    if (std::find(names.begin(), names.end(), name) != names.end())
      return;
    auto hint = did_you_mean(name, names);
    add(at, "unknown type '" + excerpt(name) + "'"
              + (hint.empty() ? " (null, boolean, integer, number, string, array or object)"
                              : hint));
  }

  void check_required(const json& v, const std::string& at) {
    if (!v.is_array())
      return add(at, "required must be an array of property names, " + got(v));
    std::set<std::string> seen;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string())
        add(at + "/" + std::to_string(i), "a required property name must be a string, "
                                              + got(v[i]));
      else if (!seen.insert(v[i].get<std::string>()).second)
        add(at + "/" + std::to_string(i), "required must list each name once: "
                                              + quote(v[i].get_ref<const std::string&>())
                                              + " is there twice");
    }
  }
};

// -- validating a value -----------------------------------------------------------

struct value_checker : error_list {
  /// The keyword `name` of `s` when it is a number, else nullptr.
  static const json* number_keyword(const json& s, const char* name) {
    auto it = s.find(name);
    return it != s.end() && is_finite_number(*it) ? &*it : nullptr;
  }

  void validate(const json& s, const json& v, const std::string& path, int depth) {
    if (truncated || !s.is_object() || depth > max_schema_depth)
      return;
    check_type(s, v, path);
    if (auto it = s.find("enum"); it != s.end() && it->is_array()) {
      if (std::find(it->begin(), it->end(), v) == it->end())
        add(path, "must be one of " + render(*it));
    }
    if (auto it = s.find("const"); it != s.end() && *it != v)
      add(path, "must equal " + render(*it));
    if (v.is_string())
      check_length(s, code_points(v.get_ref<const std::string&>()), "length", "Length", path);
    else if (v.is_number())
      check_range(s, v, path);
    else if (v.is_array())
      check_array(s, v, path, depth);
    else if (v.is_object())
      check_object(s, v, path, depth);
  }

  void check_type(const json& s, const json& v, const std::string& path) {
    auto it = s.find("type");
    if (it == s.end())
      return;
    std::vector<std::string> types;
    if (it->is_string())
      types.push_back(it->get<std::string>());
    else if (it->is_array())
      for (auto& t : *it)
        if (t.is_string())
          types.push_back(t.get<std::string>());
    std::string expected;
    for (size_t i = 0; i < types.size(); ++i) {
      if (has_type(v, types[i]))
        return;
      expected += (i == 0 ? "" : i + 1 == types.size() ? " or " : ", ") + a_type(types[i]);
    }
    if (!types.empty())
      add(path, "expected " + expected + ", got " + type_of(v));
  }

  /// minLength/maxLength (`what` "length") or minItems/maxItems ("item count").
  void check_length(const json& s, size_t n, const char* what, const char* suffix,
                    const std::string& path) {
    auto count = static_cast<long double>(n);
    auto min_key = std::string{"min"} + suffix, max_key = std::string{"max"} + suffix;
    if (auto it = s.find(min_key); it != s.end() && is_count(*it) && count < number_of(*it))
      add(path, std::string{what} + " " + std::to_string(n) + " is under " + min_key + " "
                  + number_text(*it));
    if (auto it = s.find(max_key); it != s.end() && is_count(*it) && count > number_of(*it))
      add(path, std::string{what} + " " + std::to_string(n) + " is over " + max_key + " "
                  + number_text(*it));
  }

  void check_range(const json& s, const json& v, const std::string& path) {
    auto x = number_of(v);
    auto text = number_text(v);
    if (auto m = number_keyword(s, "minimum"); m && x < number_of(*m))
      add(path, text + " is under minimum " + number_text(*m));
    if (auto m = number_keyword(s, "maximum"); m && x > number_of(*m))
      add(path, text + " is over maximum " + number_text(*m));
    if (auto m = number_keyword(s, "exclusiveMinimum"); m && x <= number_of(*m))
      add(path, text + " is not over exclusiveMinimum " + number_text(*m));
    if (auto m = number_keyword(s, "exclusiveMaximum"); m && x >= number_of(*m))
      add(path, text + " is not under exclusiveMaximum " + number_text(*m));
  }

  void check_array(const json& s, const json& v, const std::string& path, int depth) {
    check_length(s, v.size(), "item count", "Items", path);
    auto items = s.find("items");
    if (items == s.end())
      return;
    for (size_t i = 0; i < v.size() && !truncated; ++i)
      validate(*items, v[i], path + "/" + std::to_string(i), depth + 1);
  }

  void check_object(const json& s, const json& v, const std::string& path, int depth) {
    if (auto req = s.find("required"); req != s.end() && req->is_array())
      for (auto& name : *req)
        if (name.is_string() && !v.contains(name.get_ref<const std::string&>()))
          add(path, "missing required property " + quote(name.get_ref<const std::string&>()));
    auto props = s.find("properties");
    bool has_props = props != s.end() && props->is_object();
    auto extra = s.find("additionalProperties");
    bool closed = extra != s.end() && extra->is_boolean() && !extra->get<bool>();
    const json* others = extra != s.end() && extra->is_object() ? &*extra : nullptr;
    if (!has_props && !closed && !others)
      return;
    for (auto& [key, member] : v.items()) {
      if (truncated)
        return;
      const json* sub = others;
      if (has_props) {
        if (auto it = props->find(key); it != props->end())
          sub = &*it;
      }
      if (sub)
        validate(*sub, member, path + "/" + escape_pointer(key), depth + 1);
      else if (closed)
        add(path + "/" + escape_pointer(key),
            quote(key) + " is not allowed (additionalProperties is false)");
    }
  }
};

} // namespace

// -- public functions ---------------------------------------------------------------

std::string to_string(const schema_error& e) {
  if (e.path.empty())
    return e.message;
  return e.path + ": " + e.message;
}

std::vector<schema_error> check_schema(const json& schema) {
  if (auto extent = extent_error(schema); !extent.empty())
    return {{"", std::move(extent)}};
  schema_checker checker;
  checker.check(schema, "", 0);
  return checker.finish();
}

std::vector<schema_error> validate_value(const json& schema, const json& value) {
  value_checker checker;
  checker.validate(schema, value, "", 0);
  return checker.finish();
}

} // namespace canopy::core
