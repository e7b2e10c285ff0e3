#pragma once

// Value schemas: a small, linear subset of JSON Schema (draft 2020-12) for
// the values sent to a waiting step, e.g. a human approval
// `{"approved": true, "note": "..."}` against
//
//     {"type": "object", "required": ["approved"],
//      "properties": {"approved": {"type": "boolean"},
//                     "note": {"type": "string", "maxLength": 2000}}}
//
// Plain functions, no state.
//
// Keywords: `type`, `enum`, `const`; for objects `properties`, `required`,
// `additionalProperties`; for arrays `items`, `minItems`, `maxItems`; for
// numbers `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`; for
// strings `minLength`, `maxLength`; the annotations `title`, `description`
// and `default`, which validation ignores.
//
// Caveats:
//  - Any other keyword is an error of the schema, not ignored as JSON Schema
//    would: `pattern` (no regular expressions), `$ref`, `$schema`, `anyOf`,
//    `format`, `prefixItems`... A typo (`maxLenght`) is caught, not silently
//    accepted.
//  - A schema is a JSON object; `true` and `false` stand for a schema only
//    as the value of `additionalProperties`.
//  - `integer` is any number without a fractional part: `1.0` is an integer.
//    `number` includes the integers.
//  - `minLength`/`maxLength` count Unicode code points, not bytes: `"é"` and
//    `"😀"` have length 1.
//  - As in JSON Schema, a keyword for one type does not constrain values of
//    another: `maxLength` lets any number through; only `type` restricts the
//    type.
//  - `exclusiveMinimum`/`exclusiveMaximum` are numbers (draft 2020-12), not
//    the booleans of draft 4.
//  - `enum` and `const` compare by JSON equality: `1` equals `1.0`, object
//    members in any order.

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace canopy::core {

using json = nlohmann::json;

// -- limits -------------------------------------------------------------------

/// Deepest nesting of schemas: the root schema is at depth 0, a schema under
/// `properties`, `items` or `additionalProperties` one deeper than its parent.
constexpr int max_schema_depth = 32;

/// Largest schema accepted, in bytes of compact JSON text.
constexpr size_t max_schema_bytes = 64u * 1024u;

/// Most schemas (the root and every subschema) in one schema document.
constexpr size_t max_subschemas = 1000;

/// Most errors listed by one call of `check_schema` or `validate_value`.
constexpr size_t max_schema_errors = 20;

// -- errors -------------------------------------------------------------------

/// One error: where (an RFC 6901 JSON pointer, `""` for the whole document:
/// into the schema for `check_schema`, into the value for `validate_value`)
/// and what is wrong.
struct schema_error {
  std::string path;
  std::string message;
};

/// Renders `e` as `"PATH: MESSAGE"`, or just the message when the path is
/// empty. Thread-safe.
std::string to_string(const schema_error& e);

// -- checking and validating ----------------------------------------------------

/// Checks a schema document itself: only the keywords above, each with a
/// value of the right type, within the limits above.
/// @param schema  any JSON value (e.g. from `parse_json_text`).
/// @returns every error found, empty when the schema is fine. Each names
///          the JSON pointer of the offending part of the schema:
///  - `the schema is over 65536 bytes as compact JSON`, or `the schema
///    is nested deeper than 128 levels as JSON` (`max_json_nesting`), at
///    `""`: the schema is not walked further, this is its only error;
///  - `the schema has more than 1000 subschemas`, at `""`;
///  - `schemas are nested deeper than 32 levels`, at the first schema too
///    deep;
///  - `a schema must be an object, got ...`;
///  - `unknown keyword 'K'`, at the keyword, followed by `; did you mean
///    'L'?` when a supported keyword is close (`did_you_mean`);
///  - `'pattern' is not supported: regular expressions are not part of the
///    schema subset`;
///  - a keyword's value of the wrong type or range, at the keyword, e.g.
///    `maxLength must be a non-negative integer, got -1`, `required must
///    list each name once: "a" is there twice`, `unknown type 'strnig';
///    did you mean 'string'?`.
///  At most `max_schema_errors` errors, followed, when there were more, by
///  one at `""`: `more than 20 errors; only the first 20 are listed`.
/// Linear in the size of the schema; never throws but `std::bad_alloc`.
/// Thread-safe.
std::vector<schema_error> check_schema(const json& schema);

/// Validates `value` against `schema`.
/// @pre `check_schema(schema)` is empty. With any other schema the call
///      still neither throws nor crashes, skips what it cannot read (a
///      keyword of the wrong type, a schema nested too deep), and its
///      result is unspecified.
/// @returns every error found in `value`, empty when it is valid. Each names
///          the JSON pointer of the offending part of the value (object keys
///          escaped `~` → `~0`, `/` → `~1`, array elements by index, e.g.
///          `/items/3/name`) and what is wrong:
///  - `expected a boolean, got a string`, `expected a string or null, got
///    an integer` (`type`);
///  - `must be one of ["a","b"]` (`enum`), `must equal "a"` (`const`); a
///    long list or value is cut short with `...`;
///  - `missing required property "approved"`, at the object;
///  - `"x" is not allowed (additionalProperties is false)`, at the property;
///  - `length 2001 is over maxLength 2000`, `length 0 is under minLength 1`;
///  - `item count 5 is over maxItems 4`, `item count 0 is under minItems 1`;
///  - `11 is over maximum 10`, `3 is under minimum 5`, `10 is not under
///    exclusiveMaximum 10`, `5 is not over exclusiveMinimum 5`.
///  At most `max_schema_errors` errors, followed, when there were more, by
///  one at `""`: `more than 20 errors; only the first 20 are listed`; the
///  walk stops there.
/// Each part of `value` is compared with at most one schema (no `anyOf`, no
/// backtracking): linear in the size of the value times that of the schema.
/// Recurses only as deep as the schema (`max_schema_depth`), whatever the
/// depth of `value`. Never throws but `std::bad_alloc`. Thread-safe.
std::vector<schema_error> validate_value(const json& schema, const json& value);

} // namespace canopy::core
