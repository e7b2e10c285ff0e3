#include "persistence/reference.hpp"

#include <catch2/catch.hpp>

#include <utility>

#include "persistence/error.hpp"

using namespace canopy::core;

namespace {

/// A scope with one input, one `with` key and two finished steps.
struct fixture {
  json inputs = {{"topic", "owls"}, {"n", 3}};
  json with = {{"prompt", "hi"}};
  json steps = {{"a", {{"stdout", "out\n"}, {"exit_code", 0}, {"json", {{"xs", {10, 20}}}}}},
                {"b", {{"reply", nullptr}}}};
  json_step_results results{steps};

  reference_scope scope() const {
    return {&inputs, &results, &with};
  }
};

} // namespace

// -- find_references ---------------------------------------------------------------

TEST_CASE("find_references returns every reference with scope, name and path",
          "[persistence][reference]") {
  auto refs = find_references("x ${inputs.topic} y ${steps.a.json.xs.0} ${with.k-1}");
  REQUIRE(refs);
  REQUIRE(refs->size() == 3);
  CHECK((*refs)[0].scope == reference::inputs);
  CHECK((*refs)[0].name == "topic");
  CHECK((*refs)[0].path.empty());
  CHECK((*refs)[0].text == "${inputs.topic}");
  CHECK((*refs)[1].scope == reference::steps);
  CHECK((*refs)[1].name == "a");
  CHECK((*refs)[1].path == std::vector<std::string>{"json", "xs", "0"});
  CHECK((*refs)[1].text == "${steps.a.json.xs.0}");
  CHECK((*refs)[2].scope == reference::with);
  CHECK((*refs)[2].name == "k-1");
}

TEST_CASE("find_references finds nothing in plain text and shell dollars",
          "[persistence][reference]") {
  auto refs = find_references("echo $HOME $$ $ {x} $");
  REQUIRE(refs);
  CHECK(refs->empty());
}

TEST_CASE("a doubled dollar escapes a literal ${", "[persistence][reference]") {
  auto refs = find_references("echo $${HOME} ${inputs.a}");
  REQUIRE(refs);
  REQUIRE(refs->size() == 1);
  CHECK((*refs)[0].name == "a");
  json inputs = {{"a", 1}};
  reference_scope scope{&inputs, nullptr, nullptr};
  auto text = resolve_text("echo $${HOME} ${inputs.a}", scope);
  REQUIRE(text);
  CHECK(*text == "echo ${HOME} 1");
  auto whole = resolve(json("$${x}"), scope);
  REQUIRE(whole);
  CHECK(*whole == json("${x}"));
}

TEST_CASE("malformed references are errors with a message", "[persistence][reference]") {
  auto msg = [](const std::string& s) {
    auto refs = find_references(s);
    REQUIRE_FALSE(refs);
    return message_of(refs.error());
  };
  CHECK_THAT(msg("a ${inputs.x"), Catch::Contains("unterminated"));
  CHECK_THAT(msg("${HOME}"), Catch::Contains("unknown scope 'HOME'"));
  CHECK_THAT(msg("${foo.bar}"), Catch::Contains("unknown scope 'foo'"));
  CHECK_THAT(msg("${}"), Catch::Contains("empty reference"));
  CHECK_THAT(msg("${inputs.}"), Catch::Contains("empty name"));
  CHECK_THAT(msg("${steps}"), Catch::Contains("empty name"));
  CHECK_THAT(msg("${steps.a b}"), Catch::Contains("invalid name 'a b'"));
  CHECK_THAT(msg("${steps.a..b}"), Catch::Contains("empty path component"));
  CHECK_THAT(msg("${inputs.a.b}"), Catch::Contains("only step references take a path"));
}

// -- resolve -------------------------------------------------------------------------

TEST_CASE("a string that is exactly one reference takes the JSON value",
          "[persistence][reference]") {
  fixture f;
  auto n = resolve(json("${inputs.n}"), f.scope());
  REQUIRE(n);
  CHECK(*n == json(3));
  auto obj = resolve(json("${steps.a.json}"), f.scope());
  REQUIRE(obj);
  CHECK(*obj == json({{"xs", {10, 20}}}));
  auto whole = resolve(json("${steps.b}"), f.scope());
  REQUIRE(whole);
  CHECK(*whole == json({{"reply", nullptr}}));
  auto null = resolve(json("${steps.b.reply}"), f.scope());
  REQUIRE(null);
  CHECK(null->is_null());
  auto item = resolve(json("${steps.a.json.xs.1}"), f.scope());
  REQUIRE(item);
  CHECK(*item == json(20));
}

TEST_CASE("references inside text are interpolated, non-strings as compact JSON",
          "[persistence][reference]") {
  fixture f;
  auto r = resolve(json("topic=${inputs.topic} n=${inputs.n} xs=${steps.a.json.xs}"),
                   f.scope());
  REQUIRE(r);
  CHECK(*r == json("topic=owls n=3 xs=[10,20]"));
  auto w = resolve(json("[${with.prompt}]"), f.scope());
  REQUIRE(w);
  CHECK(*w == json("[hi]"));
}

TEST_CASE("resolve recurses through arrays and objects but leaves keys alone",
          "[persistence][reference]") {
  fixture f;
  json v = {{"${inputs.topic}", {"${inputs.n}", "x${inputs.n}", 7, true, nullptr}},
            {"nested", {{"out", "${steps.a.stdout}"}}}};
  auto r = resolve(v, f.scope());
  REQUIRE(r);
  json expected = {{"${inputs.topic}", {3, "x3", 7, true, nullptr}},
                   {"nested", {{"out", "out\n"}}}};
  CHECK(*r == expected);
}

TEST_CASE("resolve names the reference when a path does not exist",
          "[persistence][reference]") {
  fixture f;
  auto r = resolve(json("${steps.a.x}"), f.scope());
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == static_cast<uint8_t>(persistence_errc::bad_reference));
  CHECK(r.error().category() == persistence_category);
  CHECK(message_of(r.error()) == "reference ${steps.a.x}: step 'a' has no field 'x'");
  auto deep = resolve(json("text ${steps.a.json.xs.5} more"), f.scope());
  REQUIRE_FALSE(deep);
  CHECK(message_of(deep.error())
        == "reference ${steps.a.json.xs.5}: step 'a' has no field 'json.xs.5'");
  auto through_string = resolve(json("${steps.a.stdout.len}"), f.scope());
  REQUIRE_FALSE(through_string);
  CHECK_THAT(message_of(through_string.error()), Catch::Contains("no field 'stdout.len'"));
}

TEST_CASE("resolve reports unknown inputs, steps without results and malformed text",
          "[persistence][reference]") {
  fixture f;
  auto in = resolve(json({"${inputs.zzz}"}), f.scope());
  REQUIRE_FALSE(in);
  CHECK(message_of(in.error()) == "reference ${inputs.zzz}: unknown input 'zzz'");
  auto step = resolve_text("${steps.c.stdout}", f.scope());
  REQUIRE_FALSE(step);
  CHECK(message_of(step.error()) == "reference ${steps.c.stdout}: step 'c' has no result");
  auto with = resolve(json("${with.none}"), f.scope());
  REQUIRE_FALSE(with);
  CHECK_THAT(message_of(with.error()), Catch::Contains("${with.none}"));
  auto bad = resolve(json("${nope"), f.scope());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == static_cast<uint8_t>(persistence_errc::bad_reference));
  auto empty_scope = resolve(json("${inputs.topic}"), reference_scope{});
  REQUIRE_FALSE(empty_scope);
}

TEST_CASE("resolve_text always gives text", "[persistence][reference]") {
  fixture f;
  auto n = resolve_text("${inputs.n}", f.scope());
  REQUIRE(n);
  CHECK(*n == "3");
  auto obj = resolve_text("${steps.a.json}", f.scope());
  REQUIRE(obj);
  CHECK(*obj == R"({"xs":[10,20]})");
  auto s = resolve_text("${steps.a.stdout}", f.scope());
  REQUIRE(s);
  CHECK(*s == "out\n");
  auto plain = resolve_text("no refs", f.scope());
  REQUIRE(plain);
  CHECK(*plain == "no refs");
}

// -- for_each_string -----------------------------------------------------------------

TEST_CASE("for_each_string visits every string with an escaped JSON pointer",
          "[persistence][reference]") {
  json v = {{"a/b", "x"}, {"c~d", {"y", 1, {{"e", "z"}}}}, {"n", 5}};
  std::vector<std::pair<std::string, std::string>> seen;
  for_each_string(v, "/with", [&](const std::string& path, const std::string& s) {
    seen.emplace_back(path, s);
  });
  std::vector<std::pair<std::string, std::string>> expected{
    {"/with/a~1b", "x"}, {"/with/c~0d/0", "y"}, {"/with/c~0d/2/e", "z"}};
  CHECK(seen == expected);
  seen.clear();
  for_each_string(json("top"), "", [&](const std::string& path, const std::string& s) {
    seen.emplace_back(path, s);
  });
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].first.empty());
  CHECK(seen[0].second == "top");
}
