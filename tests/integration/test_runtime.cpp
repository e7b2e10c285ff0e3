// Tests of the embedded library (runtime/node/runtime.hpp): real actor system, real
// LMDB store in a temporary home, real subprocesses. Every wait is an event
// wait with a generous deadline (handle.wait_for, a subscription, a future),
// never a sleep.

#include "runtime/node/runtime.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/execution/execution_actor.hpp"
#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"
#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;
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

/// A runtime in a fresh home. Members are destroyed in reverse order: the
/// runtime goes before its folder.
struct fixture {
  test::temp_dir dir;
  std::string home = dir.path + "/home";
  std::unique_ptr<runtime> rt;

  fixture(size_t max_running = 0, size_t start_permits = runtime_options{}.start_permits) {
    open(max_running, start_permits);
  }

  void open(size_t max_running = 0, size_t start_permits = runtime_options{}.start_permits) {
    runtime_options opts;
    opts.home = home;
    opts.max_running = max_running;
    opts.start_permits = start_permits;
    rt = get(runtime::open(opts));
  }

  std::shared_ptr<const graph> parse(const json& doc) const {
    auto result = parse_graph(doc, dir.path, rt->graph_options());
    std::string errors;
    for (auto& e : result.errors)
      errors += "  " + to_string(e) + "\n";
    INFO("graph: " << doc.dump() << "\nerrors:\n" << errors);
    REQUIRE(result);
    return result.value;
  }

  execution_handle start(const json& doc, json inputs = json::object()) {
    return get(rt->start(parse(doc), std::move(inputs)));
  }

  /// Waits for the execution's actor to end; @returns its stored record.
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

  /// The subscription's cancel waits for its last callback through CAF's
  /// mailbox, which ThreadSanitizer cannot see: taking the lock the
  /// callbacks took orders their writes before the destruction for it too.
  ~collector() { std::lock_guard<std::mutex> guard{mtx}; }

  std::function<void(const event_record&)> callback() {
    return [this](const event_record& e) {
      std::lock_guard<std::mutex> guard{mtx};
      events.push_back(e);
      cv.notify_all();
    };
  }

  /// Waits until some event satisfies `pred`.
  template <class Pred>
  bool wait_for(Pred pred, millis timeout = generous) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, timeout, [&] {
      return std::any_of(events.begin(), events.end(), pred);
    });
  }

  std::vector<event_record> snapshot() {
    std::lock_guard<std::mutex> guard{mtx};
    return events;
  }
};

auto is_event(const std::string& type, const std::string& step = {}) {
  return [=](const event_record& e) {
    return to_string(e.type) == type && (step.empty() || e.step == step);
  };
}

auto is_final_event() {
  return [](const event_record& e) {
    return e.type == event_type::execution_completed || e.type == event_type::execution_failed
           || e.type == event_type::execution_stopped;
  };
}

/// Events of `execution_id` of `type` (and `step` when given).
std::vector<event_record> select(const std::vector<event_record>& xs, const std::string& type,
                                 const std::string& step = {}) {
  std::vector<event_record> out;
  for (auto& e : xs)
    if (to_string(e.type) == type && (step.empty() || e.step == step))
      out.push_back(e);
  return out;
}

/// A gate a registered function waits at, honouring its stop token.
struct gate {
  std::promise<void> entered_promise;
  std::shared_future<void> entered = entered_promise.get_future().share();
  std::promise<void> release_promise;
  std::shared_future<void> released = release_promise.get_future().share();
  std::once_flag entered_once;

  /// Called by the function: @returns false when the step was stopped first.
  bool pass(const fn_context& ctx) {
    std::call_once(entered_once, [this] { entered_promise.set_value(); });
    while (released.wait_for(2ms) != std::future_status::ready)
      if (ctx.stop_requested())
        return false;
    return true;
  }

  void release() {
    release_promise.set_value();
  }
};

/// A `run` argv that prints "ready" and then sleeps `seconds`, ignoring
/// SIGINT so a stop has to escalate to SIGTERM.
json stubborn_sleep(int seconds) {
  return json::array({"sh", "-c", "trap '' INT; echo ready; exec sleep " + std::to_string(seconds)});
}

auto is_ready_output(const std::string& step) {
  return [=](const event_record& e) {
    return e.type == event_type::step_output && e.step == step && e.data.is_object()
           && e.data.value("line", "") == "ready";
  };
}

} // namespace

// -- results and references ---------------------------------------------------------------

TEST_CASE("a registered fn's result flows through references into an echo step and outputs",
          "[runtime]") {
  fixture f;
  std::atomic<int> calls{0};
  REQUIRE(f.rt->register_fn("greet", [&](fn_context& ctx) -> caf::expected<json> {
    ++calls;
    return json{{"text", "hello " + ctx.with().value("name", std::string{"?"})},
                {"n", 42},
                {"list", json::array({1, 2, 3})}};
  }));
  CHECK_FALSE(f.rt->register_fn("greet", [](fn_context&) -> caf::expected<json> {
    return json::object();
  }));
  CHECK_FALSE(f.rt->register_fn("echo", [](fn_context&) -> caf::expected<json> {
    return json::object();
  }));
  auto doc = json::parse(R"({
    "name": "greeting",
    "inputs": ["name"],
    "steps": {
      "greet": {"fn": "greet", "with": {"name": "${inputs.name}"}},
      "show":  {"fn": "echo", "needs": ["greet"],
                "with": {"msg": "${steps.greet.text}", "n": "${steps.greet.n}",
                         "line": "n=${steps.greet.n} list=${steps.greet.list}",
                         "second": "${steps.greet.list.1}"}}
    },
    "outputs": {"text": "${steps.show.msg}", "n": "${steps.greet.n}",
                "all": "${steps.show}", "who": "${inputs.name}"}
  })");
  auto h = f.start(doc, json{{"name", "actors"}});
  auto rec = f.finish(h);
  INFO("error: " << rec.error);
  REQUIRE(rec.status == execution_status::completed);
  CHECK(rec.reason == step_reason::none);
  CHECK(rec.graph == "greeting");
  CHECK(rec.root_id == rec.id);
  CHECK(rec.inputs == json{{"name", "actors"}});
  json show = {{"msg", "hello actors"}, {"n", 42}, {"line", "n=42 list=[1,2,3]"}, {"second", 2}};
  CHECK(rec.outputs
        == json{{"text", "hello actors"}, {"n", 42}, {"all", show}, {"who", "actors"}});
  auto steps = f.steps(h.id());
  REQUIRE(steps.size() == 2);
  CHECK(steps["greet"].status == step_status::completed);
  CHECK(steps["greet"].attempt == 1);
  CHECK(steps["greet"].result["text"] == "hello actors");
  CHECK(steps["show"].status == step_status::completed);
  CHECK(steps["show"].attempt == 1);
  CHECK(steps["show"].result == show);
  CHECK(calls.load() == 1);
  CHECK(f.rt->db()->live()->empty());
}

TEST_CASE("a fn returning an error fails the execution with step_failed", "[runtime]") {
  fixture f;
  REQUIRE(f.rt->register_fn("broken", [](fn_context&) -> caf::expected<json> {
    return make_error(persistence_errc::io_error, "disk on fire");
  }));
  REQUIRE(f.rt->register_fn("thrower", [](fn_context&) -> caf::expected<json> {
    throw std::runtime_error("kaboom");
  }));
  SECTION("an error value") {
    auto h = f.start(json{{"steps", {{"b", {{"fn", "broken"}}}}}});
    auto rec = f.finish(h);
    CHECK(rec.status == execution_status::failed);
    CHECK(rec.reason == step_reason::step_failed);
    CHECK(rec.error.find("disk on fire") != std::string::npos);
    CHECK(rec.error.find("'b'") != std::string::npos);
    CHECK(rec.outputs.is_null());
    auto s = f.steps(h.id())["b"];
    CHECK(s.status == step_status::failed);
    CHECK(s.error == "disk on fire");
    CHECK(s.attempt == 1);
    auto events = f.events(h.id());
    REQUIRE(select(events, "step.failed", "b").size() == 1);
    CHECK(select(events, "step.failed", "b")[0].data["error"] == "disk on fire");
    auto failed = select(events, "execution.failed");
    REQUIRE(failed.size() == 1);
    CHECK(failed[0].reason == step_reason::step_failed);
    CHECK(f.rt->db()->live()->empty());
  }
  SECTION("an exception") {
    auto h = f.start(json{{"steps", {{"t", {{"fn", "thrower"}}}}}});
    auto rec = f.finish(h);
    CHECK(rec.status == execution_status::failed);
    CHECK(rec.reason == step_reason::step_failed);
    auto s = f.steps(h.id())["t"];
    CHECK(s.status == step_status::failed);
    CHECK(s.error.get<std::string>().find("kaboom") != std::string::npos);
  }
  SECTION("the built-in fail") {
    auto h = f.start(json::parse(R"({"steps": {"x": {"fn": "fail", "with": {"message": "nope"}},
                                                "y": {"fn": "fail"}}})"));
    auto rec = f.finish(h);
    CHECK(rec.status == execution_status::failed);
    CHECK(rec.reason == step_reason::step_failed);
    auto steps = f.steps(h.id());
    // Whichever ran first failed the execution; a failed step records its message.
    bool x_failed = steps["x"].status == step_status::failed;
    bool y_failed = steps["y"].status == step_status::failed;
    CHECK((x_failed || y_failed));
    if (x_failed)
      CHECK(steps["x"].error == "nope");
    if (y_failed)
      CHECK(steps["y"].error == "fail");
  }
}

// -- retries and timeouts ---------------------------------------------------------------------

TEST_CASE("a step with retries: 2 that fails twice completes on attempt 3", "[runtime]") {
  fixture f;
  std::atomic<int> calls{0};
  REQUIRE(f.rt->register_fn("flaky", [&](fn_context& ctx) -> caf::expected<json> {
    if (++calls <= 2)
      return make_error(persistence_errc::io_error, "flake " + std::to_string(ctx.attempt()));
    return json{{"attempt", ctx.attempt()}};
  }));
  auto h = f.start(json::parse(R"({"steps": {
    "s": {"fn": "flaky", "retries": 2, "retry_delay": "10ms"},
    "after": {"fn": "echo", "needs": ["s"], "with": {"a": "${steps.s.attempt}"}}}})"));
  auto rec = f.finish(h);
  INFO("error: " << rec.error);
  REQUIRE(rec.status == execution_status::completed);
  CHECK(calls.load() == 3);
  auto steps = f.steps(h.id());
  CHECK(steps["s"].status == step_status::completed);
  CHECK(steps["s"].attempt == 3);
  CHECK(steps["s"].error.is_null());
  CHECK(steps["s"].result == json{{"attempt", 3}});
  CHECK(steps["after"].result == json{{"a", 3}});
  auto events = f.events(h.id());
  auto retries = select(events, "step.retry", "s");
  REQUIRE(retries.size() == 2);
  CHECK(retries[0].data["attempt"] == 1);
  CHECK(retries[0].data["error"] == "flake 1");
  CHECK(retries[1].data["attempt"] == 2);
  CHECK(retries[1].data["error"] == "flake 2");
  // The delay doubles: 10ms, then 20ms.
  CHECK(retries[0].data["delay_ms"] == 10);
  CHECK(retries[1].data["delay_ms"] == 20);
  CHECK(select(events, "step.started", "s").size() == 3);
  CHECK(select(events, "step.failed", "s").empty());
}

TEST_CASE("a step that keeps failing exhausts its retries and fails", "[runtime]") {
  fixture f;
  std::atomic<int> calls{0};
  REQUIRE(f.rt->register_fn("always", [&](fn_context&) -> caf::expected<json> {
    ++calls;
    return make_error(persistence_errc::io_error, "still broken");
  }));
  auto h = f.start(json::parse(R"({"steps": {
    "s": {"fn": "always", "retries": 2, "retry_delay": "10ms"}}})"));
  auto rec = f.finish(h);
  CHECK(rec.status == execution_status::failed);
  CHECK(rec.reason == step_reason::step_failed);
  CHECK(calls.load() == 3);
  auto s = f.steps(h.id())["s"];
  CHECK(s.status == step_status::failed);
  CHECK(s.attempt == 3);
  CHECK(s.error == "still broken");
  auto events = f.events(h.id());
  CHECK(select(events, "step.retry", "s").size() == 2);
  CHECK(select(events, "step.failed", "s").size() == 1);
}

TEST_CASE("a timeout ends the attempt with error timeout", "[runtime]") {
  fixture f;
  SECTION("on a sleep") {
    auto begin = clock_type::now();
    auto h = f.start(json::parse(R"({"steps": {
      "nap": {"fn": "sleep", "with": {"ms": 5000}, "timeout": "50ms"}}})"));
    auto rec = f.finish(h);
    CHECK(elapsed_ms(begin) < 30000); // a hang bound: `error` says the timeout ended it
    CHECK(rec.status == execution_status::failed);
    CHECK(rec.reason == step_reason::step_failed);
    CHECK(rec.error.find("timeout") != std::string::npos);
    auto s = f.steps(h.id())["nap"];
    CHECK(s.status == step_status::failed);
    CHECK(s.error == "timeout");
    CHECK(s.result.is_null());
  }
  SECTION("on a registered fn, which sees its stop token") {
    auto saw_stop = std::make_shared<std::promise<void>>();
    auto saw = saw_stop->get_future();
    REQUIRE(f.rt->register_fn("spin", [saw_stop](fn_context& ctx) -> caf::expected<json> {
      // Waits for its stop token (bounded, so a bug cannot hang the pool).
      auto deadline = clock_type::now() + 60s;
      while (!ctx.stop_requested() && clock_type::now() < deadline)
        std::this_thread::sleep_for(1ms);
      if (ctx.stop_requested())
        saw_stop->set_value();
      if (auto err = ctx.checkpoint())
        return err;
      return json{{"late", true}};
    }));
    auto begin = clock_type::now();
    auto h = f.start(json::parse(R"({"steps": {"s": {"fn": "spin", "timeout": "50ms"}}})"));
    auto rec = f.finish(h);
    CHECK(elapsed_ms(begin) < 30000);
    CHECK(rec.status == execution_status::failed);
    CHECK(rec.reason == step_reason::step_failed);
    auto s = f.steps(h.id())["s"];
    CHECK(s.status == step_status::failed);
    CHECK(s.error == "timeout");
    CHECK(saw.wait_for(generous) == std::future_status::ready);
  }
  SECTION("and is retried like any failure") {
    auto h = f.start(json::parse(R"({"steps": {
      "nap": {"fn": "sleep", "with": {"ms": 5000}, "timeout": "50ms",
              "retries": 1, "retry_delay": "10ms"}}})"));
    auto rec = f.finish(h);
    CHECK(rec.status == execution_status::failed);
    auto s = f.steps(h.id())["nap"];
    CHECK(s.status == step_status::failed);
    CHECK(s.attempt == 2);
    CHECK(s.error == "timeout");
    auto retries = select(f.events(h.id()), "step.retry", "nap");
    REQUIRE(retries.size() == 1);
    CHECK(retries[0].data["error"] == "timeout");
  }
}

// -- failure stops siblings ----------------------------------------------------------------------

TEST_CASE("a failed step stops its running siblings with sibling_failed", "[runtime]") {
  fixture f;
  gate g;
  REQUIRE(f.rt->register_fn("gate", [&g](fn_context& ctx) -> caf::expected<json> {
    if (!g.pass(ctx))
      return ctx.checkpoint();
    return json::object();
  }));
  json doc = {{"name", "siblings"},
              {"steps",
               {{"gate", {{"fn", "gate"}}},
                {"bad", {{"fn", "fail"}, {"with", {{"message", "boom"}}}, {"needs", {"gate"}}}},
                {"slow", {{"fn", "sleep"}, {"with", {{"ms", 60000}}}}},
                {"proc",
                 {{"run", stubborn_sleep(60)},
                  {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}}}}};
  auto h = f.start(doc);
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  // Both siblings are running (the subprocess printed its first line) before
  // the failing step may start.
  REQUIRE(seen->wait_for(is_ready_output("proc")));
  REQUIRE(seen->wait_for(is_event("step.started", "slow")));
  REQUIRE(g.entered.wait_for(generous) == std::future_status::ready);
  auto released_at = clock_type::now();
  g.release();
  auto rec = f.finish(h);
  // Before the 60 s sleeps would end (grace periods are 100 ms).
  CHECK(elapsed_ms(released_at) < 30000);
  CHECK(rec.status == execution_status::failed);
  CHECK(rec.reason == step_reason::step_failed);
  CHECK(rec.error.find("boom") != std::string::npos);
  auto steps = f.steps(h.id());
  CHECK(steps["gate"].status == step_status::completed);
  CHECK(steps["bad"].status == step_status::failed);
  CHECK(steps["bad"].error == "boom");
  CHECK(steps["slow"].status == step_status::pending);
  CHECK(steps["slow"].reason == step_reason::sibling_failed);
  CHECK(steps["proc"].status == step_status::pending);
  CHECK(steps["proc"].reason == step_reason::sibling_failed);
  auto pid = steps["proc"].pid;
  REQUIRE(pid > 0);
  CHECK(test::process_gone(pid));
  auto events = f.events(h.id());
  for (auto step : {"slow", "proc"}) {
    INFO("step " << step);
    auto pending = select(events, "step.pending", step);
    REQUIRE(pending.size() == 1);
    CHECK(pending[0].reason == step_reason::sibling_failed);
  }
  auto failed = select(events, "execution.failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].reason == step_reason::step_failed);
  CHECK(select(events, "execution.stopped").empty());
}

// -- inputs ------------------------------------------------------------------------------------

TEST_CASE("start rejects missing and undeclared inputs before anything is stored",
          "[runtime]") {
  fixture f;
  auto g = f.parse(json::parse(R"({"name": "needs-topic", "inputs": ["topic", "depth"],
                                  "steps": {"a": {"fn": "echo", "with": {"t": "${inputs.topic}"}}}})"));
  auto check_rejected = [&](json inputs, const std::string& names) {
    INFO("inputs: " << inputs.dump());
    auto h = f.rt->start(g, inputs);
    REQUIRE_FALSE(h);
    CHECK(h.error().category() == runtime_category);
    CHECK(h.error().code() == static_cast<uint8_t>(runtime_errc::invalid_input));
    CHECK(message_of(h.error()).find(names) != std::string::npos);
    CHECK(check_inputs(*g, inputs) == h.error());
  };
  check_rejected(json::object(), "topic");
  check_rejected(json{{"topic", "x"}}, "depth");
  check_rejected(json{{"topic", "x"}, {"depth", 1}, {"extra", true}}, "extra");
  check_rejected(json::array({"topic", "depth"}), "object");
  execution_filter all;
  all.roots_only = false;
  CHECK(get(f.rt->db()->list(all)).empty());
  CHECK(get(f.rt->db()->last_seq()) == 0u);
  CHECK(get(f.rt->db()->live()).empty());
  // The same graph with the right inputs runs.
  CHECK_FALSE(check_inputs(*g, json{{"topic", "x"}, {"depth", 1}}));
  auto h = get(f.rt->start(g, json{{"topic", "x"}, {"depth", 1}}));
  CHECK(f.finish(h).status == execution_status::completed);
}

// -- events ------------------------------------------------------------------------------------

TEST_CASE("subscribe delivers every event of the tree once, in seq order, including past ones",
          "[runtime]") {
  fixture f;
  gate g;
  REQUIRE(f.rt->register_fn("hold", [&g](fn_context& ctx) -> caf::expected<json> {
    if (!g.pass(ctx))
      return ctx.checkpoint();
    return json{{"held", true}};
  }));
  // Another tree runs at the same time; none of its events may show up.
  auto other = f.start(json::parse(R"({"name": "other", "steps": {
    "o1": {"fn": "sleep", "with": {"ms": 5}},
    "o2": {"fn": "sleep", "with": {"ms": 5}, "needs": ["o1"]},
    "o3": {"fn": "echo", "with": {"x": 1}, "needs": ["o2"]}}})"));
  auto h = f.start(json::parse(R"({"name": "mine", "steps": {
    "a": {"fn": "hold"},
    "b": {"fn": "sleep", "with": {"ms": 5}, "needs": ["a"]},
    "c": {"fn": "echo", "with": {"x": "${steps.a.held}"}, "needs": ["a"]},
    "d": {"run": ["sh", "-c", "echo one; echo two"], "needs": ["b", "c"]}}})"));
  // Subscribe mid-run: the queued and started events are already committed.
  REQUIRE(g.entered.wait_for(generous) == std::future_status::ready);
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  auto seen2 = std::make_shared<collector>();
  auto sub2 = h.subscribe(seen2->callback());
  g.release();
  auto rec = f.finish(h);
  REQUIRE(rec.status == execution_status::completed);
  REQUIRE(seen->wait_for(is_final_event()));
  REQUIRE(seen2->wait_for(is_final_event()));
  REQUIRE(f.finish(other).status == execution_status::completed);
  auto stored = f.events(h.id());
  auto got = seen->snapshot();
  auto seqs = [](const std::vector<event_record>& xs) {
    std::vector<uint64_t> out;
    for (auto& e : xs)
      out.push_back(e.seq);
    return out;
  };
  CHECK(seqs(got) == seqs(stored));
  CHECK(seqs(seen2->snapshot()) == seqs(stored));
  for (size_t i = 1; i < got.size(); ++i)
    CHECK(got[i - 1].seq < got[i].seq);
  for (auto& e : got)
    CHECK(e.root_id == h.id());
  REQUIRE(!got.empty());
  CHECK(got.front().type == event_type::execution_queued);
  CHECK(got.back().type == event_type::execution_completed);
  CHECK(select(got, "step.output", "d").size() == 2);
  // Fields match the stored log.
  for (size_t i = 0; i < std::min(got.size(), stored.size()); ++i)
    CHECK(to_json(got[i]) == to_json(stored[i]));
  // A subscription made after the end replays the whole log.
  auto late = std::make_shared<collector>();
  auto sub3 = h.subscribe(late->callback());
  REQUIRE(late->wait_for(is_final_event()));
  CHECK(seqs(late->snapshot()) == seqs(stored));
}

// -- durability -----------------------------------------------------------------------------------

TEST_CASE("a step's completion is durable before its dependents start", "[runtime]") {
  fixture f;
  std::shared_ptr<store> db = f.rt->db();
  // Reads the store from inside the dependent step: its need must be there.
  REQUIRE(f.rt->register_fn("inspect", [db](fn_context& ctx) -> caf::expected<json> {
    auto steps = db->steps(ctx.execution_id());
    if (!steps)
      return steps.error();
    json seen = json::object();
    for (auto& s : *steps)
      seen[s.step] = {{"status", to_string(s.status)}, {"result", s.result}};
    return seen;
  }));
  auto h = f.start(json::parse(R"({"steps": {
    "a": {"fn": "sleep", "with": {"ms": 20}},
    "b": {"fn": "inspect", "needs": ["a"]},
    "c": {"fn": "echo", "with": {"x": "${steps.b.a.status}"}, "needs": ["b"]},
    "d": {"run": ["sh", "-c", "echo d"], "needs": ["a"]},
    "e": {"fn": "inspect", "needs": ["c", "d"]}}})"));
  auto rec = f.finish(h);
  INFO("error: " << rec.error);
  REQUIRE(rec.status == execution_status::completed);
  auto steps = f.steps(h.id());
  CHECK(steps["b"].result["a"]["status"] == "completed");
  CHECK(steps["b"].result["a"]["result"] == json{{"slept_ms", 20}});
  CHECK(steps["e"].result["c"]["status"] == "completed");
  CHECK(steps["e"].result["d"]["status"] == "completed");
  CHECK(steps["e"].result["d"]["result"]["stdout"] == "d\n");
  auto events = f.events(h.id());
  std::vector<std::pair<std::string, std::string>> edges = {
    {"a", "b"}, {"b", "c"}, {"a", "d"}, {"c", "e"}, {"d", "e"}};
  for (auto& [up, down] : edges) {
    INFO(up << " -> " << down);
    auto completed = select(events, "step.completed", up);
    auto started = select(events, "step.started", down);
    REQUIRE(completed.size() == 1);
    REQUIRE(started.size() == 1);
    CHECK(completed[0].seq < started[0].seq);
    CHECK(steps[up].ended_at != 0);
    CHECK(steps[up].ended_at <= steps[down].started_at);
  }
}

// -- stop and resume ------------------------------------------------------------------------------

TEST_CASE("resume of a failed execution re-runs only the failed step", "[runtime]") {
  fixture f;
  std::atomic<int> up_calls{0}, flaky_calls{0};
  REQUIRE(f.rt->register_fn("up", [&](fn_context&) -> caf::expected<json> {
    ++up_calls;
    return json{{"v", 7}};
  }));
  REQUIRE(f.rt->register_fn("flaky", [&](fn_context& ctx) -> caf::expected<json> {
    if (++flaky_calls == 1)
      return make_error(persistence_errc::io_error, "first call fails");
    return json{{"got", ctx.with()["x"]}};
  }));
  auto h = f.start(json::parse(R"({"name": "resumable", "steps": {
    "up": {"fn": "up"},
    "flaky": {"fn": "flaky", "with": {"x": "${steps.up.v}"}, "needs": ["up"]},
    "down": {"fn": "echo", "with": {"got": "${steps.flaky.got}"}, "needs": ["flaky"]}},
    "outputs": {"got": "${steps.down.got}"}})"));
  auto first = f.finish(h);
  REQUIRE(first.status == execution_status::failed);
  CHECK(first.reason == step_reason::step_failed);
  auto before = f.steps(h.id());
  CHECK(before["up"].status == step_status::completed);
  CHECK(before["flaky"].status == step_status::failed);
  CHECK(before.count("down") == 0);
  CHECK(up_calls.load() == 1);

  auto r = get(f.rt->resume(h.id()));
  CHECK(r.id() == h.id());
  auto rec = f.finish(r);
  INFO("error: " << rec.error);
  REQUIRE(rec.status == execution_status::completed);
  CHECK(rec.reason == step_reason::none);
  CHECK(rec.error.empty());
  CHECK(rec.outputs == json{{"got", 7}});
  CHECK(up_calls.load() == 1);
  CHECK(flaky_calls.load() == 2);
  auto after = f.steps(h.id());
  CHECK(after["up"].attempt == 1);
  CHECK(after["up"].ended_at == before["up"].ended_at);
  CHECK(after["flaky"].status == step_status::completed);
  CHECK(after["flaky"].attempt == 2); // attempts keep counting across resumes
  CHECK(after["flaky"].error.is_null());
  CHECK(after["down"].status == step_status::completed);
  auto events = f.events(h.id());
  CHECK(select(events, "execution.resumed").size() == 1);
  CHECK(select(events, "step.started", "up").size() == 1);
  CHECK(select(events, "step.started", "flaky").size() == 2);
  CHECK(get(f.rt->db()->live()).empty());

  SECTION("resuming it again changes nothing") {
    auto again = get(f.rt->resume(h.id()));
    CHECK(f.finish(again).status == execution_status::completed);
    CHECK(f.events(h.id()).size() == events.size());
  }
}

TEST_CASE("resume answers not_found and wrong_state", "[runtime]") {
  fixture f;
  auto missing = f.rt->resume("no-such-execution");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().category() == persistence_category);
  CHECK(missing.error().code() == static_cast<uint8_t>(persistence_errc::not_found));
  auto h = f.start(json::parse(R"({"steps": {"s": {"fn": "sleep", "with": {"ms": 60000}}}})"));
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  REQUIRE(seen->wait_for(is_event("step.started", "s")));
  CHECK(h.running());
  auto busy = f.rt->resume(h.id());
  REQUIRE_FALSE(busy);
  CHECK(busy.error().category() == runtime_category);
  CHECK(busy.error().code() == static_cast<uint8_t>(runtime_errc::wrong_state));
  h.stop();
  auto rec = f.finish(h);
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::requested);
  CHECK_FALSE(h.running());
}

TEST_CASE("a requested stop snapshots the running steps and resume finishes the rest",
          "[runtime]") {
  fixture f;
  std::atomic<int> first_calls{0};
  REQUIRE(f.rt->register_fn("first", [&](fn_context&) -> caf::expected<json> {
    ++first_calls;
    return json{{"ok", 1}};
  }));
  // Blocks on its first attempt until the stop reaches it.
  REQUIRE(f.rt->register_fn("block", [](fn_context& ctx) -> caf::expected<json> {
    if (ctx.attempt() == 1) {
      auto deadline = clock_type::now() + 60s;
      while (!ctx.stop_requested() && clock_type::now() < deadline)
        std::this_thread::sleep_for(1ms);
      if (auto err = ctx.checkpoint())
        return err;
    }
    return json{{"attempt", ctx.attempt()}};
  }));
  auto h = f.start(json::parse(R"({"steps": {
    "first": {"fn": "first"},
    "block": {"fn": "block", "needs": ["first"]},
    "proc": {"run": ["sh", "-c", "echo ready; exec sleep 60"], "needs": ["first"],
             "grace": {"interrupt": "100ms", "terminate": "100ms"}}},
    "outputs": {"a": "${steps.block.attempt}"}})"));
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  REQUIRE(seen->wait_for(is_event("step.started", "block")));
  REQUIRE(seen->wait_for(is_ready_output("proc")));
  auto asked = clock_type::now();
  h.stop();
  auto rec = f.finish(h);
  CHECK(elapsed_ms(asked) < 30000); // before the 60 s block and sleep end
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::requested);
  auto steps = f.steps(h.id());
  CHECK(steps["first"].status == step_status::completed);
  CHECK(steps["block"].status == step_status::pending);
  CHECK_FALSE(steps["block"].reason == step_reason::none);
  CHECK(steps["proc"].status == step_status::pending);
  REQUIRE(steps["proc"].pid > 0);
  CHECK(test::process_gone(steps["proc"].pid));
  auto events = f.events(h.id());
  CHECK(select(events, "execution.stopping").size() == 1);
  CHECK(select(events, "execution.stopped").size() == 1);
  CHECK(get(f.rt->db()->live()).empty());
  SECTION("resume") {
    sub.cancel();
    // The subprocess step would sleep again: that is fine, stop it the same way
    // once the blocked step has completed.
    auto r = get(f.rt->resume(h.id()));
    auto seen2 = std::make_shared<collector>();
    auto sub2 = r.subscribe(seen2->callback());
    REQUIRE(seen2->wait_for([](const event_record& e) {
      return e.type == event_type::step_completed && e.step == "block";
    }));
    r.stop();
    auto rec2 = f.finish(r);
    CHECK(rec2.status == execution_status::stopped);
    auto after = f.steps(h.id());
    CHECK(first_calls.load() == 1);
    CHECK(after["first"].attempt == 1);
    CHECK(after["block"].status == step_status::completed);
    CHECK(after["block"].attempt == 2);
    CHECK(after["block"].result == json{{"attempt", 2}});
  }
}

TEST_CASE("a stopped tree is materialised once the store writer is idle and reads the same "
          "before and after",
          "[runtime][stop]") {
  fixture f;
  // Root → two children → two grandchildren each, every leaf sleeping.
  json leaf = {{"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", 600000}}}}}}}};
  json mid = {{"steps", {{"g1", {{"graph", leaf}}}, {"g2", {{"graph", leaf}}}}}};
  json doc = {{"steps", {{"c1", {{"graph", mid}}}, {"c2", {{"graph", mid}}}}}};
  auto h = f.start(doc);
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  auto naps = [&] {
    size_t n = 0;
    for (auto& e : seen->snapshot())
      n += e.type == event_type::step_started && e.step == "nap" ? 1 : 0;
    return n;
  };
  REQUIRE(test::eventually([&] { return naps() == 4; }));
  REQUIRE(h.stop());
  CHECK(f.finish(h).status == execution_status::stopped);
  auto& db = *f.rt->db();
  // Everything a reader sees of the tree, as JSON documents.
  auto reads = [&] {
    json out = json::object();
    for (auto& id : get(db.subtree_ids(h.id()))) {
      out["executions"][id] = to_json(get(db.execution(id)));
      for (auto& st : get(db.steps(id)))
        out["steps"][id + "/" + st.step] = to_json(st);
    }
    for (auto& e : test::checked_tree_events(db, h.id()))
      out["events"].push_back(to_json(e));
    out["live"] = get(db.live()).size();
    return out;
  };
  auto before = reads();
  CHECK(before["executions"].size() == 7);
  for (auto& [id, x] : before["executions"].items()) {
    INFO(id);
    CHECK(x["status"] == "stopped");
    CHECK(x["reason"] == (id == h.id() ? "requested" : "parent_stopped"));
  }
  for (auto& [id, st] : before["steps"].items()) {
    INFO(id);
    CHECK(st["status"] == "pending");
  }
  CHECK(before["live"] == 0);
  // The writer materialises it once no write came for a second.
  REQUIRE(test::eventually([&] { return get(db.subtree_stops(h.id())).empty(); }));
  CHECK(reads() == before);
}

TEST_CASE("a stop returns queued steps to pending and frees their slots", "[runtime]") {
  test::temp_dir dir;
  runtime_options opts;
  opts.home = dir.path + "/home";
  opts.max_parallel = 1;
  auto rt = get(runtime::open(opts));
  auto parse = [&](const json& doc) {
    auto result = parse_graph(doc, dir.path, rt->graph_options());
    REQUIRE(result);
    return result.value;
  };
  json grace = {{"interrupt", "100ms"}, {"terminate", "100ms"}};
  auto h = get(rt->start(parse(json{{"steps",
                                     {{"p1", {{"run", stubborn_sleep(60)}, {"grace", grace}}},
                                      {"p2", {{"run", stubborn_sleep(60)}, {"grace", grace}}}}}}),
                         json::object()));
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  // One subprocess runs; the other waits for the only slot.
  REQUIRE(seen->wait_for([](const event_record& e) {
    return e.type == event_type::step_output && e.data.is_object() && e.data.value("line", "") == "ready";
  }));
  REQUIRE(seen->wait_for(is_event("step.queued", "p1")));
  REQUIRE(seen->wait_for(is_event("step.queued", "p2")));
  h.stop();
  h.stop(); // idempotent
  REQUIRE(h.wait_for(generous));
  auto rec = get(h.status());
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::requested);
  std::map<std::string, step_record> steps;
  for (auto& s : get(rt->db()->steps(h.id())))
    steps[s.step] = s;
  int had_process = 0;
  for (auto name : {"p1", "p2"}) {
    INFO("step " << name);
    CHECK(steps[name].status == step_status::pending);
    CHECK_FALSE(steps[name].reason == step_reason::none);
    if (steps[name].pid > 0) {
      ++had_process;
      CHECK(test::process_gone(steps[name].pid));
    }
  }
  CHECK(had_process == 1);
  // The slot is free again: a new execution's subprocess runs.
  auto next = get(rt->start(parse(json{{"steps", {{"q", {{"run", {"sh", "-c", "echo ok"}}}}}}}),
                            json::object()));
  REQUIRE(next.wait_for(generous));
  auto next_rec = get(next.status());
  CHECK(next_rec.status == execution_status::completed);
}

TEST_CASE("a forced stop skips the grace periods", "[runtime]") {
  fixture f;
  json grace = {{"interrupt", "60s"}, {"terminate", "60s"}};
  auto h = f.start(json{{"steps", {{"p", {{"run", stubborn_sleep(120)}, {"grace", grace}}}}}});
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  REQUIRE(seen->wait_for(is_ready_output("p")));
  auto asked = clock_type::now();
  SECTION("force at once") {
    h.stop(stop_mode::force);
  }
  SECTION("force overtaking a graceful stop") {
    h.stop();
    REQUIRE(seen->wait_for(is_event("execution.stopping")));
    h.stop(stop_mode::force);
  }
  auto rec = f.finish(h);
  CHECK(elapsed_ms(asked) < 30000);
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::requested);
  auto s = f.steps(h.id())["p"];
  CHECK(s.status == step_status::pending);
  REQUIRE(s.pid > 0);
  CHECK(test::process_gone(s.pid));
}

TEST_CASE("recover_interrupted stops executions of dead owners and leaves live ones",
          "[runtime]") {
  test::temp_dir dir;
  auto home = dir.path + "/home";
  // A process that existed and is gone (reaped).
  auto child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0)
    ::_exit(0);
  auto child_start = process_start_time(child);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(test::process_gone(child));
  CHECK(process_start_time(child) == 0u);
  auto me = static_cast<int64_t>(::getpid());
  auto my_start = process_start_time(me);
  REQUIRE(my_start != 0u);

  auto graph_doc = json::parse(R"({"name": "recoverable", "steps": {
    "s0": {"fn": "noop"},
    "s1": {"fn": "echo", "with": {"v": "${steps.s0}"}, "needs": ["s0"]},
    "s2": {"fn": "sleep", "with": {"ms": 1}}},
    "outputs": {"v": "${steps.s1.v}"}})");
  auto parsed = parse_graph(graph_doc, dir.path);
  REQUIRE(parsed);

  auto exec = [&](const std::string& id, execution_status s, int64_t pid, uint64_t start) {
    execution_record r;
    r.id = id;
    r.graph = "recoverable";
    r.status = s;
    r.root_id = id;
    r.created_at = now_ms();
    r.started_at = r.created_at;
    r.owner_pid = pid;
    r.owner_start = start;
    return r;
  };
  auto step = [](const std::string& id, const std::string& name, step_status s) {
    step_record r;
    r.execution_id = id;
    r.step = name;
    r.status = s;
    r.attempt = s == step_status::pending ? 0 : 1;
    r.started_at = now_ms();
    if (s == step_status::completed) {
      r.result = json::object();
      r.ended_at = r.started_at;
    }
    return r;
  };
  auto dead = make_execution_id();
  auto stopping = make_execution_id();
  auto queued = make_execution_id();
  auto reused = make_execution_id();
  auto mine = make_execution_id();
  auto done = make_execution_id();
  {
    auto db = get(store::open({home}));
    write_batch b;
    b.executions.push_back(exec(dead, execution_status::running, child, child_start));
    b.executions.push_back(exec(stopping, execution_status::stopping, child, child_start));
    b.executions.push_back(exec(queued, execution_status::queued, child, child_start));
    // This process's pid with another start time: a reused pid, so dead.
    b.executions.push_back(exec(reused, execution_status::running, me, my_start + 12345));
    b.executions.push_back(exec(mine, execution_status::running, me, my_start));
    b.executions.push_back(exec(done, execution_status::completed, child, child_start));
    for (auto& id : {dead, stopping, queued, reused, mine, done})
      b.graphs.emplace_back(id, to_stored(*parsed.value));
    b.steps.push_back(step(dead, "s0", step_status::completed));
    b.steps.push_back(step(dead, "s1", step_status::running));
    b.steps.push_back(step(dead, "s2", step_status::queued));
    b.steps.push_back(step(mine, "s0", step_status::running));
    b.steps.push_back(step(reused, "s2", step_status::running));
    REQUIRE_FALSE(db->commit(b));
  }
  std::set<std::string> expected_ids = {dead, stopping, queued, reused};

  auto check_recovered = [&](store& db) {
    for (auto& id : expected_ids) {
      INFO("execution " << id);
      auto rec = get(db.execution(id));
      CHECK(rec.status == execution_status::stopped);
      CHECK(rec.reason == step_reason::interrupted);
      CHECK(rec.ended_at != 0);
    }
    auto steps = get(db.steps(dead));
    REQUIRE(steps.size() == 3);
    CHECK(steps[0].step == "s0");
    CHECK(steps[0].status == step_status::completed);
    CHECK(steps[0].reason == step_reason::none);
    CHECK(steps[1].status == step_status::pending);
    CHECK(steps[1].reason == step_reason::interrupted);
    CHECK(steps[2].status == step_status::pending);
    CHECK(steps[2].reason == step_reason::interrupted);
    auto reused_steps = get(db.steps(reused));
    REQUIRE(reused_steps.size() == 1);
    CHECK(reused_steps[0].status == step_status::pending);
    // The live owner's execution is untouched.
    auto m = get(db.execution(mine));
    CHECK(m.status == execution_status::running);
    CHECK(m.reason == step_reason::none);
    auto mine_steps = get(db.steps(mine));
    REQUIRE(mine_steps.size() == 1);
    CHECK(mine_steps[0].status == step_status::running);
    CHECK(get(db.execution(done)).status == execution_status::completed);
    std::vector<std::string> live_ids;
    for (auto& r : get(db.live()))
      live_ids.push_back(r.id);
    CHECK(live_ids == std::vector<std::string>{mine});
    // Not a log to check: the records above were written without the
    // events that would have led to them.
    auto events = get(db.tree_events(dead));
    auto stopped = select(events, "execution.stopped");
    REQUIRE(stopped.size() == 1);
    CHECK(stopped[0].reason == step_reason::interrupted);
    auto pending = select(events, "step.pending");
    CHECK(pending.size() == 2);
    for (auto& e : pending)
      CHECK(e.reason == step_reason::interrupted);
  };

  SECTION("called directly") {
    auto db = get(store::open({home}));
    auto ids = get(recover_interrupted(*db));
    CHECK(std::set<std::string>(ids.begin(), ids.end()) == expected_ids);
    CHECK(ids.size() == expected_ids.size());
    check_recovered(*db);
    // Idempotent.
    auto seq = get(db->last_seq());
    CHECK(get(recover_interrupted(*db)).empty());
    CHECK(get(db->last_seq()) == seq);
  }
  SECTION("when a runtime opens the home, and the execution then resumes") {
    runtime_options opts;
    opts.home = home;
    auto rt = get(runtime::open(opts));
    check_recovered(*rt->db());
    auto h = get(rt->resume(dead));
    REQUIRE(h.wait_for(generous));
    auto rec = get(h.status());
    INFO("error: " << rec.error);
    CHECK(rec.status == execution_status::completed);
    CHECK(rec.outputs == json{{"v", json::object()}});
    std::map<std::string, step_record> steps;
    for (auto& s : get(rt->db()->steps(dead)))
      steps[s.step] = s;
    CHECK(steps["s0"].attempt == 1); // completed: never runs again
    CHECK(steps["s1"].attempt == 2); // was running: runs again
    CHECK(steps["s2"].attempt == 2);
    CHECK(get(rt->db()->execution(mine)).status == execution_status::running);
  }
}

TEST_CASE("destroying the runtime stops live executions with reason shutdown", "[runtime]") {
  fixture f;
  auto h = f.start(json{{"name", "long"},
                        {"steps",
                         {{"slow", {{"fn", "sleep"}, {"with", {{"ms", 60000}}}}},
                          {"proc",
                           {{"run", stubborn_sleep(60)},
                            {"grace", {{"interrupt", "100ms"}, {"terminate", "100ms"}}}}}}}});
  auto id = h.id();
  {
    auto seen = std::make_shared<collector>();
    auto sub = h.subscribe(seen->callback());
    REQUIRE(seen->wait_for(is_event("step.started", "slow")));
    REQUIRE(seen->wait_for(is_ready_output("proc")));
  }
  auto begin = clock_type::now();
  f.rt.reset();
  CHECK(elapsed_ms(begin) < 30000); // before the 60 s sleeps end
  auto db = get(store::open({f.home}));
  auto rec = get(db->execution(id));
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::shutdown);
  CHECK(get(db->live()).empty());
  std::map<std::string, step_record> steps;
  for (auto& s : get(db->steps(id)))
    steps[s.step] = s;
  CHECK(steps["slow"].status == step_status::pending);
  CHECK(steps["proc"].status == step_status::pending);
  REQUIRE(steps["proc"].pid > 0);
  CHECK(test::process_gone(steps["proc"].pid));
  auto stopped = select(test::checked_tree_events(*db, id), "execution.stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].reason == step_reason::shutdown);
}

TEST_CASE("a queued execution is stopped before it runs", "[runtime][stop]") {
  // One root runs at a time: the second waits `queued` until it is stopped.
  fixture f{1};
  json busy = {{"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", 600000}}}}}}}};
  auto first = f.start(busy);
  auto second = f.start(busy);
  CHECK(get(second.status()).status == execution_status::queued);
  auto req = get(second.stop());
  CHECK(req.result != stop_result::no_execution);
  auto rec = f.finish(second);
  CHECK(rec.status == execution_status::stopped);
  CHECK(rec.reason == step_reason::requested);
  CHECK(rec.started_at == 0);
  for (auto& e : f.events(second.id()))
    CHECK(family_of(e.type) != event_family::step);
  auto stop = get(f.rt->db()->stop(req.request.id));
  CHECK(stop.handled);
  CHECK(stop.result == stop_result::stopped);
  // Stopping it again changes nothing.
  auto again = get(second.stop());
  CHECK(again.result == stop_result::no_execution);
  // The first still runs and stops normally.
  CHECK(get(first.stop()).result != stop_result::no_execution);
  CHECK(f.finish(first).status == execution_status::stopped);
}

TEST_CASE("a function that ignores its stop token cannot hold a stop forever",
          "[runtime][stop]") {
  fixture f;
  std::mutex mtx;
  std::condition_variable cv;
  bool entered = false, release = false;
  f.rt->register_fn("stubborn", [&](fn_context&) -> caf::expected<json> {
    std::unique_lock<std::mutex> guard{mtx};
    entered = true;
    cv.notify_all();
    cv.wait(guard, [&] { return release; }); // never looks at its stop token
    return json::object();
  });
  auto h = f.start({{"steps",
                     {{"s",
                       {{"fn", "stubborn"},
                        {"grace", {{"interrupt", "50ms"}, {"terminate", "50ms"}}}}}}}});
  {
    std::unique_lock<std::mutex> guard{mtx};
    REQUIRE(cv.wait_for(guard, generous, [&] { return entered; }));
  }
  get(h.stop());
  auto rec = f.finish(h); // bounded by the grace periods, not by the function
  CHECK(rec.status == execution_status::stopped);
  CHECK(f.steps(h.id())["s"].status == step_status::pending);
  {
    std::lock_guard<std::mutex> guard{mtx};
    release = true;
  }
  cv.notify_all();
}

// -- the start gate (actors/start_gate.hpp) ------------------------------------------------

namespace {

/// A root with `width` children of `width` children each, every leaf running
/// `leaf` (one step `s`).
json square_tree(int width, const json& leaf) {
  json mid = {{"steps", json::object()}};
  for (int i = 0; i < width; ++i)
    mid["steps"]["c" + std::to_string(i)] = {{"graph", leaf}};
  json doc = {{"steps", json::object()}};
  for (int i = 0; i < width; ++i)
    doc["steps"]["m" + std::to_string(i)] = {{"graph", mid}};
  return doc;
}

/// Every execution of the tree `root` (the root included), by id.
std::vector<execution_record> tree_of(const fixture& f, const std::string& root) {
  std::vector<execution_record> out;
  for (auto& id : get(f.rt->db()->subtree_ids(root)))
    out.push_back(get(f.rt->db()->execution(id)));
  return out;
}

} // namespace

TEST_CASE("a runtime with no start permits or no subprocess slots is refused before it opens "
          "anything",
          "[runtime][gate]") {
  struct zero_option {
    const char* name;
    size_t runtime_options::*field;
  };
  for (auto [name, field] : {zero_option{"start_permits", &runtime_options::start_permits},
                             zero_option{"max_parallel", &runtime_options::max_parallel}}) {
    INFO(name);
    test::temp_dir dir;
    runtime_options opts;
    opts.home = dir.path + "/home";
    opts.*field = 0;
    auto rt = runtime::open(opts);
    REQUIRE(!rt);
    CHECK(rt.error().code() == static_cast<uint8_t>(runtime_errc::invalid_input));
    CHECK_THAT(message_of(rt.error()), Catch::Contains(std::string{name} + " is 0"));
    CHECK(!std::filesystem::exists(opts.home));
  }
}

TEST_CASE("a tree of 111 executions starts and completes through a gate of 3 permits",
          "[runtime][gate]") {
  fixture f{0, 3};
  json leaf = {{"steps", {{"s", {{"fn", "noop"}}}}}};
  auto h = f.start(square_tree(10, leaf));
  CHECK(f.finish(h).status == execution_status::completed);
  auto all = tree_of(f, h.id());
  CHECK(all.size() == 111);
  for (auto& e : all) {
    INFO(e.id);
    CHECK(e.status == execution_status::completed);
  }
}

TEST_CASE("a stop while most of a tree waits at the start gate ends every execution stopped",
          "[runtime][gate][stop]") {
  fixture f{0, 2};
  json leaf = {{"steps", {{"s", {{"fn", "sleep"}, {"with", {{"ms", 600000}}}}}}}};
  auto h = f.start(square_tree(12, leaf));
  auto seen = std::make_shared<collector>();
  auto sub = h.subscribe(seen->callback());
  // Stop once the first leaf sleeps: the gate holds most of the tree back.
  REQUIRE(test::eventually([&] {
    for (auto& e : seen->snapshot())
      if (e.type == event_type::step_started && e.step == "s")
        return true;
    return false;
  }));
  REQUIRE(h.stop());
  CHECK(f.finish(h).status == execution_status::stopped);
  for (auto& e : tree_of(f, h.id())) {
    INFO(e.id << " " << to_string(e.status));
    CHECK(e.status == execution_status::stopped);
  }
  CHECK(get(f.rt->db()->live()).empty());
  // The gate gave every permit back: a new tree starts and completes.
  json quick = {{"steps", {{"s", {{"fn", "noop"}}}}}};
  auto again = f.start(square_tree(3, quick));
  CHECK(f.finish(again).status == execution_status::completed);
}
