// Value schemas (persistence/value_schema.hpp): checking a schema document,
// then validating values against it, with the exact errors.

#include "persistence/value_schema.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace canopy::core;
using json = nlohmann::json;
using strings = std::vector<std::string>;

namespace {

strings texts(const std::vector<schema_error>& errors) {
  strings result;
  for (auto& e : errors)
    result.push_back(to_string(e));
  return result;
}

/// The errors of check_schema(schema) as text.
strings schema_errors(const json& schema) {
  return texts(check_schema(schema));
}

/// The errors of `value` against `schema` as text; the schema must be fine.
strings errors_of(const json& schema, const json& value) {
  INFO("schema " << schema.dump());
  REQUIRE(schema_errors(schema) == strings{});
  return texts(validate_value(schema, value));
}

/// `levels` arrays, each the only element of the one around it: `[[[]]]` for 3.
json nested_arrays(int levels) {
  json result = json::array();
  json* inner = &result;
  for (int i = 1; i < levels; ++i)
    inner = &inner->emplace_back(json::array());
  return result;
}

const json approval = json::parse(R"({
  "type": "object", "required": ["approved"],
  "properties": {"approved": {"type": "boolean"},
                 "note": {"type": "string", "maxLength": 2000}}})");

} // namespace

// -- validating values --------------------------------------------------------------

TEST_CASE("an approval is accepted and every mistake of a wrong one is named",
          "[persistence][schema]") {
  CHECK(errors_of(approval, {{"approved", true}, {"note", "looks good"}}).empty());
  CHECK(errors_of(approval, {{"approved", false}, {"by", "ana"}}).empty());
  CHECK(errors_of(approval, {{"note", 3}})
        == strings{R"(missing required property "approved")",
                   "/note: expected a string, got an integer"});
  CHECK(errors_of(approval, {{"approved", "yes"}})
        == strings{"/approved: expected a boolean, got a string"});
  CHECK(errors_of(approval, {{"approved", true}, {"note", std::string(2000, 'x')}}).empty());
  CHECK(errors_of(approval, {{"approved", true}, {"note", std::string(2001, 'x')}})
        == strings{"/note: length 2001 is over maxLength 2000"});
  CHECK(errors_of(approval, json::array()) == strings{"expected an object, got an array"});
}

TEST_CASE("type accepts each of the seven types and names the expected and the actual one",
          "[persistence][schema]") {
  struct row {
    const char* type;
    json good;
    json bad;
    const char* message;
  };
  std::vector<row> rows{
    {"null", nullptr, 0, "expected null, got an integer"},
    {"boolean", false, "true", "expected a boolean, got a string"},
    {"integer", -7, 1.5, "expected an integer, got a number"},
    {"number", 1.5, nullptr, "expected a number, got null"},
    {"string", "", json::array(), "expected a string, got an array"},
    {"array", json::array(), json::object(), "expected an array, got an object"},
    {"object", json::object(), true, "expected an object, got a boolean"}};
  for (auto& r : rows) {
    INFO("type " << r.type);
    json schema{{"type", r.type}};
    CHECK(errors_of(schema, r.good).empty());
    CHECK(errors_of(schema, r.bad) == strings{r.message});
  }
}

TEST_CASE("an integer is a number without a fractional part and every integer is a number",
          "[persistence][schema]") {
  json integer{{"type", "integer"}}, number{{"type", "number"}};
  for (auto& v : {json(3), json(-3), json(3.0), json::parse("1e2"),
                  json(uint64_t{18446744073709551615u})})
    CHECK(errors_of(integer, v).empty());
  CHECK(errors_of(integer, 2.5) == strings{"expected an integer, got a number"});
  CHECK(errors_of(integer, "3") == strings{"expected an integer, got a string"});
  CHECK(errors_of(number, 3).empty());
  CHECK(errors_of(number, -0.25).empty());
  CHECK(errors_of(number, "0.25") == strings{"expected a number, got a string"});
}

TEST_CASE("a list of types accepts any of them and names them all when none matches",
          "[persistence][schema]") {
  json schema{{"type", {"string", "null"}}};
  CHECK(errors_of(schema, nullptr).empty());
  CHECK(errors_of(schema, "x").empty());
  CHECK(errors_of(schema, 3) == strings{"expected a string or null, got an integer"});
  CHECK(errors_of({{"type", {"string", "number", "null"}}}, true)
        == strings{"expected a string, a number or null, got a boolean"});
}

TEST_CASE("enum and const compare by JSON equality", "[persistence][schema]") {
  json letters{{"enum", {"a", "b"}}};
  CHECK(errors_of(letters, "b").empty());
  CHECK(errors_of(letters, "c") == strings{R"(must be one of ["a","b"])"});
  json mixed{{"enum", {1, {{"k", {1, 2}}}}}};
  CHECK(errors_of(mixed, 1.0).empty());
  CHECK(errors_of(mixed, {{"k", {1, 2}}}).empty());
  CHECK(errors_of(mixed, {{"k", {2, 1}}}) == strings{R"(must be one of [1,{"k":[1,2]}])"});
  json pair{{"const", {{"a", 1}, {"b", 2}}}};
  CHECK(errors_of(pair, json::parse(R"({"b": 2, "a": 1.0})")).empty());
  CHECK(errors_of(pair, {{"a", 1}}) == strings{R"(must equal {"a":1,"b":2})"});
  json many{{"enum", json::array()}};
  for (int i = 0; i < 100; ++i)
    many["enum"].push_back("value-" + std::to_string(i));
  auto long_list = errors_of(many, "other");
  REQUIRE(long_list.size() == 1);
  CHECK(long_list[0].rfind("must be one of [\"value-0\",", 0) == 0);
  CHECK(long_list[0].size() < 250);
  CHECK(long_list[0].substr(long_list[0].size() - 3) == "...");
}

TEST_CASE("properties validate the members they name and additionalProperties the others",
          "[persistence][schema]") {
  json closed{{"properties", {{"a", {{"type", "integer"}}}}}, {"additionalProperties", false}};
  CHECK(errors_of(closed, {{"a", 1}}).empty());
  CHECK(errors_of(closed, {{"a", 1}, {"x", 2}})
        == strings{R"(/x: "x" is not allowed (additionalProperties is false))"});
  json open{{"properties", {{"a", {{"type", "integer"}}}}}, {"additionalProperties", true}};
  CHECK(errors_of(open, {{"a", "1"}, {"x", 2}})
        == strings{"/a: expected an integer, got a string"});
  json typed{{"properties", {{"a", {{"type", "string"}}}}},
             {"additionalProperties", {{"type", "integer"}}}};
  CHECK(errors_of(typed, {{"a", "s"}, {"x", 2}}).empty());
  CHECK(errors_of(typed, {{"a", "s"}, {"x", "2"}})
        == strings{"/x: expected an integer, got a string"});
}

TEST_CASE("required names every missing property at the object", "[persistence][schema]") {
  json schema{{"properties", {{"inner", {{"required", {"a", "b", "c"}}}}}}};
  CHECK(errors_of(schema, {{"inner", {{"b", nullptr}}}})
        == strings{R"(/inner: missing required property "a")",
                   R"(/inner: missing required property "c")"});
  CHECK(errors_of(schema, {{"inner", {{"a", 1}, {"b", 2}, {"c", 3}}}}).empty());
}

TEST_CASE("items validates every element and minItems and maxItems bound the count",
          "[persistence][schema]") {
  json strings_only{{"items", {{"type", "string"}}}};
  CHECK(errors_of(strings_only, {"a", "b"}).empty());
  CHECK(errors_of(strings_only, {"a", 1, "b", true})
        == strings{"/1: expected a string, got an integer",
                   "/3: expected a string, got a boolean"});
  json two_or_three{{"minItems", 2}, {"maxItems", 3}};
  CHECK(errors_of(two_or_three, {1, 2}).empty());
  CHECK(errors_of(two_or_three, {1, 2, 3}).empty());
  CHECK(errors_of(two_or_three, {1}) == strings{"item count 1 is under minItems 2"});
  CHECK(errors_of(two_or_three, {1, 2, 3, 4}) == strings{"item count 4 is over maxItems 3"});
}

TEST_CASE("minimum and maximum include their bound, the exclusive ones exclude it",
          "[persistence][schema]") {
  json inclusive{{"minimum", 5}, {"maximum", 10}};
  CHECK(errors_of(inclusive, 5).empty());
  CHECK(errors_of(inclusive, 10.0).empty());
  CHECK(errors_of(inclusive, 4.5) == strings{"4.5 is under minimum 5"});
  CHECK(errors_of(inclusive, 11) == strings{"11 is over maximum 10"});
  json exclusive{{"exclusiveMinimum", 5}, {"exclusiveMaximum", 10.5}};
  CHECK(errors_of(exclusive, 5.25).empty());
  CHECK(errors_of(exclusive, 10).empty());
  CHECK(errors_of(exclusive, 5) == strings{"5 is not over exclusiveMinimum 5"});
  CHECK(errors_of(exclusive, 10.5) == strings{"10.5 is not under exclusiveMaximum 10.5"});
  // Exact beyond the 53 bits of a double.
  CHECK(errors_of({{"maximum", 9007199254740992}}, 9007199254740993)
        == strings{"9007199254740993 is over maximum 9007199254740992"});
}

TEST_CASE("minLength and maxLength count code points, not bytes", "[persistence][schema]") {
  json one{{"minLength", 1}, {"maxLength", 1}};
  CHECK(errors_of(one, "\xC3\xA9").empty());         // é, 2 bytes
  CHECK(errors_of(one, "\xF0\x9F\x98\x80").empty()); // 😀, 4 bytes
  CHECK(errors_of(one, "e\xCC\x81") == strings{"length 2 is over maxLength 1"}); // e + accent
  CHECK(errors_of(one, "") == strings{"length 0 is under minLength 1"});
  CHECK(errors_of({{"maxLength", 3}}, "\xF0\x9F\x98\x80\xC3\xA9\xF0\x9F\x98\x80").empty());
}

TEST_CASE("a keyword for one type lets values of other types through",
          "[persistence][schema]") {
  json schema{{"maxLength", 1}, {"minimum", 5}, {"minItems", 3}, {"required", {"a"}},
              {"items", {{"type", "string"}}}, {"properties", {{"a", {{"type", "string"}}}}}};
  for (auto& v : {json(true), json(nullptr), json("x"), json(7), json({"a", "b", "c"}),
                  json({{"a", "s"}})})
    CHECK(errors_of(schema, v).empty());
  CHECK(errors_of(schema, "xy") == strings{"length 2 is over maxLength 1"});
  CHECK(errors_of(schema, 4) == strings{"4 is under minimum 5"});
  CHECK(errors_of(schema, json::array({"a"})) == strings{"item count 1 is under minItems 3"});
  CHECK(errors_of(schema, json::object()) == strings{R"(missing required property "a")"});
}

TEST_CASE("title, description and default are accepted and ignored by validation",
          "[persistence][schema]") {
  json schema{{"type", "string"}, {"title", "Note"}, {"description", "Why"}, {"default", 3}};
  CHECK(errors_of(schema, "x").empty());
  CHECK(errors_of(schema, 3) == strings{"expected a string, got an integer"});
}

TEST_CASE("error paths are JSON pointers with / and ~ escaped in keys",
          "[persistence][schema]") {
  json schema{{"properties", {{"a/b", {{"type", "string"}}}, {"m~n", {{"type", "string"}}}}},
              {"additionalProperties", false}};
  CHECK(schema_errors({{"properties", {{"a/b", {{"typo", 1}}}}}})
        == strings{"/properties/a~1b/typo: unknown keyword 'typo'; did you mean 'type'?"});
  CHECK(errors_of(schema, {{"a/b", 1}, {"m~n", 2}, {"x/~y", 3}})
        == strings{"/a~1b: expected a string, got an integer",
                   "/m~0n: expected a string, got an integer",
                   R"(/x~1~0y: "x/~y" is not allowed (additionalProperties is false))"});
}

TEST_CASE("errors in nested objects and arrays are named by their full path",
          "[persistence][schema]") {
  auto schema = json::parse(R"({"properties": {"items": {"items": {
    "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}})");
  auto value = json::parse(R"({"items": [{"name": "a"}, {}, {"name": "c"}, {"name": 4}]})");
  CHECK(errors_of(schema, value)
        == strings{R"(/items/1: missing required property "name")",
                   "/items/3/name: expected a string, got an integer"});
}

TEST_CASE("every error is reported up to twenty, then one more says there were more",
          "[persistence][schema]") {
  json integers{{"items", {{"type", "integer"}}}};
  auto twenty = errors_of(integers, json(strings(20, "x")));
  CHECK(twenty.size() == 20);
  CHECK(twenty.back() == "/19: expected an integer, got a string");
  auto many = errors_of(integers, json(strings(100000, "x")));
  REQUIRE(many.size() == 21);
  CHECK(many[0] == "/0: expected an integer, got a string");
  CHECK(many[19] == "/19: expected an integer, got a string");
  CHECK(many[20] == "more than 20 errors; only the first 20 are listed");
}

TEST_CASE("a value deeper than its schema is validated without recursing into it",
          "[persistence][schema]") {
  auto deep = nested_arrays(5000);
  CHECK(errors_of({{"items", {{"type", "array"}}}}, deep).empty());
  CHECK(errors_of({{"enum", {1}}}, deep) == strings{"must be one of [1]"});
}

TEST_CASE("validating against a schema that check_schema refuses does not throw",
          "[persistence][schema]") {
  auto bad = json::parse(R"({"type": 3, "minLength": "x", "minimum": "1", "properties": [],
    "required": "a", "enum": 5, "items": 7, "additionalProperties": "no"})");
  for (auto& v : {json("s"), json(1), json::array({1}), json({{"a", 1}}), json(nullptr)})
    CHECK_NOTHROW(validate_value(bad, v));
  CHECK_NOTHROW(validate_value(json::array(), json::object()));
}

// -- checking schemas ---------------------------------------------------------------

TEST_CASE("an unknown keyword is an error at its pointer, with a suggestion when one is close",
          "[persistence][schema]") {
  json schema = approval;
  schema["properties"]["note"]["maxLenght"] = 5;
  CHECK(schema_errors(schema)
        == strings{"/properties/note/maxLenght: unknown keyword 'maxLenght'; "
                   "did you mean 'maxLength'?"});
  CHECK(schema_errors({{"requried", {"a"}}})
        == strings{"/requried: unknown keyword 'requried'; did you mean 'required'?"});
  CHECK(schema_errors({{"$ref", "#/x"}, {"frobnicate", 1}})
        == strings{"/$ref: unknown keyword '$ref'", "/frobnicate: unknown keyword 'frobnicate'"});
}

TEST_CASE("pattern is refused: regular expressions are not part of the subset",
          "[persistence][schema]") {
  CHECK(schema_errors({{"properties", {{"id", {{"type", "string"}, {"pattern", "^a"}}}}}})
        == strings{"/properties/id/pattern: 'pattern' is not supported: regular expressions "
                   "are not part of the schema subset"});
}

TEST_CASE("a keyword with a value of the wrong type is an error naming the keyword",
          "[persistence][schema]") {
  std::vector<std::pair<json, const char*>> rows{
    {json::array(), "a schema must be an object, got array"},
    {{{"maxLength", -1}}, "/maxLength: maxLength must be a non-negative integer, got -1"},
    {{{"minLength", 1.5}}, "/minLength: minLength must be a non-negative integer, got 1.5"},
    {{{"maxItems", "5"}}, "/maxItems: maxItems must be a non-negative integer, got string"},
    {{{"minimum", "1"}}, "/minimum: minimum must be a number, got string"},
    {{{"exclusiveMaximum", true}},
     "/exclusiveMaximum: exclusiveMaximum must be a number (draft 2020-12: not a boolean), "
     "got true"},
    {{{"required", "a"}}, "/required: required must be an array of property names, got string"},
    {{{"required", {"a", 1}}}, "/required/1: a required property name must be a string, got 1"},
    {{{"required", {"a", "a"}}},
     R"(/required/1: required must list each name once: "a" is there twice)"},
    {{{"type", "strnig"}}, "/type: unknown type 'strnig'; did you mean 'string'?"},
    {{{"type", "text"}},
     "/type: unknown type 'text' (null, boolean, integer, number, string, array or object)"},
    {{{"type", 3}}, "/type: type must be a type name or an array of them, got 3"},
    {{{"type", json::array()}}, "/type: type must list at least one type"},
    {{{"type", {"null", "null"}}},
     R"(/type/1: type must list each type once: "null" is there twice)"},
    {{{"enum", 3}}, "/enum: enum must be an array of values, got 3"},
    {{{"enum", json::array()}}, "/enum: enum must list at least one value"},
    {{{"properties", {1}}}, "/properties: properties must be an object of schemas, got array"},
    {{{"properties", {{"a", 1}}}}, "/properties/a: a schema must be an object, got 1"},
    {{{"additionalProperties", "no"}},
     "/additionalProperties: a schema must be an object, got string"},
    {{{"items", {json::object()}}},
     "/items: items must be one schema (an object) for every element; the array form is not "
     "part of the schema subset"},
    {{{"title", 3}}, "/title: title must be a string, got 3"}};
  for (auto& [schema, message] : rows) {
    INFO("schema " << schema.dump());
    CHECK(schema_errors(schema) == strings{message});
  }
  CHECK(schema_errors({{"maxLength", 2.0}, {"minimum", -1.5}, {"additionalProperties", false},
                       {"const", nullptr}, {"default", {1, 2}}})
        == strings{});
}

TEST_CASE("schemas nest 32 levels deep and a deeper one is an error at its pointer",
          "[persistence][schema]") {
  auto nested = [](int levels) {
    json schema{{"type", "array"}};
    for (int i = 0; i < levels; ++i)
      schema = json{{"items", std::move(schema)}};
    return schema;
  };
  CHECK(schema_errors(nested(32)).empty());
  std::string path;
  for (int i = 0; i < 33; ++i)
    path += "/items";
  CHECK(schema_errors(nested(33)) == strings{path + ": schemas are nested deeper than 32 levels"});
}

TEST_CASE("a schema of more than 1000 subschemas is an error", "[persistence][schema]") {
  auto with_properties = [](int n) {
    json schema{{"properties", json::object()}};
    for (int i = 0; i < n; ++i)
      schema["properties"]["p" + std::to_string(i)] = json::object();
    return schema;
  };
  CHECK(schema_errors(with_properties(999)).empty()); // and the root: 1000
  CHECK(schema_errors(with_properties(1000))
        == strings{"the schema has more than 1000 subschemas"});
}

TEST_CASE("a schema over 64 KiB or nested over 128 levels of JSON is refused before it is walked",
          "[persistence][schema]") {
  CHECK(schema_errors({{"description", std::string(65000, 'x')}}).empty());
  CHECK(schema_errors({{"description", std::string(65536, 'x')}, {"typo", 1}})
        == strings{"the schema is over 65536 bytes as compact JSON"});
  CHECK(schema_errors({{"const", nested_arrays(127)}}).empty());
  CHECK(schema_errors({{"const", nested_arrays(128)}})
        == strings{"the schema is nested deeper than 128 levels as JSON"});
}

TEST_CASE("checking a schema lists twenty errors, then one more says there were more",
          "[persistence][schema]") {
  json schema = json::object();
  for (int i = 0; i < 30; ++i)
    schema["x" + std::to_string(i + 10)] = 1;
  auto errors = schema_errors(schema);
  REQUIRE(errors.size() == 21);
  CHECK(errors[0] == "/x10: unknown keyword 'x10'");
  CHECK(errors[19] == "/x29: unknown keyword 'x29'");
  CHECK(errors[20] == "more than 20 errors; only the first 20 are listed");
}

TEST_CASE("an error reads PATH: MESSAGE, or just the message at the root",
          "[persistence][schema]") {
  CHECK(to_string(schema_error{"/a/0", "bad"}) == "/a/0: bad");
  CHECK(to_string(schema_error{"", "bad"}) == "bad");
}
