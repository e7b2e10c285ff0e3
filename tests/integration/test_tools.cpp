// Tests of `tool` steps and `plan` steps naming a tool, through the library
// (runtime::open with runtime_options::tools): real actor system, real LMDB in
// a temporary home, real subprocesses. Concurrency is proved by what the
// subprocesses themselves record (a lock folder, nanosecond timestamps, a
// rendezvous through files); the test waits on events, never on sleeps.

#include "runtime/node/runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "persistence/error.hpp"
#include "persistence/tools.hpp"
#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

constexpr millis generous{60'000};

template <class T>
T get(caf::expected<T> x) {
  INFO("error: " << (x ? std::string{} : message_of(x.error())));
  REQUIRE(x);
  return std::move(*x);
}

long elapsed_ms(clock_type::time_point since) {
  return static_cast<long>(
    std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - since).count());
}

/// Parses a `tools` object with the real parser; the test fails on any error.
tool_table tools_of(const json& tools) {
  std::vector<graph_error> errors;
  auto table = parse_tools(tools, "/tools", errors);
  INFO("tools: " << tools.dump() << "\nerrors:\n" << render(errors));
  REQUIRE(errors.empty());
  return table;
}

/// A runtime with `tools` in a fresh home. The runtime goes before its folder.
struct node {
  test::temp_dir dir;
  std::unique_ptr<runtime> rt;

  explicit node(const json& tools, size_t max_parallel = 4, bool allow_inline = true) {
    runtime_options opts;
    opts.home = dir.path + "/home";
    opts.max_parallel = max_parallel;
    opts.tools = tools_of(tools);
    opts.allow_inline_commands = allow_inline;
    rt = get(runtime::open(opts));
  }

  std::shared_ptr<const graph> parse(const json& doc) const {
    return parse(doc, rt->graph_options());
  }

  std::shared_ptr<const graph> parse(const json& doc, const parse_options& opts) const {
    auto result = parse_graph(doc, dir.path, opts);
    INFO("graph: " << doc.dump() << "\nerrors:\n" << render(result.errors));
    REQUIRE(result);
    return result.value;
  }

  execution_handle start(const json& doc, json inputs = json::object()) {
    return get(rt->start(parse(doc), std::move(inputs)));
  }

  execution_record finish(const execution_handle& h) const {
    REQUIRE(h.wait_for(generous));
    return get(h.status());
  }

  std::map<std::string, step_record> steps(const std::string& id) const {
    std::map<std::string, step_record> out;
    for (auto& s : get(rt->db()->steps(id)))
      out[s.step] = s;
    return out;
  }

  std::vector<event_record> events(const std::string& root) const {
    return test::checked_tree_events(*rt->db(), root);
  }
};

/// Collects the events a subscription delivers (on an actor thread).
struct collector {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<event_record> events;

  /// Orders the callbacks' writes before the destruction for ThreadSanitizer
  /// (the subscription's cancel waits for them through CAF's mailbox).
  ~collector() { std::lock_guard<std::mutex> guard{mtx}; }

  std::function<void(const event_record&)> callback() {
    return [this](const event_record& e) {
      std::lock_guard<std::mutex> guard{mtx};
      events.push_back(e);
      cv.notify_all();
    };
  }

  template <class Pred>
  bool wait_for(Pred pred, millis timeout = generous) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, timeout,
                       [&] { return std::any_of(events.begin(), events.end(), pred); });
  }
};

auto is_event(const std::string& type, const std::string& step = {}) {
  return [=](const event_record& e) {
    return to_string(e.type) == type && (step.empty() || e.step == step);
  };
}

auto is_output(const std::string& step, const std::string& line) {
  return [=](const event_record& e) {
    return e.type == event_type::step_output && e.step == step && e.data.is_object()
           && e.data.value("line", "") == line;
  };
}

std::vector<std::string> types_of(const std::vector<event_record>& xs, const std::string& step) {
  std::vector<std::string> out;
  for (auto& e : xs)
    if (e.step == step && e.type != event_type::step_output)
      out.push_back(to_string(e.type));
  return out;
}

size_t select_count(const std::vector<event_record>& xs, const std::string& type) {
  return static_cast<size_t>(
    std::count_if(xs.begin(), xs.end(), [&](const event_record& e) { return to_string(e.type) == type; }));
}

/// Lines of a file.
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in{test::read_file(path)};
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(line);
  return out;
}

} // namespace

// -- argv templates ----------------------------------------------------------------------

TEST_CASE("a tool step's argv gets its with and inputs values", "[integration][tools]") {
  node n{json::parse(R"({
    "show": {"argv": ["sh", "-c", "printf '%s|%s|%s|%s|%s' \"$1\" \"$2\" \"$3\" \"$4\" \"$5\"",
                      "sh", "${with.text}", "${inputs.topic}", "${with.obj}", "n=${with.n}",
                      "lit-$${with.text}"]},
    "js": {"argv": ["sh", "-c", "printf '{\"v\": %s}' \"$1\"", "sh", "${with.n}"]}
  })")};
  auto h = n.start(json::parse(R"({"inputs": ["topic"], "steps": {
    "src": {"fn": "echo", "with": {"word": "hello world"}},
    "t": {"tool": "show", "needs": ["src"],
          "with": {"text": "${steps.src.word}", "obj": {"a": 1, "b": [true]}, "n": 5}},
    "j": {"tool": "js", "with": {"n": 5}}},
    "outputs": {"shown": "${steps.t.stdout}", "v": "${steps.j.json.v}"}})"),
                   json{{"topic", "actors"}});
  auto rec = n.finish(h);
  INFO(rec.error);
  REQUIRE(rec.status == execution_status::completed);
  auto steps = n.steps(h.id());
  auto& t = steps["t"];
  CHECK(t.status == step_status::completed);
  CHECK(t.attempt == 1);
  CHECK(t.result["exit_code"] == 0);
  CHECK(t.result["stdout"] == R"(hello world|actors|{"a":1,"b":[true]}|n=5|lit-${with.text})");
  CHECK(t.result["stderr"] == "");
  CHECK(t.result["json"].is_null());
  CHECK(t.pid > 0);
  CHECK(steps["j"].result["json"] == json{{"v", 5}});
  CHECK(rec.outputs["shown"] == t.result["stdout"]);
  CHECK(rec.outputs["v"] == 5);
  // The same life cycle as a `run` step.
  auto events = n.events(h.id());
  CHECK(types_of(events, "t")
        == std::vector<std::string>{"step.queued", "step.started", "step.completed"});
}

TEST_CASE("a tool step whose template names a missing key fails naming the reference",
          "[integration][tools]") {
  node n{json::parse(R"({"show": {"argv": ["echo", "${with.text}", "${inputs.nope}"]}})")};
  SECTION("a missing with key") {
    auto h = n.start(json::parse(R"({"steps": {"t": {"tool": "show", "with": {"other": 1}}}})"));
    auto rec = n.finish(h);
    CHECK(rec.status == execution_status::failed);
    CHECK(rec.reason == step_reason::step_failed);
    auto t = n.steps(h.id())["t"];
    CHECK(t.status == step_status::failed);
    REQUIRE(t.error.is_string());
    CHECK_THAT(t.error.get<std::string>(),
               Catch::Contains("tool 'show'") && Catch::Contains("${with.text}"));
  }
  SECTION("a missing input") {
    auto h = n.start(json::parse(R"({"steps": {"t": {"tool": "show", "with": {"text": 1}}}})"));
    auto rec = n.finish(h);
    CHECK(rec.status == execution_status::failed);
    auto t = n.steps(h.id())["t"];
    REQUIRE(t.error.is_string());
    CHECK_THAT(t.error.get<std::string>(), Catch::Contains("${inputs.nope}"));
  }
}

TEST_CASE("a tool or plan step naming a tool this node lacks fails with a clear error",
          "[integration][tools]") {
  node n{json::parse(R"({"show": {"argv": ["true"]}})")};
  // Validated elsewhere (e.g. on a node whose configuration had the tool).
  auto opts = n.rt->graph_options();
  opts.tools.insert("ghost");
  for (auto kind : {"tool", "plan"}) {
    INFO("kind " << kind);
    auto g = n.parse(json{{"steps", {{"a", {{kind, "ghost"}}}}}}, opts);
    auto h = get(n.rt->start(g, json::object()));
    auto rec = n.finish(h);
    CHECK(rec.status == execution_status::failed);
    auto a = n.steps(h.id())["a"];
    CHECK(a.status == step_status::failed);
    CHECK(a.error == "tool 'ghost' is not registered on this node");
  }
}

namespace {

/// The record of step `name` of execution `id`; the test fails without one.
step_record step_of(runtime& rt, const std::string& id, const std::string& name) {
  for (auto& s : get(rt.db()->steps(id)))
    if (s.step == name)
      return s;
  FAIL("no step " << name << " in " << id);
  return {};
}

/// Runs `doc` on a runtime over `home` with `tools` until its step `gate`
/// prints `ready`, stops it, and returns the stopped execution's id.
std::string stopped_at_gate(const std::string& home, const json& tools, const json& doc,
                            const json& inputs) {
  runtime_options opts;
  opts.home = home;
  opts.tools = tools_of(tools);
  auto rt = get(runtime::open(opts));
  auto parsed = parse_graph(doc, home, rt->graph_options());
  INFO(render(parsed.errors));
  REQUIRE(parsed);
  auto h = get(rt->start(parsed.value, inputs));
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  REQUIRE(seen->wait_for(is_output("gate", "ready")));
  h.stop();
  REQUIRE(h.wait_for(generous));
  CHECK(get(h.status()).status == execution_status::stopped);
  CHECK(step_of(*rt, h.id(), "gate").status == step_status::pending);
  return h.id();
}

const char* wait_go = "echo ready; while [ ! -e \"$1/go\" ]; do sleep 0.01; done; echo done";

} // namespace

TEST_CASE("a resumed execution whose tool this node no longer has fails that step naming the "
          "tool",
          "[integration][tools]") {
  // Resume does not validate the stored graph again: the tool check happens
  // when the step starts.
  test::temp_dir dir;
  auto home = dir.path + "/home";
  auto id = stopped_at_gate(
    home,
    json{{"gated", {{"argv", {"sh", "-c", wait_go, "sh", "${inputs.dir}"}},
                    {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}}},
    json{{"inputs", {"dir"}},
         {"steps", {{"first", {{"fn", "echo"}, {"with", {{"v", 1}}}}},
                    {"gate", {{"tool", "gated"}, {"needs", {"first"}}}}}}},
    json{{"dir", dir.path}});
  // The node's configuration lost the tool.
  runtime_options opts;
  opts.home = home;
  opts.tools = tools_of(json{{"other", {{"argv", {"true"}}}}});
  auto rt = get(runtime::open(opts));
  auto h = get(rt->resume(id));
  REQUIRE(h.wait_for(generous));
  auto rec = get(h.status());
  CHECK(rec.status == execution_status::failed);
  auto first = step_of(*rt, id, "first");
  CHECK(first.status == step_status::completed);
  CHECK(first.attempt == 1); // finished before the stop: never again
  auto gate = step_of(*rt, id, "gate");
  CHECK(gate.status == step_status::failed);
  CHECK(gate.error == "tool 'gated' is not registered on this node");
}

TEST_CASE("a stopped execution with a run step does not resume on a node that refuses inline "
          "commands",
          "[integration][tools]") {
  test::temp_dir dir;
  auto home = dir.path + "/home";
  auto id = stopped_at_gate(
    home, json::object(),
    json{{"inputs", {"dir"}},
         {"steps", {{"gate", {{"run", {"sh", "-c", wait_go, "sh", "${inputs.dir}"}},
                              {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}}}}},
    json{{"dir", dir.path}});
  runtime_options opts;
  opts.home = home;
  opts.allow_inline_commands = false;
  auto rt = get(runtime::open(opts));
  auto h = rt->resume(id);
  REQUIRE_FALSE(h);
  CHECK(is(h.error(), persistence_errc::invalid_graph));
  CHECK_THAT(message_of(h.error()),
             Catch::Contains("/steps/gate/run: inline commands are disabled on this node"));
  // Untouched: still stopped, resumable on a node that allows them.
  CHECK(get(rt->db()->execution(id)).status == execution_status::stopped);
  CHECK(step_of(*rt, id, "gate").status == step_status::pending);
}

// -- limits ---------------------------------------------------------------------------------

TEST_CASE("a tool's timeout applies unless the step sets its own", "[integration][tools]") {
  node n{json::parse(R"({"slow": {"argv": ["sh", "-c", "sleep 1; echo done"], "timeout": "200ms",
                                  "grace": {"interrupt": "100ms", "terminate": "100ms"}}})")};
  SECTION("the tool's default") {
    auto h = n.start(json::parse(R"({"steps": {"s": {"tool": "slow"}}})"));
    auto rec = n.finish(h);
    CHECK(rec.status == execution_status::failed);
    auto s = n.steps(h.id())["s"];
    CHECK(s.status == step_status::failed);
    CHECK(s.error == "timeout");
  }
  SECTION("the step's own timeout wins") {
    auto h = n.start(json::parse(R"({"steps": {"s": {"tool": "slow", "timeout": "60s"}}})"));
    auto rec = n.finish(h);
    INFO(rec.error);
    CHECK(rec.status == execution_status::completed);
    auto s = n.steps(h.id())["s"];
    CHECK(s.status == step_status::completed);
    CHECK(s.result["stdout"] == "done\n");
  }
}

TEST_CASE("a tool's grace applies unless the step sets its own", "[integration][tools]") {
  // Ignores SIGINT: a stop has to wait `grace.interrupt` before SIGTERM.
  auto stubborn = json::array({"sh", "-c", "trap '' INT; echo ready; exec sleep 120"});
  node n{json{{"quick", {{"argv", stubborn},
                         {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}},
              {"patient", {{"argv", stubborn},
                           {"grace", {{"interrupt", "60s"}, {"terminate", "60s"}}}}}}};
  // Stops a run of `step` once it is ready. @returns the grace its SIGINT
  // announced (`next_in_ms` of its `step.signalled`), after checking that the
  // stop ended it without a hang.
  auto grace_of_stop = [&](const json& step) {
    auto h = n.start(json{{"steps", {{"s", step}}}});
    auto seen = std::make_shared<collector>();
    auto sub = h.subscribe(seen->callback());
    REQUIRE(seen->wait_for(is_output("s", "ready")));
    auto asked = clock_type::now();
    h.stop();
    auto rec = n.finish(h);
    CHECK(elapsed_ms(asked) < 30000);
    CHECK(rec.status == execution_status::stopped);
    auto s = n.steps(h.id())["s"];
    CHECK(s.status == step_status::pending);
    REQUIRE(s.pid > 0);
    CHECK(test::process_gone(s.pid));
    json grace;
    for (auto& e : n.events(h.id()))
      if (e.type == event_type::step_signalled && e.data.is_object()
          && e.data.value("signal", "") == "SIGINT")
        grace = e.data.value("next_in_ms", json{});
    return grace;
  };
  SECTION("the tool's grace instead of the 10 s default") {
    CHECK(grace_of_stop(json{{"tool", "quick"}}) == 100);
  }
  SECTION("the step's grace instead of the tool's 60 s") {
    CHECK(grace_of_stop(json{{"tool", "patient"},
                             {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}})
          == 100);
  }
}

TEST_CASE("a tool with max_parallel 1 never overlaps its steps while another tool runs "
          "in parallel",
          "[integration][tools]") {
  // `serial` holds a lock folder for 200 ms of work and logs nanosecond
  // timestamps; a second holder at once would fail to create the folder.
  // `wide` steps meet: each waits (bounded) until the other one runs too.
  node n{json::parse(R"({
    "serial": {"max_parallel": 1, "argv": ["sh", "-c",
      "mkdir \"$1/lock\" || exit 3; echo \"$2 start $(date +%s%N)\" >> \"$1/serial.log\"; sleep 0.2; echo \"$2 end $(date +%s%N)\" >> \"$1/serial.log\"; rmdir \"$1/lock\"",
      "sh", "${inputs.dir}", "${with.me}"]},
    "wide": {"argv": ["sh", "-c",
      "touch \"$1/$2.here\"; i=0; while [ ! -e \"$1/$3.here\" ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 4; sleep 0.01; done; echo met",
      "sh", "${inputs.dir}", "${with.me}", "${with.other}"]}
  })"),
         4};
  auto h = n.start(json::parse(R"({"inputs": ["dir"], "steps": {
    "s1": {"tool": "serial", "with": {"me": "s1"}},
    "s2": {"tool": "serial", "with": {"me": "s2"}},
    "s3": {"tool": "serial", "with": {"me": "s3"}},
    "w1": {"tool": "wide", "with": {"me": "w1", "other": "w2"}},
    "w2": {"tool": "wide", "with": {"me": "w2", "other": "w1"}}}})"),
                   json{{"dir", n.dir.path}});
  auto rec = n.finish(h);
  INFO(rec.error);
  REQUIRE(rec.status == execution_status::completed);
  auto steps = n.steps(h.id());
  for (auto w : {"w1", "w2"})
    CHECK(steps[w].result["stdout"] == "met\n");
  // Three serial intervals, pairwise disjoint.
  auto log = lines_of(n.dir.path + "/serial.log");
  REQUIRE(log.size() == 6);
  std::map<std::string, std::pair<long long, long long>> spans;
  for (auto& line : log) {
    std::istringstream in{line};
    std::string who;
    std::string what;
    long long ns = 0;
    in >> who >> what >> ns;
    REQUIRE(ns > 0);
    (what == "start" ? spans[who].first : spans[who].second) = ns;
  }
  REQUIRE(spans.size() == 3);
  std::vector<std::pair<long long, long long>> sorted;
  for (auto& kv : spans) {
    CHECK(kv.second.first < kv.second.second);
    sorted.push_back(kv.second);
  }
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    CHECK(sorted[i - 1].second < sorted[i].first);
  // The store agrees: each serial step started running after the one before ended.
  std::vector<std::pair<int64_t, int64_t>> stored;
  for (auto s : {"s1", "s2", "s3"})
    stored.emplace_back(steps[s].started_at, steps[s].ended_at);
  std::sort(stored.begin(), stored.end());
  for (size_t i = 1; i < stored.size(); ++i)
    CHECK(stored[i - 1].second <= stored[i].first);
}

TEST_CASE("a stop of an execution whose tool step is queued behind the tool's slot releases "
          "everything and the execution resumes and completes",
          "[integration][tools]") {
  // One subprocess slot on the node, one for the tool: `r` runs, `g1` and
  // `g2` wait (the tool's slot, then the node's). Each waits for a `go` file.
  const char* wait_go = "echo ready; while [ ! -e \"$1/go\" ]; do sleep 0.01; done; echo done";
  node n{json{{"gated", {{"max_parallel", 1},
                         {"argv", {"sh", "-c", wait_go, "sh", "${inputs.dir}"}},
                         {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}}},
         1};
  auto doc = json{{"inputs", {"dir"}},
                  {"steps",
                   {{"r", {{"run", {"sh", "-c", wait_go, "sh", "${inputs.dir}"}},
                           {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}},
                    {"g1", {{"tool", "gated"}}},
                    {"g2", {{"tool", "gated"}}}}}};
  auto h = n.start(doc, json{{"dir", n.dir.path}});
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  REQUIRE(seen->wait_for(is_output("r", "ready")));
  REQUIRE(seen->wait_for(is_event("step.queued", "g1")));
  REQUIRE(seen->wait_for(is_event("step.queued", "g2")));
  h.stop();
  auto rec = n.finish(h);
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::requested);
  auto steps = n.steps(h.id());
  for (auto s : {"r", "g1", "g2"}) {
    INFO("step " << s);
    CHECK(steps[s].status == step_status::pending);
    CHECK(steps[s].reason == step_reason::requested);
  }
  CHECK(steps["g1"].pid == 0);
  CHECK(steps["g2"].pid == 0);
  REQUIRE(steps["r"].pid > 0);
  CHECK(test::process_gone(steps["r"].pid));
  sub.cancel();
  // Every slot is free again: the resumed execution runs all three steps
  // through the node's single slot and the tool's single slot.
  std::ofstream{n.dir.path + "/go"} << "go";
  auto r = get(n.rt->resume(h.id()));
  auto rec2 = n.finish(r);
  INFO(rec2.error);
  CHECK(rec2.status == execution_status::completed);
  auto after = n.steps(h.id());
  for (auto s : {"r", "g1", "g2"}) {
    INFO("step " << s);
    CHECK(after[s].status == step_status::completed);
    CHECK(after[s].attempt == 2); // attempts count on across the resume
    CHECK(after[s].result["stdout"] == "ready\ndone\n");
  }
}

TEST_CASE("a tool step that fails before its process starts gives its slots back for its "
          "retries",
          "[integration][tools]") {
  // One slot on the node and one for the tool: a retry could not start if
  // the failed attempt kept either.
  node n{json::parse(R"({"one": {"max_parallel": 1, "argv": ["echo", "${with.text}"]}})"), 1};
  auto h = n.start(json::parse(R"({"steps": {
    "bad": {"tool": "one", "retries": 2, "retry_delay": "10ms"}}})"));
  auto rec = n.finish(h);
  CHECK(rec.status == execution_status::failed);
  auto bad = n.steps(h.id())["bad"];
  CHECK(bad.status == step_status::failed);
  CHECK(bad.attempt == 3);
  CHECK(select_count(n.events(h.id()), "step.retry") == 2);
  // The slots are free for the next execution too.
  auto next = n.start(json::parse(R"({"steps": {"ok": {"tool": "one", "with": {"text": "hi"}}}})"));
  CHECK(n.finish(next).status == execution_status::completed);
}

// -- plan steps -----------------------------------------------------------------------------

TEST_CASE("a plan step naming a tool runs the tool and then the graph it printed",
          "[integration][tools]") {
  // The planner prints a graph that declares input `x`, bakes in the plan
  // step's `with.x` and itself runs a tool step. `$${` keeps the planned
  // graph's own references literal in the planner's argv.
  json planned = {
    {"inputs", {"x"}},
    {"steps",
     {{"e", {{"fn", "echo"}, {"with", {{"v", "${inputs.x}"}, {"baked", "@BAKED@"}}}}},
      {"t", {{"tool", "echoer"}, {"with", {{"s", "${inputs.x}"}}}}}}},
    {"outputs", {{"v", "${steps.e.v}"}, {"baked", "${steps.e.baked}"}, {"t", "${steps.t.stdout}"}}}};
  auto text = planned.dump();
  std::string templ;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "${") == 0)
      templ += '$';
    templ += text[i];
  }
  templ.replace(templ.find("@BAKED@"), 7, "${with.x}");
  // A node that refuses inline commands still runs tools and tool planners.
  node n{json{{"planner", {{"argv", {"printf", "%s", templ}}, {"max_parallel", 1}}},
              {"echoer", {{"argv", {"printf", "%s", "${with.s}"}}}}},
         4, false};
  auto refused = n.rt->parse_document(json::parse(R"({"steps": {"p": {"plan": ["./plan.sh"]}}})"));
  REQUIRE(refused.errors.size() == 1);
  CHECK(refused.errors[0].code == "inline_commands_disabled");
  auto h = n.start(json::parse(R"({"inputs": ["topic"], "steps": {
    "p": {"plan": "planner", "with": {"x": "${inputs.topic}"}}},
    "outputs": {"planned": "${steps.p}"}})"),
                   json{{"topic", "actors"}});
  auto rec = n.finish(h);
  INFO(rec.error);
  REQUIRE(rec.status == execution_status::completed);
  auto p = n.steps(h.id())["p"];
  CHECK(p.status == step_status::completed);
  CHECK(p.result == json{{"v", "actors"}, {"baked", "actors"}, {"t", "actors"}});
  CHECK(rec.outputs["planned"] == p.result);
  REQUIRE_FALSE(p.child_id.empty());
  auto child = get(n.rt->db()->execution(p.child_id));
  CHECK(child.parent_id == h.id());
  CHECK(child.depth == 1);
  CHECK(child.status == execution_status::completed);
  CHECK(child.inputs == json{{"x", "actors"}});
}
