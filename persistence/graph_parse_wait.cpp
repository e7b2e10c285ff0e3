// The graph parser's `wait` steps: a step that waits durably for a named
// signal (a human approval, say). It reads the signal, the prompt shown to
// who answers, the schema of the values it accepts, the buttons that send
// one, its timeout and what happens then, and who may answer.

#include "persistence/graph_parser.hpp"

#include <cctype>
#include <set>
#include <utility>

#include "persistence/json_text.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"
#include "persistence/value_schema.hpp"

namespace canopy::core::detail {

namespace {

// -- constants -----------------------------------------------------------------

const std::vector<std::string> wait_keys{"signal",  "prompt",     "schema",  "options",
                                         "timeout", "on_timeout", "default", "approvers"};

/// Most characters of a signal name.
constexpr size_t max_signal_chars = 64;

/// Most options (buttons) of one wait step.
constexpr size_t max_wait_options = 20;

/// Most characters (code points) of an option's label.
constexpr size_t max_label_chars = 64;

/// The step fields a wait step cannot have, each with the end of the
/// sentence that says why.
const std::vector<std::pair<std::string, std::string>> refused_fields{
  {"timeout", " of its own: its deadline is wait.timeout"},
  {"retries", ": it runs nothing that could fail and be retried"},
  {"retry_delay", ": it runs nothing that could fail and be retried"},
  {"cost", ": it runs nothing that costs"},
  {"grace", ": it runs no process to signal"},
  {"with", ": it runs nothing that takes inputs (what it shows is wait.prompt)"},
  {"env", ": it runs no process"},
  {"stdin", ": it runs no process"},
  {"cwd", ": it runs no process"},
  {"message", ": it sends no message (what it shows is wait.prompt)"},
};

/// What is wrong with `v` as a signal name (`"got ..."`), or "" when it is one.
std::string signal_problem(const json& v) {
  if (!v.is_string())
    return got(v);
  auto& s = v.get_ref<const std::string&>();
  if (s.empty())
    return "got an empty string";
  if (s.size() > max_signal_chars)
    return "got " + std::to_string(s.size()) + " characters";
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-')
      return "got \"" + s + "\"";
  return {};
}

/// The number of code points of the UTF-8 text `s`.
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80)
      ++n;
  return n;
}

} // namespace

// -- wait steps ----------------------------------------------------------------

void graph_parser::refuse_wait_fields(const step_work& w, const json& v) {
  for (auto& [field, why] : refused_fields)
    if (v.contains(field))
      fail(w.path + "/" + field, "a wait step takes no '" + field + "'" + why);
}

void graph_parser::check_value(const json& schema, const json& value, const std::string& path) {
  if (schema.is_null())
    return;
  for (auto& e : validate_value(schema, value))
    fail(path + e.path, "does not satisfy wait.schema: " + e.message);
}

void graph_parser::parse_wait(step_work& w, const json& v, const std::string& path) {
  if (!v.is_object()) {
    fail(path, "expected an object such as {\"signal\": \"approval\"}, " + got(v));
    return;
  }
  // Built here, shared as const by the step; `w.texts` points at its prompt.
  auto def = std::make_shared<wait_def>();
  w.def.wait = def;
  for (auto& [key, val] : v.items())
    if (!contains(wait_keys, key))
      fail(path + "/" + escape_pointer(key),
           "unknown key '" + key + "' (a wait step has the keys " + join(wait_keys) + ")"
             + did_you_mean(key, wait_keys));
  if (auto it = v.find("signal"); it == v.end())
    fail(path, "missing 'signal' (the name of the signal it waits for, e.g. \"approval\")");
  else if (auto problem = signal_problem(*it); !problem.empty())
    fail(path + "/signal", "expected a signal name (1 to " + std::to_string(max_signal_chars)
                             + " characters of A-Z a-z 0-9 _ . -), " + problem);
  else
    def->signal = it->get<std::string>();
  if (auto it = v.find("prompt"); it != v.end()) {
    if (!it->is_string()) {
      fail(path + "/prompt", "expected a string, " + got(*it));
    } else {
      def->prompt = it->get<std::string>();
      w.texts.emplace_back("/wait/prompt", &def->prompt);
    }
  }
  // Values are checked against the schema only when it is a good one.
  bool schema_ok = true;
  if (auto it = v.find("schema"); it != v.end()) {
    auto errors = check_schema(*it);
    for (auto& e : errors)
      fail(path + "/schema" + e.path, std::move(e.message));
    schema_ok = errors.empty();
    if (schema_ok)
      def->schema = *it;
  }
  if (auto it = v.find("options"); it != v.end())
    parse_wait_options(*def, *it, path + "/options", schema_ok);
  if (auto it = v.find("timeout"); it != v.end())
    parse_wait_timeout(*def, *it, path + "/timeout");
  parse_wait_fallback(*def, v, path, schema_ok);
  if (auto it = v.find("approvers"); it != v.end())
    parse_approvers(*def, *it, path + "/approvers");
}

void graph_parser::parse_wait_options(wait_def& def, const json& v, const std::string& opath,
                                      bool schema_ok) {
  if (!v.is_object()) {
    fail(opath, "expected an object of button label → value, such as "
                "{\"Approve\": {\"approved\": true}}, " + got(v));
  } else if (v.size() > max_wait_options) {
    fail(opath, "at most " + std::to_string(max_wait_options) + " options, got "
                  + std::to_string(v.size()));
  } else {
    for (auto& [label, val] : v.items()) {
      auto lpath = opath + "/" + escape_pointer(label);
      if (label.empty())
        fail(lpath, "an option's label must not be empty");
      else if (auto n = code_points(label); n > max_label_chars)
        fail(lpath, "an option's label has at most " + std::to_string(max_label_chars)
                      + " characters, this one has " + std::to_string(n));
      else if (schema_ok)
        check_value(def.schema, val, lpath);
    }
    def.options = v;
  }
}

void graph_parser::parse_wait_timeout(wait_def& def, const json& v, const std::string& tpath) {
  // `run` reads `limits` before the steps: the deadline is known here.
  const auto& deadline = g_->limits.deadline;
  if (auto d = duration(v, tpath)) {
    if (d->count() <= 0)
      fail(tpath, "expected a duration longer than 0, got \"" + v.get<std::string>() + "\"");
    else if (deadline && *d > *deadline)
      fail(tpath, "wait.timeout " + to_duration_string(*d)
                    + " is longer than the graph's limits.deadline ("
                    + to_duration_string(*deadline)
                    + "): waiting time counts toward the deadline");
    else
      def.timeout = *d;
  }
}

void graph_parser::parse_wait_fallback(wait_def& def, const json& v, const std::string& path,
                                       bool schema_ok) {
  bool on_timeout_ok = true;
  if (auto it = v.find("on_timeout"); it != v.end()) {
    if (!it->is_string() || !from_string(it->get<std::string>(), def.on_timeout)) {
      on_timeout_ok = false;
      fail(path + "/on_timeout",
           "expected \"fail\" or \"default\", "
             + (it->is_string() ? "got \"" + it->get<std::string>() + "\"" : got(*it)));
    } else if (def.on_timeout == wait_timeout::use_default && !v.contains("timeout")) {
      fail(path + "/on_timeout", "\"on_timeout\": \"default\" needs a 'timeout': without "
                                 "one nothing times out");
    }
  }
  // Whether `default` belongs is known only with a good `on_timeout`.
  auto dflt = v.find("default");
  bool use_default = def.on_timeout == wait_timeout::use_default;
  if (on_timeout_ok && use_default && dflt == v.end()) {
    fail(path, "missing 'default' (the value the step takes when its timeout passes, "
               "with \"on_timeout\": \"default\")");
  } else if (on_timeout_ok && !use_default && dflt != v.end()) {
    fail(path + "/default", "'default' applies only with \"on_timeout\": \"default\"");
  } else if (on_timeout_ok && dflt != v.end()) {
    if (schema_ok)
      check_value(def.schema, *dflt, path + "/default");
    def.default_value = *dflt;
  }
}

void graph_parser::parse_approvers(wait_def& def, const json& v, const std::string& apath) {
  if (!v.is_array()) {
    fail(apath, "expected an array of user names, " + got(v));
    return;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    auto& x = v[i];
    auto ipath = apath + "/" + std::to_string(i);
    if (!x.is_string() || x.get_ref<const std::string&>().empty())
      fail(ipath, "expected a user name (a non-empty string), "
                    + (x.is_string() ? std::string{"got an empty string"} : got(x)));
    else if (!seen.insert(x.get<std::string>()).second)
      fail(ipath, "'" + x.get<std::string>() + "' is listed twice");
    else
      def.approvers.push_back(x.get<std::string>());
  }
}

} // namespace canopy::core::detail
