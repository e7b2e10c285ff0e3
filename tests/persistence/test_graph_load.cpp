// Tests of load_stored_graph: a graph stored after validation loads into the
// same model that parsing and validating the stored form again gives. Graphs
// go through a real store (LMDB in a temporary home) the way an execution
// stores them: its document, folder and the files it included.

#include "persistence/graph.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "persistence/error.hpp"
#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;

namespace fs = std::filesystem;

namespace {

// -- helpers -------------------------------------------------------------------

fs::path fixtures_dir() {
  return fs::path{CANOPY_SOURCE_DIR} / "tests" / "fixtures";
}

/// A store in a temporary home; `round_trip` stores a parsed graph as an
/// execution stores it and reads it back.
struct stored_home {
  test::temp_dir dir;
  std::shared_ptr<store> db;
  int next = 0;

  stored_home() {
    store_options opts;
    opts.home = dir.path;
    opts.initial_map_bytes = 256u << 20;
    auto opened = store::open(opts);
    REQUIRE(opened);
    db = std::move(*opened);
  }

  stored_graph round_trip(const graph& g) {
    auto id = "e" + std::to_string(++next);
    execution_record rec;
    rec.id = id;
    rec.root_id = id;
    rec.graph = g.name;
    rec.created_at = now_ms();
    write_batch b;
    b.executions.push_back(rec);
    b.graphs.emplace_back(id, stored_graph{g.document, g.base_dir, json(g.files)});
    auto err = db->commit(b);
    INFO("commit: " << message_of(err));
    REQUIRE_FALSE(err);
    auto back = db->graph(id);
    REQUIRE(back);
    return std::move(*back);
  }
};

/// Checks that `a` and `b` are the same model, recursively through child
/// graphs; `where` names the graph in failure messages.
void check_same(const graph& a, const graph& b, const std::string& where) {
  INFO("graph " << where);
  CHECK(a.name == b.name);
  CHECK(a.inputs == b.inputs);
  CHECK(a.limits.max_depth == b.limits.max_depth);
  CHECK(a.limits.max_steps == b.limits.max_steps);
  CHECK(a.limits.budget == b.limits.budget);
  CHECK(a.limits.deadline == b.limits.deadline);
  CHECK(a.index == b.index);
  CHECK(a.outputs == b.outputs);
  CHECK(a.base_dir == b.base_dir);
  CHECK(a.document == b.document);
  CHECK(a.files == b.files);
  REQUIRE(a.steps.size() == b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    auto& x = a.steps[i];
    auto& y = b.steps[i];
    INFO("step #" << i << " '" << x.id << "'");
    REQUIRE(x.id == y.id);
    CHECK(x.kind == y.kind);
    CHECK(x.argv == y.argv);
    CHECK(x.target == y.target);
    CHECK(x.needs == y.needs);
    CHECK(x.when == y.when);
    CHECK(x.after == y.after);
    CHECK(x.with == y.with);
    CHECK(x.message == y.message);
    CHECK(x.env == y.env);
    CHECK(x.stdin_data == y.stdin_data);
    CHECK(x.cwd == y.cwd);
    CHECK(x.timeout == y.timeout);
    CHECK(x.retries == y.retries);
    CHECK(x.retry_delay == y.retry_delay);
    CHECK(x.cost == y.cost);
    CHECK(x.grace.interrupt == y.grace.interrupt);
    CHECK(x.grace.terminate == y.grace.terminate);
    CHECK(x.grace_set == y.grace_set);
    REQUIRE((x.child == nullptr) == (y.child == nullptr));
    if (x.child)
      check_same(*x.child, *y.child, where + "/" + x.id);
  }
}

/// Stores `parsed`, then checks that loading it gives the model that
/// validating the stored form again gives, and the model first parsed.
void check_loads_the_same(stored_home& home, const parse_result& parsed,
                          const std::string& where, const parse_options& opts = {}) {
  INFO(where << ":\n" << render(parsed.errors));
  REQUIRE(parsed);
  auto stored = home.round_trip(*parsed.value);
  auto validated = parse_graph_bundle(stored.document, stored.base_dir, stored.files, opts);
  INFO("validated again:\n" << render(validated.errors));
  REQUIRE(validated);
  auto loaded = load_stored_graph(stored.document, stored.base_dir, stored.files, opts);
  INFO("loaded:\n" << render(loaded.errors));
  REQUIRE(loaded);
  check_same(*validated.value, *loaded.value, where);
  check_same(*parsed.value, *loaded.value, where + " (as first parsed)");
}

/// Options under which every graph in these tests validates.
parse_options permissive() {
  parse_options opts;
  opts.any_tool = true;
  opts.fns = {"embed"};
  return opts;
}

/// Every kind and field, a file included by two steps, an inline child that
/// includes a file, a registered graph, and ids in an order the sort changes.
json every_feature(const test::temp_dir& dir) {
  dir.write("parts/leaf.json", json{{"inputs", {"x"}},
                                    {"steps", {{"echo", {{"fn", "echo"}, {"with", {{"x", "${inputs.x}"}}}}}}},
                                    {"outputs", {{"x", "${steps.echo.x}"}}}}
                                 .dump());
  return json::parse(R"({
    "name": "everything",
    "inputs": ["topic", "n"],
    "limits": {"max_depth": 5, "max_steps": 500, "budget": 12.5, "deadline": "90s"},
    "steps": {
      "z_first": {"run": ["sh", "-c", "echo $T"], "env": {"T": "${inputs.topic}", "U": "u"},
                  "stdin": "in ${inputs.n}", "cwd": "sub/dir", "timeout": "2s",
                  "retries": 3, "retry_delay": "250ms", "cost": 1.5,
                  "grace": {"interrupt": "3s", "terminate": "1500ms"}},
      "a_tool": {"tool": "writer", "with": {"p": "${steps.z_first.stdout}"},
                 "needs": ["z_first", "z_first"], "grace": {}, "after": "any_completed",
                 "when": "${steps.z_first.json.ok}"},
      "b_plan_tool": {"plan": "planner", "needs": ["a_tool"],
                      "when": {"not": {"in": ["${steps.a_tool.json.k}", [1, "x", null]]}}},
      "c_plan_argv": {"plan": ["./plan.sh", "${steps.a_tool.stdout}"], "needs": ["a_tool", "z_first"]},
      "d_agent": {"agent": "helper", "message": {"text": "${steps.z_first.stdout}", "k": [1, 2]},
                  "needs": ["z_first"]},
      "e_fn": {"fn": "embed", "with": {"deep": {"list": ["${inputs.topic}", 3, null]}}},
      "f_file": {"graph": "parts/leaf.json", "with": {"x": "${steps.e_fn}"}, "needs": ["e_fn"]},
      "g_file_again": {"graph": "./parts/../parts/leaf.json", "with": {"x": 1}},
      "h_registered": {"graph": "review", "with": {"text": "t"}, "needs": ["f_file", "g_file_again"]},
      "i_inline": {"graph": {"name": "inner", "inputs": ["y"],
                             "limits": {"max_steps": 10},
                             "steps": {"leaf": {"graph": "parts/leaf.json", "with": {"x": "${inputs.y}"}},
                                       "after": {"fn": "noop", "needs": ["leaf"]}},
                             "outputs": {"y": "${steps.leaf.x}"}},
                   "with": {"y": "${steps.h_registered}"}, "needs": ["h_registered"]},
      "j_last": {"fn": "sleep", "with": {"ms": 1}, "needs": ["i_inline", "d_agent", "c_plan_argv",
                                                             "b_plan_tool"]}
    },
    "outputs": {"all": "${steps.j_last}", "text": "topic ${inputs.topic}"}
  })");
}

} // namespace

// -- the same model ------------------------------------------------------------

TEST_CASE("every valid fixture loads from the store into the model validation gives",
          "[persistence][graph]") {
  stored_home home;
  size_t n = 0;
  for (auto& f : fs::directory_iterator{fixtures_dir() / "valid"}) {
    if (f.path().extension() != ".json")
      continue;
    ++n;
    check_loads_the_same(home, parse_graph_file(f.path().string()), f.path().string());
  }
  CHECK(n >= 3);
}

TEST_CASE("a graph with every kind, field and kind of child loads into the model validation "
          "gives",
          "[persistence][graph]") {
  stored_home home;
  auto doc = every_feature(home.dir);
  auto opts = permissive();
  auto parsed = parse_graph(doc, home.dir.path, opts);
  check_loads_the_same(home, parsed, "every feature", opts);
  // The file included twice (and once more below the inline child) is one
  // file of the graph, one shared model.
  auto loaded = [&] {
    auto stored = home.round_trip(*parsed.value);
    return load_stored_graph(stored.document, stored.base_dir, stored.files);
  }();
  REQUIRE(loaded);
  auto& g = *loaded.value;
  CHECK(g.files.size() == 1);
  CHECK(g.find("f_file")->child == g.find("g_file_again")->child);
  CHECK(g.find("i_inline")->child->files.size() == 1);
  CHECK(g.find("h_registered")->child == nullptr);
  CHECK(g.find("h_registered")->target == "review");
  CHECK(g.steps.front().id == "e_fn");
  CHECK(g.steps.back().id == "j_last");
}

TEST_CASE("a stored 10,000-step graph loads into the model validation gives",
          "[persistence][graph]") {
  // Layers of 100 steps, each needing two steps of the layer above; ids
  // whose order is not a topological one.
  json steps = json::object();
  for (int layer = 0; layer < 100; ++layer)
    for (int i = 0; i < 100; ++i) {
      json step = {{"fn", "echo"}, {"with", {{"i", i}}}};
      if (layer > 0) {
        auto up = [&](int k) {
          return "s" + std::to_string(99 - (layer - 1)) + "_" + std::to_string(k);
        };
        step["needs"] = {up(i), up((i * 7) % 100)};
        step["with"]["from"] = "${steps." + up(i) + ".i}";
      }
      steps["s" + std::to_string(99 - layer) + "_" + std::to_string(i)] = step;
    }
  stored_home home;
  auto parsed = parse_graph(json{{"name", "big"}, {"steps", steps}}, "/tmp");
  check_loads_the_same(home, parsed, "10k steps");
  REQUIRE(parsed.value->steps.size() == 10000);
  CHECK(parsed.value->steps.front().id == "s99_0");
}

// -- what it does not check, and what it does ----------------------------------

TEST_CASE("a stored graph naming a tool or function this node lacks loads and keeps the names",
          "[persistence][graph]") {
  stored_home home;
  parse_options then;
  then.tools = {"gone"};
  then.fns = {"retired"};
  auto parsed = parse_graph(json::parse(R"({"steps": {
    "t": {"tool": "gone"}, "p": {"plan": "gone"}, "f": {"fn": "retired"}}})"), "/tmp", then);
  REQUIRE(parsed);
  auto stored = home.round_trip(*parsed.value);
  parse_options now; // neither the tool nor the function is registered
  auto revalidated = parse_graph_bundle(stored.document, stored.base_dir, stored.files, now);
  CHECK_FALSE(revalidated);
  auto loaded = load_stored_graph(stored.document, stored.base_dir, stored.files, now);
  INFO(render(loaded.errors));
  REQUIRE(loaded);
  CHECK(loaded.value->find("t")->target == "gone");
  CHECK(loaded.value->find("p")->target == "gone");
  CHECK(loaded.value->find("f")->target == "retired");
}

TEST_CASE("a stored graph with inline commands is refused on a node that does not allow them",
          "[persistence][graph]") {
  stored_home home;
  test::temp_dir files;
  files.write("child.json", R"({"steps": {"deep": {"plan": ["./plan.sh"]}}})");
  auto parsed = parse_graph(json::parse(R"({"steps": {
    "r": {"run": ["true"]},
    "c": {"graph": {"steps": {"inner": {"run": ["true"]}, "named": {"plan": "planner"}}}},
    "f": {"graph": "child.json"}}})"), files.path, [] {
      parse_options o;
      o.any_tool = true;
      return o;
    }());
  REQUIRE(parsed);
  auto stored = home.round_trip(*parsed.value);
  parse_options refusing;
  refusing.allow_inline = false;
  auto expected = parse_graph_bundle(stored.document, stored.base_dir, stored.files, [] {
    parse_options o;
    o.allow_inline = false;
    o.any_tool = true;
    return o;
  }());
  auto loaded = load_stored_graph(stored.document, stored.base_dir, stored.files, refusing);
  CHECK_FALSE(loaded);
  INFO(render(loaded.errors));
  REQUIRE(loaded.errors.size() == 3);
  REQUIRE(expected.errors.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(loaded.errors[i].code == "inline_commands_disabled");
    CHECK(loaded.errors[i].path == expected.errors[i].path);
    CHECK(loaded.errors[i].message == expected.errors[i].message);
  }
}

TEST_CASE("a stored graph that validation would not have produced is an error, not a crash",
          "[persistence][graph]") {
  auto fails = [](const json& doc, const json& files, const std::string& part) {
    auto loaded = load_stored_graph(doc, "/tmp", files);
    INFO(doc.dump() << "\n" << render(loaded.errors));
    CHECK_FALSE(loaded);
    REQUIRE(loaded.errors.size() == 1);
    CHECK(loaded.errors[0].path.empty());
    CHECK_THAT(loaded.errors[0].message, Catch::Contains(part));
  };
  fails(json::parse(R"({"steps": {"a": {"fn": "noop", "needs": ["b"]}}})"), json::object(),
        "unknown step 'b'");
  fails(json::parse(R"({"steps": {"a": {"fn": "noop", "needs": ["b"]},
                                 "b": {"fn": "noop", "needs": ["a"]}}})"),
        json::object(), "cycle");
  fails(json::parse(R"({"steps": {"a": {"graph": "gone.json"}}})"), json::object(),
        "'/tmp/gone.json' is not part of the stored graph");
  fails(json::parse(R"({"steps": {"a": {"fn": 7}}})"), json::object(), "cannot be loaded");
  fails(json::parse(R"({"steps": {"a": {"fn": "noop", "timeout": "soon"}}})"), json::object(),
        "cannot be loaded");
  fails(json::array(), json::object(), "not an object");
  fails(json::object(), json::object(), "cannot be loaded");
}
