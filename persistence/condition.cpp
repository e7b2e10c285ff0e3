#include "persistence/condition.hpp"

#include <algorithm>

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"

namespace canopy::core {

namespace {

const char* const forms =
  "a reference \"${...}\" to a boolean, {\"not\": CONDITION}, {\"equals\": [REF, VALUE]} "
  "or {\"in\": [REF, [VALUES]]}";

/// The JSON type of `v` with its article: "a string", "an object", "null".
std::string a_type(const json& v) {
  if (v.is_null())
    return "null";
  if (v.is_object() || v.is_array())
    return std::string{"an "} + v.type_name();
  return std::string{"a "} + v.type_name();
}

/// True when a string anywhere in `v` holds `${`.
bool holds_reference_syntax(const json& v) {
  bool found = false;
  for_each_string(v, "", [&found](const std::string&, const std::string& s) {
    found = found || s.find("${") != std::string::npos;
  });
  return found;
}

struct checker {
  const std::function<void(std::string, std::string)>& fail;
  const std::function<void(std::string, const std::string*)>& ref;

  void reference_at(const json& v, const std::string& path) {
    if (!v.is_string()) {
      fail(path, "expected a reference \"${...}\", " + got(v));
      return;
    }
    auto& s = v.get_ref<const std::string&>();
    auto refs = find_references(s);
    if (!refs) {
      fail(path, message_of(refs.error()));
      return;
    }
    if (refs->size() != 1 || (*refs)[0].text != s) {
      fail(path, "expected exactly one reference such as \"${steps.review.approved}\", got \""
                   + s + "\"");
      return;
    }
    ref(path, &s);
  }

  void literal_at(const json& v, const std::string& path) {
    if (holds_reference_syntax(v))
      fail(path, "a value to compare with is literal JSON and is not resolved: it may not "
                 "hold \"${\"");
  }

  void check(const json& when, const std::string& path, int depth) {
    if (when.is_string()) {
      reference_at(when, path);
      return;
    }
    if (!when.is_object() || when.size() != 1) {
      fail(path, std::string{"expected "} + forms + ", "
                   + (when.is_object() ? "got an object with " + std::to_string(when.size())
                                           + " keys"
                                       : got(when)));
      return;
    }
    auto it = when.begin();
    auto& key = it.key();
    auto& arg = it.value();
    auto arg_path = path + "/" + escape_pointer(key);
    if (key == "not") {
      if (depth >= max_condition_depth)
        fail(arg_path, "conditions nest at most " + std::to_string(max_condition_depth)
                         + " levels deep");
      else
        check(arg, arg_path, depth + 1);
      return;
    }
    if (key != "equals" && key != "in") {
      fail(arg_path, "unknown condition '" + key + "' (expected not, equals or in)");
      return;
    }
    if (!arg.is_array() || arg.size() != 2) {
      fail(arg_path, "expected [REF, " + std::string{key == "in" ? "[VALUES]" : "VALUE"}
                       + "], " + (arg.is_array() ? "got " + std::to_string(arg.size())
                                                      + " elements"
                                                 : got(arg)));
      return;
    }
    reference_at(arg[0], arg_path + "/0");
    if (key == "in" && !arg[1].is_array()) {
      fail(arg_path + "/1", "expected an array of values, " + got(arg[1]));
      return;
    }
    literal_at(arg[1], arg_path + "/1");
  }
};

} // namespace

// -- after ----------------------------------------------------------------------

const char* to_string(after_rule x) {
  return x == after_rule::any_completed ? "any_completed" : "all_completed";
}

bool from_string(const std::string& s, after_rule& x) {
  if (s == "all_completed")
    x = after_rule::all_completed;
  else if (s == "any_completed")
    x = after_rule::any_completed;
  else
    return false;
  return true;
}

// -- when -----------------------------------------------------------------------

void check_condition(const json& when, const std::string& path,
                     const std::function<void(std::string, std::string)>& fail,
                     const std::function<void(std::string, const std::string*)>& ref) {
  checker{fail, ref}.check(when, path, 0);
}

caf::expected<bool> evaluate_condition(const json& when, const reference_scope& scope) {
  if (when.is_string()) {
    auto v = resolve(when, scope);
    if (!v)
      return std::move(v.error());
    if (!v->is_boolean())
      return make_error(persistence_errc::bad_reference,
                        "when: reference " + when.get<std::string>() + " is " + a_type(*v)
                          + ", expected a boolean");
    return v->get<bool>();
  }
  if (!when.is_object() || when.size() != 1)
    return make_error(persistence_errc::bad_reference, "when: not a condition");
  auto it = when.begin();
  if (it.key() == "not") {
    auto inner = evaluate_condition(it.value(), scope);
    if (!inner)
      return inner;
    return !*inner;
  }
  auto& arg = it.value();
  if (!arg.is_array() || arg.size() != 2)
    return make_error(persistence_errc::bad_reference, "when: not a condition");
  auto v = resolve(arg[0], scope);
  if (!v)
    return std::move(v.error());
  if (it.key() == "equals")
    return *v == arg[1];
  if (it.key() == "in" && arg[1].is_array())
    return std::find(arg[1].begin(), arg[1].end(), *v) != arg[1].end();
  return make_error(persistence_errc::bad_reference, "when: not a condition");
}

} // namespace canopy::core
