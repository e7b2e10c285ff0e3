#pragma once

// Conditional steps: a step's `when` and `after`. Plain data and functions;
// the execution machine decides with them when a step's needs are settled.
//
// `when` is one of a closed set of forms (nothing Turing-complete):
//
//   "${REF}"                   the reference's value, which must be a JSON boolean
//   {"not": CONDITION}         the opposite of another condition
//   {"equals": [REF, VALUE]}   the reference's value equals VALUE (JSON equality)
//   {"in": [REF, [VALUE...]]}  the reference's value equals one of the VALUEs
//
// REF is a string that is exactly one reference (`${inputs.NAME}` or
// `${steps.ID.PATH}`); VALUE is literal JSON, never resolved, so a string in
// it may not hold `${`. A reference to a skipped step resolves to null.
//
// `after` says how a step treats needs that were skipped:
//   "all_completed" (default)  it is skipped when any need was skipped;
//   "any_completed"            it is skipped only when every need was skipped.
// A step is decided once every need is settled (completed or skipped): first
// `after`, then `when`. A step that is skipped never starts.

#include <cstdint>
#include <functional>
#include <string>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "persistence/reference.hpp"

namespace canopy::core {

using json = nlohmann::json;

/// How a step treats skipped needs (see the file comment).
enum class after_rule : uint8_t { all_completed, any_completed };

/// @returns the graph spelling, e.g. `"any_completed"`.
const char* to_string(after_rule x);
/// Parses a graph spelling. @returns false for anything else.
bool from_string(const std::string& s, after_rule& x);

/// The deepest nesting of `not` accepted in one condition.
constexpr int max_condition_depth = 8;

/// Checks a `when` value found at `path` (an RFC 6901 pointer). Calls
/// `fail(path, message)` for each problem, and `ref(path, text)` for each REF
/// string (`text` points into `when`), so that the caller checks the
/// references as it checks the step's other references.
/// Thread-safe.
void check_condition(const json& when, const std::string& path,
                     const std::function<void(std::string, std::string)>& fail,
                     const std::function<void(std::string, const std::string*)>& ref);

/// Evaluates a `when` value that `check_condition` accepted.
/// @returns the condition's truth, or `persistence_errc::bad_reference` with
///          a message naming the reference when it does not resolve, or when
///          the bare form's value is not a boolean (e.g. `when: reference
///          ${steps.a.ok} is a string, expected a boolean`).
/// Thread-safe.
caf::expected<bool> evaluate_condition(const json& when, const reference_scope& scope);

} // namespace canopy::core
