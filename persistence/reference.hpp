#pragma once

// `${inputs.NAME}` and `${steps.ID.PATH}` references (runtime/docs/reference/graph-format.md).
//
// Syntax: `${inputs.NAME}`, `${steps.ID}`, `${steps.ID.a.b.0}` (a dotted path
// into the step's result; numeric components index arrays) and `${with.KEY}`
// (tool argv templates only). NAME, ID and KEY are `[A-Za-z0-9_-]+`.
// `$${` is an escape for a literal `${` (e.g. `"echo $${HOME}"` gives
// `echo ${HOME}`); a `$` not followed by `{` is always literal (`$$`, `$HOME`).

#include <functional>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace canopy::core {

using json = nlohmann::json;

/// One reference found in a string.
struct reference {
  enum scope_t { inputs, steps, with } scope;
  std::string name;              ///< input name, step id, or `with` key
  std::vector<std::string> path; ///< dotted path after the step id (steps only)
  std::string text;              ///< the reference as written, e.g. `${steps.a.stdout}`
};

/// The one name rule: input names, step ids and `with` keys are
/// `[A-Za-z0-9_-]+` (ASCII). @returns whether `s` is such a name.
bool is_name(const std::string& s);

/// Finds every reference in `s`.
/// @returns the references, or an error message for a malformed one
///          (an unterminated `${`, an unknown scope, an empty name).
caf::expected<std::vector<reference>> find_references(const std::string& s);

/// Escapes one RFC 6901 reference token (`~` → `~0`, `/` → `~1`).
std::string escape_pointer(const std::string& key);

/// Calls `f` for every string in `v` (recursively through arrays and objects),
/// with the RFC 6901 path of the string relative to `v`.
/// `f` receives `(path, string)`; `path` is `path` followed by the pointer
/// of the string inside `v` (object keys escaped: `~` → `~0`, `/` → `~1`).
void for_each_string(const json& v, const std::string& path,
                     const std::function<void(const std::string&, const std::string&)>& f);

/// The results of an execution's finished steps, by step id.
class step_results {
public:
  virtual ~step_results() = default;
  /// @returns the result of step `step` once it completed, else null.
  virtual const json* result_of(const std::string& step) const = 0;
  /// @returns true when step `step` was skipped (its condition was false):
  /// every reference to it resolves to null.
  virtual bool skipped(const std::string& step) const {
    (void)step;
    return false;
  }
};

/// `step_results` over a JSON object (step id → result), which must outlive
/// it. A step whose value is null was skipped.
class json_step_results : public step_results {
public:
  explicit json_step_results(const json& results) : results_(results) {
  }
  const json* result_of(const std::string& step) const override;
  bool skipped(const std::string& step) const override;

private:
  const json& results_;
};

/// What references resolve against.
struct reference_scope {
  const json* inputs = nullptr;         ///< object of input values
  const step_results* steps = nullptr;  ///< finished steps' results
  const json* with = nullptr;           ///< object, for tool argv templates
};

/// Resolves the references in `v`: a string that is exactly one reference takes
/// the referenced JSON value; elsewhere values are interpolated as text (a
/// non-string as compact JSON). Recurses through arrays and objects.
/// @returns the resolved value, or `persistence_errc::bad_reference` naming the
///          reference when an input, step or path does not exist.
caf::expected<json> resolve(const json& v, const reference_scope& scope);

/// Like `resolve` for one string, always giving text (for argv, env, cwd, stdin).
caf::expected<std::string> resolve_text(const std::string& s, const reference_scope& scope);

} // namespace canopy::core
