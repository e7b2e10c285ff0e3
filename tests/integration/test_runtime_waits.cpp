// Waits through the embedded library: a signal to the root reaches a wait
// in a child graph, a signal sent before its wait is armed is buffered and
// taken when it arms, two armed waits of one name need a step to pick one,
// and `execution_handle::signal` answers what became of it. Real actor
// system, real LMDB in a temp home; every wait is an event wait.

#include "runtime/node/runtime.hpp"

#include <catch2/catch.hpp>

#include <string>

#include "persistence/error.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;
using namespace std::chrono_literals;

namespace {

template <class T>
T get(caf::expected<T> x) {
  INFO("error: " << (x ? std::string{} : message_of(x.error())));
  REQUIRE(x);
  return std::move(*x);
}

struct fixture {
  test::temp_dir dir;
  std::unique_ptr<runtime> rt;

  fixture() {
    runtime_options opts;
    opts.home = dir.path + "/home";
    rt = get(runtime::open(opts));
  }

  execution_handle start(const json& doc) {
    auto parsed = parse_graph(doc, dir.path, rt->graph_options());
    INFO(doc.dump());
    REQUIRE(parsed);
    return get(rt->start(parsed.value, json::object()));
  }

  /// The step `step` of execution `id` once it has `status` (any execution
  /// of the tree when `id` is empty). @returns its execution id.
  std::string await(const std::string& root, const std::string& step, step_status status) {
    std::string found;
    REQUIRE(test::eventually(
      [&] {
        auto ids = rt->db()->subtree_ids(root);
        if (!ids)
          return false;
        for (auto& id : *ids)
          if (auto steps = rt->db()->steps(id))
            for (auto& s : *steps)
              if (s.step == step && s.status == status) {
                found = id;
                return true;
              }
        return false;
      },
      30s, 2ms));
    return found;
  }
};

json wait_step(const std::string& signal) {
  return {{"wait", {{"signal", signal}, {"timeout", "1h"}}}};
}

} // namespace

TEST_CASE("a signal sent to the root reaches a wait in a child graph and its value flows up",
          "[runtime][waits]") {
  fixture f;
  json child = {{"steps", {{"ask", wait_step("go")}}},
                {"outputs", {{"answer", "${steps.ask.value}"}}}};
  json doc = {{"name", "outer"},
              {"steps", {{"review", {{"graph", child}}}}},
              {"outputs", {{"answer", "${steps.review.answer}"}}}};
  auto h = f.start(doc);
  auto child_id = f.await(h.id(), "ask", step_status::waiting);
  CHECK(child_id != h.id());
  auto a = get(h.signal("go", json{{"n", 7}}));
  CHECK(a.decision.outcome == signal_outcome::store);
  REQUIRE(a.consumed);
  CHECK(a.consumed_execution == child_id);
  CHECK(a.consumed_step == "ask");
  REQUIRE(h.wait_for(60s));
  auto rec = get(h.status());
  CHECK(rec.status == execution_status::completed);
  CHECK(rec.outputs == json{{"answer", {{"n", 7}}}});
  auto sigs = get(f.rt->db()->signals(h.id()));
  REQUIRE(sigs.size() == 1);
  CHECK(sigs[0].state == signal_state::consumed);
  CHECK(sigs[0].wait_execution == child_id);
}

TEST_CASE("a signal sent before its wait is armed is buffered, and the wait takes it when it "
          "arms",
          "[runtime][waits]") {
  fixture f;
  auto gate = f.dir.path + "/gate";
  json doc = {{"name", "early"},
              {"steps",
               {{"first",
                 {{"run", {"sh", "-c", "while [ ! -f \"$G\" ]; do sleep 0.01; done"}},
                  {"env", {{"G", gate}}}}},
                {"ask", {{"needs", {"first"}}, {"wait", {{"signal", "go"}}}}}}},
              {"outputs", {{"v", "${steps.ask.value}"}}}};
  auto h = f.start(doc);
  f.await(h.id(), "first", step_status::running);
  auto a = get(h.signal("go", "early"));
  CHECK(a.decision.outcome == signal_outcome::store);
  CHECK_FALSE(a.consumed);
  test::touch(gate);
  REQUIRE(h.wait_for(60s));
  auto rec = get(h.status());
  CHECK(rec.status == execution_status::completed);
  CHECK(rec.outputs == json{{"v", "early"}});
}

TEST_CASE("two waits armed under one name need a step path, and each takes its own signal",
          "[runtime][waits]") {
  fixture f;
  json doc = {{"name", "pair"},
              {"steps", {{"left", wait_step("go")}, {"right", wait_step("go")}}},
              {"outputs", {{"l", "${steps.left.value}"}, {"r", "${steps.right.value}"}}}};
  auto h = f.start(doc);
  f.await(h.id(), "left", step_status::waiting);
  f.await(h.id(), "right", step_status::waiting);
  auto both = get(h.signal("go", 1));
  CHECK(both.decision.outcome == signal_outcome::ambiguous);
  CHECK(both.decision.steps == std::vector<std::string>{"left", "right"});
  execution_handle::signal_options right;
  right.step = "right";
  auto r = get(h.signal("go", 2, right));
  REQUIRE(r.consumed);
  CHECK(r.consumed_step == "right");
  execution_handle::signal_options left;
  left.step = "left";
  left.key = "once";
  auto l = get(h.signal("go", 1, left));
  REQUIRE(l.consumed);
  auto again = get(h.signal("go", 1, left));
  CHECK(again.decision.outcome == signal_outcome::replay);
  CHECK(again.consumed);
  REQUIRE(h.wait_for(60s));
  auto rec = get(h.status());
  CHECK(rec.outputs == json{{"l", 1}, {"r", 2}});
  CHECK(get(f.rt->db()->signals(h.id())).size() == 2);
}
