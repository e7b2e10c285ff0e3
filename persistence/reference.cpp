#include "persistence/reference.hpp"

#include <cctype>
#include <utility>

#include "persistence/error.hpp"

namespace canopy::core {

namespace {

// -- scanning ------------------------------------------------------------------

/// One piece of a scanned string: literal text or a reference.
struct segment {
  bool is_ref = false;
  std::string literal; ///< text with `$${` already turned into `${`
  reference ref{reference::inputs, {}, {}, {}};
};

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

/// Splits `text` (the reference without `${` and `}`) at dots.
std::vector<std::string> split_dots(const std::string& text) {
  std::vector<std::string> result;
  std::string cur;
  for (auto c : text) {
    if (c == '.') {
      result.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  result.push_back(std::move(cur));
  return result;
}

caf::expected<reference> parse_reference(const std::string& inner, std::string text) {
  auto bad = [&](const std::string& why) {
    return make_error(persistence_errc::invalid_graph,
                      "malformed reference '" + text + "': " + why);
  };
  if (inner.empty())
    return bad("empty reference");
  auto parts = split_dots(inner);
  reference ref{reference::inputs, {}, {}, {}};
  ref.text = std::move(text);
  const auto& scope = parts[0];
  if (scope == "inputs")
    ref.scope = reference::inputs;
  else if (scope == "steps")
    ref.scope = reference::steps;
  else if (scope == "with")
    ref.scope = reference::with;
  else
    return bad("unknown scope '" + scope
               + "' (expected inputs, steps or with; write $${ for a literal ${)");
  if (parts.size() < 2 || parts[1].empty())
    return bad("empty name");
  if (!is_name(parts[1]))
    return bad("invalid name '" + parts[1] + "' (use letters, digits, '_' and '-')");
  ref.name = parts[1];
  if (ref.scope != reference::steps && parts.size() > 2)
    return bad("only step references take a path after the name");
  for (size_t i = 2; i < parts.size(); ++i) {
    if (parts[i].empty())
      return bad("empty path component");
    ref.path.push_back(parts[i]);
  }
  return ref;
}

/// Splits `s` into literal text and references. `$${` is a literal `${`.
caf::expected<std::vector<segment>> scan(const std::string& s) {
  std::vector<segment> result;
  std::string lit;
  auto flush = [&] {
    if (!lit.empty()) {
      segment seg;
      seg.literal = std::move(lit);
      result.push_back(std::move(seg));
      lit.clear();
    }
  };
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, 3, "$${") == 0) {
      lit += "${";
      i += 3;
    } else if (s.compare(i, 2, "${") == 0) {
      auto close = s.find('}', i + 2);
      if (close == std::string::npos)
        return make_error(persistence_errc::invalid_graph,
                          "malformed reference '" + s.substr(i)
                            + "': unterminated '${' (missing '}')");
      auto ref = parse_reference(s.substr(i + 2, close - i - 2),
                                 s.substr(i, close - i + 1));
      if (!ref)
        return std::move(ref.error());
      flush();
      segment seg;
      seg.is_ref = true;
      seg.ref = std::move(*ref);
      result.push_back(std::move(seg));
      i = close + 1;
    } else {
      lit += s[i];
      ++i;
    }
  }
  flush();
  return result;
}

// -- resolving -----------------------------------------------------------------

std::string join_dots(const std::vector<std::string>& xs, size_t n) {
  std::string result;
  for (size_t i = 0; i < n && i < xs.size(); ++i) {
    if (i > 0)
      result += '.';
    result += xs[i];
  }
  return result;
}

bool is_index(const std::string& s) {
  if (s.empty() || s.size() > 18)
    return false;
  for (auto c : s)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

std::string compact(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

caf::expected<json> lookup(const reference& ref, const reference_scope& scope) {
  auto bad = [&](const std::string& why) {
    return make_error(persistence_errc::bad_reference, "reference " + ref.text + ": " + why);
  };
  switch (ref.scope) {
    case reference::inputs: {
      if (scope.inputs == nullptr || !scope.inputs->is_object()
          || !scope.inputs->contains(ref.name))
        return bad("unknown input '" + ref.name + "'");
      return scope.inputs->at(ref.name);
    }
    case reference::with: {
      if (scope.with == nullptr || !scope.with->is_object() || !scope.with->contains(ref.name))
        return bad("'with' has no key '" + ref.name + "'");
      return scope.with->at(ref.name);
    }
    case reference::steps:
      break;
  }
  if (scope.steps != nullptr && scope.steps->skipped(ref.name))
    return json{}; // a skipped step's result, at any path
  const json* cur = scope.steps != nullptr ? scope.steps->result_of(ref.name) : nullptr;
  if (cur == nullptr)
    return bad("step '" + ref.name + "' has no result");
  for (size_t i = 0; i < ref.path.size(); ++i) {
    const auto& key = ref.path[i];
    if (cur->is_object()) {
      auto it = cur->find(key);
      if (it != cur->end()) {
        cur = &*it;
        continue;
      }
    } else if (cur->is_array() && is_index(key)) {
      auto idx = std::stoull(key);
      if (idx < cur->size()) {
        cur = &(*cur)[idx];
        continue;
      }
    }
    return bad("step '" + ref.name + "' has no field '" + join_dots(ref.path, i + 1) + "'");
  }
  return *cur;
}

/// Resolves one string: the value when `s` is exactly one reference, else text.
caf::expected<json> resolve_string(const std::string& s, const reference_scope& scope) {
  auto segs = scan(s);
  if (!segs)
    return make_error(persistence_errc::bad_reference, message_of(segs.error()));
  if (segs->size() == 1 && (*segs)[0].is_ref)
    return lookup((*segs)[0].ref, scope);
  std::string result;
  for (auto& seg : *segs) {
    if (!seg.is_ref) {
      result += seg.literal;
      continue;
    }
    auto val = lookup(seg.ref, scope);
    if (!val)
      return std::move(val.error());
    if (val->is_string())
      result += val->get_ref<const std::string&>();
    else
      result += compact(*val);
  }
  return json(std::move(result));
}

} // namespace

// -- public API ------------------------------------------------------------------

bool is_name(const std::string& s) {
  if (s.empty())
    return false;
  for (auto c : s)
    if (!is_name_char(c))
      return false;
  return true;
}

caf::expected<std::vector<reference>> find_references(const std::string& s) {
  auto segs = scan(s);
  if (!segs)
    return std::move(segs.error());
  std::vector<reference> result;
  for (auto& seg : *segs)
    if (seg.is_ref)
      result.push_back(std::move(seg.ref));
  return result;
}

void for_each_string(const json& v, const std::string& path,
                     const std::function<void(const std::string&, const std::string&)>& f) {
  if (v.is_string()) {
    f(path, v.get_ref<const std::string&>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i)
      for_each_string(v[i], path + "/" + std::to_string(i), f);
  } else if (v.is_object()) {
    for (auto& [key, val] : v.items())
      for_each_string(val, path + "/" + escape_pointer(key), f);
  }
}

caf::expected<json> resolve(const json& v, const reference_scope& scope) {
  if (v.is_string())
    return resolve_string(v.get_ref<const std::string&>(), scope);
  if (v.is_array()) {
    auto result = json::array();
    for (auto& x : v) {
      auto r = resolve(x, scope);
      if (!r)
        return r;
      result.push_back(std::move(*r));
    }
    return result;
  }
  if (v.is_object()) {
    auto result = json::object();
    for (auto& [key, val] : v.items()) {
      auto r = resolve(val, scope);
      if (!r)
        return r;
      result[key] = std::move(*r);
    }
    return result;
  }
  return v;
}

caf::expected<std::string> resolve_text(const std::string& s, const reference_scope& scope) {
  auto r = resolve_string(s, scope);
  if (!r)
    return std::move(r.error());
  if (r->is_string())
    return r->get<std::string>();
  return compact(*r);
}

std::string escape_pointer(const std::string& key) {
  std::string result;
  result.reserve(key.size());
  for (auto c : key) {
    if (c == '~')
      result += "~0";
    else if (c == '/')
      result += "~1";
    else
      result += c;
  }
  return result;
}

// -- step results ----------------------------------------------------------------

const json* json_step_results::result_of(const std::string& step) const {
  if (!results_.is_object())
    return nullptr;
  auto i = results_.find(step);
  return i != results_.end() && !i->is_null() ? &*i : nullptr;
}

bool json_step_results::skipped(const std::string& step) const {
  if (!results_.is_object())
    return false;
  auto i = results_.find(step);
  return i != results_.end() && i->is_null();
}

} // namespace canopy::core
