// `wait` steps in the graph model: the `wait` object parsed into a wait_def,
// each of its rules rejecting with the JSON path of the offending key, and
// stored graphs with wait steps loaded back into the same wait_def.

#include "persistence/graph.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "persistence/error.hpp"
#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;
using canopy::core::test::rejected_at;

namespace {

// -- helpers -------------------------------------------------------------------

/// The example of a wait step: `approve` waits for an approval of `draft`.
json approval_example() {
  return json::parse(R"({
    "steps": {
      "draft": {"fn": "echo"},
      "approve": {"needs": ["draft"], "wait": {
        "signal": "approval",
        "prompt": "Publish ${steps.draft.json.title}?",
        "schema": {"type": "object", "required": ["approved"],
                   "properties": {"approved": {"type": "boolean"},
                                  "note": {"type": "string", "maxLength": 2000}}},
        "options": {"Approve": {"approved": true}, "Reject": {"approved": false}},
        "timeout": "24h", "on_timeout": "default", "default": {"approved": false},
        "approvers": ["alice"]}}
    }
  })");
}

/// A graph: `draft` (echo), and `approve` needing it, waiting with `wait`,
/// with the step fields `fields` added.
json approve_with(json wait, json fields = json::object()) {
  json approve = {{"needs", {"draft"}}, {"wait", std::move(wait)}};
  approve.update(fields);
  return {{"steps", {{"draft", {{"fn", "echo"}}}, {"approve", approve}}}};
}

/// The wait of `approval_example` with `patch` merged in (RFC 7396: objects
/// merge, a null member removes the key).
json example_wait(const json& patch) {
  auto wait = approval_example()["steps"]["approve"]["wait"];
  wait.merge_patch(patch);
  return wait;
}

parse_result parse_ok(const json& doc) {
  auto result = parse_graph(doc, "/tmp");
  INFO("document: " << doc.dump() << "\nerrors:\n" << render(result.errors));
  REQUIRE(result);
  CHECK(result.errors.empty());
  return result;
}

/// The wait_def of step `id` of `doc`, which must parse.
wait_def wait_of(const json& doc, const std::string& id = "approve") {
  auto result = parse_ok(doc);
  auto step = result.value->find(id);
  REQUIRE(step != nullptr);
  CHECK(step->kind == step_kind::wait);
  REQUIRE(step->wait != nullptr);
  return *step->wait;
}


/// The errors of `doc`, which must be rejected.
std::vector<graph_error> errors_of(const json& doc) {
  auto result = parse_graph(doc, "/tmp");
  CHECK_FALSE(result);
  return result.errors;
}

/// Checks that `a` and `b` hold the same wait definition.
void check_same(const wait_def& a, const wait_def& b) {
  CHECK(a.signal == b.signal);
  CHECK(a.prompt == b.prompt);
  CHECK(a.schema == b.schema);
  CHECK(a.options == b.options);
  CHECK(a.timeout == b.timeout);
  CHECK(a.on_timeout == b.on_timeout);
  CHECK(a.default_value == b.default_value);
  CHECK(a.approvers == b.approvers);
}

/// Stores `g` in a store in a temporary home as an execution stores it and
/// reads it back.
stored_graph round_trip(const graph& g) {
  test::temp_dir dir;
  store_options opts;
  opts.home = dir.path;
  opts.initial_map_bytes = 64u << 20;
  auto db = store::open(opts);
  REQUIRE(db);
  execution_record rec;
  rec.id = "e1";
  rec.root_id = "e1";
  rec.graph = g.name;
  rec.created_at = now_ms();
  write_batch b;
  b.executions.push_back(rec);
  b.graphs.emplace_back("e1", stored_graph{g.document, g.base_dir, json(g.files)});
  auto err = (*db)->commit(b);
  INFO("commit: " << message_of(err));
  REQUIRE_FALSE(err);
  auto back = (*db)->graph("e1");
  REQUIRE(back);
  return std::move(*back);
}

} // namespace

// -- valid wait steps ----------------------------------------------------------------

TEST_CASE("the approval example parses into the exact wait_def", "[persistence][graph][wait]") {
  auto w = wait_of(approval_example());
  CHECK(w.signal == "approval");
  CHECK(w.prompt == "Publish ${steps.draft.json.title}?");
  CHECK(w.schema
        == json::parse(R"({"type": "object", "required": ["approved"],
                           "properties": {"approved": {"type": "boolean"},
                                          "note": {"type": "string", "maxLength": 2000}}})"));
  CHECK(w.options
        == json::parse(R"({"Approve": {"approved": true}, "Reject": {"approved": false}})"));
  REQUIRE(w.timeout);
  CHECK(*w.timeout == millis{24 * 3'600'000});
  CHECK(w.on_timeout == wait_timeout::use_default);
  CHECK(w.default_value == json{{"approved", false}});
  CHECK(w.approvers == std::vector<std::string>{"alice"});
}

TEST_CASE("the approval example keeps its needs and is ordered after them",
          "[persistence][graph][wait]") {
  auto result = parse_ok(approval_example());
  auto& g = *result.value;
  REQUIRE(g.steps.size() == 2);
  CHECK(g.steps[0].id == "draft");
  CHECK(g.steps[0].wait == nullptr);
  CHECK(g.steps[1].id == "approve");
  CHECK(g.steps[1].kind == step_kind::wait);
  CHECK(g.steps[1].needs == std::vector<std::string>{"draft"});
  CHECK(g.steps[1].target.empty());
  CHECK(g.steps[1].argv.is_null());
}

TEST_CASE("a minimal wait step parses with the defaults", "[persistence][graph][wait]") {
  auto w = wait_of(json::parse(R"({"steps": {"a": {"wait": {"signal": "go"}}}})"), "a");
  CHECK(w.signal == "go");
  CHECK(w.prompt.empty());
  CHECK(w.schema.is_null());
  CHECK(w.options == json::object());
  CHECK_FALSE(w.timeout);
  CHECK(w.on_timeout == wait_timeout::fail);
  CHECK(w.default_value.is_null());
  CHECK(w.approvers.empty());
}

TEST_CASE("a wait step with a timeout that fails needs no default", "[persistence][graph][wait]") {
  for (auto on_timeout : {json(nullptr), json("fail")}) {
    auto w = wait_of(approve_with(example_wait({{"on_timeout", on_timeout},
                                                {"default", nullptr},
                                                {"timeout", "90m"}})));
    CHECK(w.on_timeout == wait_timeout::fail);
    CHECK(*w.timeout == millis{90 * 60'000});
    CHECK(w.default_value.is_null());
  }
}

TEST_CASE("needs when and after are allowed on a wait step", "[persistence][graph][wait]") {
  auto doc = approve_with({{"signal", "go"}}, {{"when", "${steps.draft.ok}"},
                                              {"after", "any_completed"}});
  auto result = parse_ok(doc);
  auto& s = *result.value->find("approve");
  CHECK(s.when == "${steps.draft.ok}");
  CHECK(s.after == after_rule::any_completed);
}

TEST_CASE("wait names the kind and its timeout rules read and print as in the graph",
          "[persistence][graph][wait]") {
  CHECK(std::string{to_string(step_kind::wait)} == "wait");
  CHECK(std::string{to_string(wait_timeout::fail)} == "fail");
  CHECK(std::string{to_string(wait_timeout::use_default)} == "default");
  auto x = wait_timeout::fail;
  CHECK(from_string("default", x));
  CHECK(x == wait_timeout::use_default);
  CHECK(from_string("fail", x));
  CHECK(x == wait_timeout::fail);
  CHECK_FALSE(from_string("use_default", x));
  CHECK_FALSE(from_string("", x));
}

// -- the wait object ----------------------------------------------------------------

TEST_CASE("a wait that is not an object is rejected at the wait", "[persistence][graph][wait]") {
  for (auto wait : {json("approval"), json(nullptr), json::array({"approval"})})
    CHECK(rejected_at(approve_with(wait), "/steps/approve/wait", "expected an object"));
}

TEST_CASE("a wait step with a second kind is rejected at the step", "[persistence][graph][wait]") {
  auto doc = approve_with({{"signal", "go"}}, {{"fn", "noop"}});
  CHECK(rejected_at(doc, "/steps/approve", "expected exactly one"));
}

TEST_CASE("an unknown key in a wait is rejected at the key with the known keys and a suggestion",
          "[persistence][graph][wait]") {
  auto doc = approve_with({{"signal", "go"}, {"aprovers", {"bob"}}});
  CHECK(rejected_at(doc, "/steps/approve/wait/aprovers", "unknown key 'aprovers'"));
  CHECK(rejected_at(doc, "/steps/approve/wait/aprovers",
                    "signal, prompt, schema, options, timeout, on_timeout, default, approvers"));
  CHECK(rejected_at(doc, "/steps/approve/wait/aprovers", "did you mean 'approvers'?"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"a/b", 1}}), "/steps/approve/wait/a~1b",
                    "unknown key 'a/b'"));
}

// -- signal -------------------------------------------------------------------------

TEST_CASE("a wait without a signal is rejected at the wait", "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"prompt", "ok?"}}), "/steps/approve/wait", "missing 'signal'"));
}

TEST_CASE("a signal that is not 1 to 64 of A-Z a-z 0-9 _ . - is rejected at the signal",
          "[persistence][graph][wait]") {
  for (auto signal : {json(42), json(""), json(std::string(65, 's')), json("a/b"), json("a b"),
                      json("appr\u00f6val"), json("${steps.draft.json}")}) {
    INFO("signal " << signal.dump());
    CHECK(rejected_at(approve_with({{"signal", signal}}), "/steps/approve/wait/signal",
                      "expected a signal name (1 to 64 characters of A-Z a-z 0-9 _ . -)"));
  }
  CHECK(rejected_at(approve_with({{"signal", ""}}), "/steps/approve/wait/signal",
                    "got an empty string"));
  CHECK(rejected_at(approve_with({{"signal", "a/b"}}), "/steps/approve/wait/signal",
                    "got \"a/b\""));
  for (auto signal : {std::string(64, 's'), std::string{"review.v2_final-OK"}, std::string{"9"}})
    CHECK(wait_of(approve_with({{"signal", signal}})).signal == signal);
}

// -- prompt -------------------------------------------------------------------------

TEST_CASE("a prompt that is not a string is rejected at the prompt", "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"prompt", {{"text", "ok?"}}}}),
                    "/steps/approve/wait/prompt", "expected a string, got object"));
}

TEST_CASE("a prompt reference to a step the wait step does not need is rejected at the prompt",
          "[persistence][graph][wait]") {
  auto doc = approve_with({{"signal", "go"}, {"prompt", "Publish ${steps.other.json.title}?"}});
  doc["steps"]["other"] = {{"fn", "echo"}};
  CHECK(rejected_at(doc, "/steps/approve/wait/prompt",
                    "step 'other' is not upstream of 'approve' (add it to needs)"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"prompt", "${steps.nope.out}"}}),
                    "/steps/approve/wait/prompt", "unknown step 'nope'"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"prompt", "${inputs.topic}"}}),
                    "/steps/approve/wait/prompt", "unknown input 'topic'"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"prompt", "${steps.draft"}}),
                    "/steps/approve/wait/prompt"));
}

TEST_CASE("a prompt may name a step the wait step needs transitively or an input",
          "[persistence][graph][wait]") {
  auto doc = approve_with({{"signal", "go"},
                           {"prompt", "${inputs.topic}: ${steps.first.out} ${steps.draft}"}});
  doc["inputs"] = {"topic"};
  doc["steps"]["first"] = {{"fn", "echo"}};
  doc["steps"]["draft"]["needs"] = {"first"};
  CHECK(wait_of(doc).prompt == "${inputs.topic}: ${steps.first.out} ${steps.draft}");
}

// -- schema -------------------------------------------------------------------------

TEST_CASE("a schema that check_schema refuses is rejected at the schema's own path",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"schema", {{"type", "strnig"}}}}),
                    "/steps/approve/wait/schema/type", "unknown type 'strnig'"));
  CHECK(rejected_at(approve_with({{"signal", "go"},
                                  {"schema", {{"properties", {{"a/b", {{"maxLenght", 3}}}}}}}}),
                    "/steps/approve/wait/schema/properties/a~1b/maxLenght",
                    "unknown keyword 'maxLenght'"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"schema", "boolean"}}),
                    "/steps/approve/wait/schema", "a schema must be an object"));
}

TEST_CASE("options and a default are not checked against a schema that is refused",
          "[persistence][graph][wait]") {
  auto wait = example_wait(json::object());
  wait["schema"] = {{"type", "bool"}};
  wait["options"] = {{"Yes", "yes"}};
  wait["default"] = 0;
  auto errors = errors_of(approve_with(wait));
  INFO(render(errors));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].path == "/steps/approve/wait/schema/type");
}

// -- options ------------------------------------------------------------------------

TEST_CASE("options that are not an object of at most 20 entries are rejected at the options",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"options", {"Approve", "Reject"}}}),
                    "/steps/approve/wait/options", "expected an object of button label"));
  json many = json::object();
  for (int i = 0; i < 21; ++i)
    many["option " + std::to_string(i)] = i;
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"options", many}}),
                    "/steps/approve/wait/options", "at most 20 options, got 21"));
  many.erase("option 0");
  CHECK(wait_of(approve_with({{"signal", "go"}, {"options", many}})).options.size() == 20);
}

TEST_CASE("an option label that is empty or over 64 characters is rejected at the option",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"options", {{"", 1}}}}),
                    "/steps/approve/wait/options/", "must not be empty"));
  auto label = std::string(65, 'x');
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"options", {{label, 1}}}}),
                    "/steps/approve/wait/options/" + label,
                    "at most 64 characters, this one has 65"));
  // Characters, not bytes: 64 two-byte letters are fine.
  std::string umlauts;
  for (int i = 0; i < 64; ++i)
    umlauts += "\u00e4";
  CHECK(wait_of(approve_with({{"signal", "go"}, {"options", {{umlauts, 1}}}})).options.size()
        == 1);
}

TEST_CASE("an option value the schema refuses is rejected at the option's path",
          "[persistence][graph][wait]") {
  auto doc = approve_with(example_wait({{"options", {{"Approve", {{"approved", "yes"}}},
                                                     {"Yes/No", {{"note", "?"}}}}}}));
  CHECK(rejected_at(doc, "/steps/approve/wait/options/Approve/approved",
                    "expected a boolean, got a string"));
  CHECK(rejected_at(doc, "/steps/approve/wait/options/Yes~1No",
                    "missing required property \"approved\""));
  // Without a schema any value goes.
  CHECK(wait_of(approve_with({{"signal", "go"}, {"options", {{"A", "x"}, {"B", {1, 2}}}}}))
          .options.size()
        == 2);
}

// -- timeout, on_timeout, default ------------------------------------------------------

TEST_CASE("a wait timeout that is not a duration longer than 0 is rejected at the timeout",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"timeout", "soon"}}),
                    "/steps/approve/wait/timeout", "soon"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"timeout", 60}}),
                    "/steps/approve/wait/timeout", "expected a duration"));
  for (auto zero : {"0s", "0ms", "0h"})
    CHECK(rejected_at(approve_with({{"signal", "go"}, {"timeout", zero}}),
                      "/steps/approve/wait/timeout",
                      std::string{"expected a duration longer than 0, got \""} + zero + "\""));
  CHECK(*wait_of(approve_with({{"signal", "go"}, {"timeout", "1ms"}})).timeout == millis{1});
}

TEST_CASE("a wait timeout longer than the graph's deadline is rejected at the timeout",
          "[persistence][graph][wait]") {
  auto doc = approve_with({{"signal", "go"}, {"timeout", "2h"}});
  doc["limits"] = {{"deadline", "90m"}};
  CHECK(rejected_at(doc, "/steps/approve/wait/timeout",
                    "wait.timeout 2h is longer than the graph's limits.deadline (90m): waiting "
                    "time counts toward the deadline"));
  doc["steps"]["approve"]["wait"]["timeout"] = "90m";
  CHECK(*wait_of(doc).timeout == millis{90 * 60'000});
}

TEST_CASE("on_timeout that is not fail or default is rejected at on_timeout",
          "[persistence][graph][wait]") {
  for (auto on_timeout : {json("skip"), json("use_default"), json(true), json(nullptr)}) {
    INFO("on_timeout " << on_timeout.dump());
    auto wait = example_wait(json::object());
    wait["on_timeout"] = on_timeout;
    CHECK(rejected_at(approve_with(wait), "/steps/approve/wait/on_timeout",
                      "expected \"fail\" or \"default\""));
  }
}

TEST_CASE("on_timeout default without a timeout is rejected at on_timeout",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with(example_wait({{"timeout", nullptr}})),
                    "/steps/approve/wait/on_timeout",
                    "\"on_timeout\": \"default\" needs a 'timeout'"));
}

TEST_CASE("on_timeout default without a default is rejected at the wait",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with(example_wait({{"default", nullptr}})), "/steps/approve/wait",
                    "missing 'default'"));
}

TEST_CASE("a default without on_timeout default is rejected at the default",
          "[persistence][graph][wait]") {
  for (auto on_timeout : {json(nullptr), json("fail")})
    CHECK(rejected_at(approve_with(example_wait({{"on_timeout", on_timeout}})),
                      "/steps/approve/wait/default",
                      "'default' applies only with \"on_timeout\": \"default\""));
}

TEST_CASE("a default the schema refuses is rejected at the default's path",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with(example_wait({{"default", {{"approved", 0}}}})),
                    "/steps/approve/wait/default/approved", "expected a boolean, got an integer"));
  auto wait = example_wait(json::object());
  wait["default"] = {{"note", "late"}};
  CHECK(rejected_at(approve_with(wait), "/steps/approve/wait/default",
                    "missing required property \"approved\""));
  // Without a schema any default goes, null too.
  auto w = wait_of(approve_with({{"signal", "go"}, {"timeout", "1h"}, {"on_timeout", "default"},
                                 {"default", json(nullptr)}}));
  CHECK(w.on_timeout == wait_timeout::use_default);
  CHECK(w.default_value.is_null());
}

// -- approvers ----------------------------------------------------------------------

TEST_CASE("approvers that are not distinct non-empty user names are rejected at the entry",
          "[persistence][graph][wait]") {
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"approvers", "alice"}}),
                    "/steps/approve/wait/approvers", "expected an array of user names"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"approvers", {"alice", 7}}}),
                    "/steps/approve/wait/approvers/1", "expected a user name"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"approvers", {""}}}),
                    "/steps/approve/wait/approvers/0", "got an empty string"));
  CHECK(rejected_at(approve_with({{"signal", "go"}, {"approvers", {"alice", "bob", "alice"}}}),
                    "/steps/approve/wait/approvers/2", "'alice' is listed twice"));
  CHECK(wait_of(approve_with({{"signal", "go"}, {"approvers", {"bob", "alice"}}})).approvers
        == std::vector<std::string>{"bob", "alice"});
  CHECK(wait_of(approve_with({{"signal", "go"}, {"approvers", json::array()}})).approvers.empty());
}

// -- step fields --------------------------------------------------------------------

TEST_CASE("a wait step takes none of the fields of a step that runs something",
          "[persistence][graph][wait]") {
  json fields = {{"timeout", "1h"},     {"retries", 2}, {"retry_delay", "1s"},
                 {"cost", 1},           {"grace", {{"interrupt", "1s"}}},
                 {"with", {{"x", "${steps.nope.out}"}}},
                 {"env", {{"A", "b"}}}, {"stdin", "x"}, {"cwd", "/tmp"},
                 {"message", "hi"}};
  for (auto& [field, value] : fields.items()) {
    INFO("field " << field);
    auto errors = errors_of(approve_with({{"signal", "go"}}, {{field, value}}));
    INFO(render(errors));
    // One error, at the field: its value is not read.
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].path == "/steps/approve/" + field);
    CHECK(errors[0].message.find("a wait step takes no '" + field + "'") != std::string::npos);
  }
  CHECK(rejected_at(approve_with({{"signal", "go"}}, {{"timeout", "1h"}}),
                    "/steps/approve/timeout",
                    "a wait step takes no 'timeout' of its own: its deadline is wait.timeout"));
}

// -- stored graphs ------------------------------------------------------------------

TEST_CASE("a stored graph with a wait step loads back into the same wait_def",
          "[persistence][graph][wait]") {
  for (auto doc : {approval_example(), approve_with({{"signal", "go"}}),
                   approve_with(example_wait({{"on_timeout", "fail"}, {"default", nullptr},
                                              {"schema", nullptr}, {"approvers", nullptr}}))}) {
    INFO("document: " << doc.dump());
    auto parsed = parse_ok(doc);
    auto stored = round_trip(*parsed.value);
    auto loaded = load_stored_graph(stored.document, stored.base_dir, stored.files);
    INFO("loaded:\n" << render(loaded.errors));
    REQUIRE(loaded);
    auto& a = *parsed.value->find("approve");
    auto& b = *loaded.value->find("approve");
    CHECK(b.kind == step_kind::wait);
    CHECK(b.needs == a.needs);
    REQUIRE(a.wait != nullptr);
    REQUIRE(b.wait != nullptr);
    check_same(*a.wait, *b.wait);
    CHECK(loaded.value->find("draft")->wait == nullptr);
  }
}

TEST_CASE("a stored wait step that validation would not have produced is an error not a crash",
          "[persistence][graph][wait]") {
  for (auto wait : {json("go"), json{{"signal", 1}}, json{{"signal", "go"}, {"timeout", "soon"}},
                    json{{"signal", "go"}, {"on_timeout", "later"}},
                    json{{"signal", "go"}, {"approvers", json::array({{{"name", "bob"}}})}},
                    json{{"signal", "go"}, {"signl", "go"}}}) {
    INFO("wait " << wait.dump());
    auto loaded = load_stored_graph(approve_with(wait), "/tmp", json::object());
    CHECK_FALSE(loaded);
    REQUIRE(loaded.errors.size() == 1);
    CHECK(loaded.errors[0].path.empty());
    CHECK(loaded.errors[0].message.find("the stored graph cannot be loaded") == 0);
  }
}
