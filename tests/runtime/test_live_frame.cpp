// The live tree's frame (runtime/cli/live_frame.hpp) laid out as plain data:
// fitting a window, folding, clipping, widths of coloured UTF-8 text; and
// the tree_view that builds it from events (runtime/cli/render.hpp).

#include <catch2/catch.hpp>

#include "persistence/duration.hpp"

#include <map>

#include "runtime/cli/live_frame.hpp"
#include "runtime/cli/render.hpp"

using namespace canopy::core;

namespace {

frame_step step(const std::string& name, const std::string& status) {
  frame_step s;
  s.name = name;
  s.status = status;
  return s;
}

/// A root with `completed`, `running` and `pending` steps, in that order.
frame_model tree(size_t completed, size_t running, size_t pending) {
  frame_model m;
  m.graph = "wide";
  m.id = "01ABC";
  m.status = "running";
  size_t n = 0;
  for (size_t i = 0; i < completed; ++i)
    m.steps.push_back(step("s" + std::to_string(n++), "completed"));
  for (size_t i = 0; i < running; ++i) {
    auto s = step("s" + std::to_string(n++), "running");
    s.last_line = "working " + std::to_string(i);
    m.steps.push_back(s);
  }
  for (size_t i = 0; i < pending; ++i)
    m.steps.push_back(step("s" + std::to_string(n++), "pending"));
  return m;
}

} // namespace

TEST_CASE("a tree that fits the window is drawn whole, completed steps included",
          "[runtime][render]") {
  auto lines = layout_frame(tree(2, 1, 1), {20, 80}, false);
  CHECK(lines == std::vector<std::string>{"wide 01ABC running", "├─ s0 completed",
                                          "├─ s1 completed", "├─ s2 running  working 0",
                                          "└─ s3 pending"});
}

TEST_CASE("a tree taller than the window folds its completed steps into one line",
          "[runtime][render]") {
  auto m = tree(38, 3, 4);
  m.notices.push_back("stopping… (Ctrl-C again to force)");
  auto lines = layout_frame(m, {20, 80}, false);
  CHECK(lines == std::vector<std::string>{"wide 01ABC running",
                                          "stopping… (Ctrl-C again to force)",
                                          "✓ 38 completed", "├─ s38 running  working 0",
                                          "├─ s39 running  working 1",
                                          "├─ s40 running  working 2", "├─ s41 pending",
                                          "├─ s42 pending", "├─ s43 pending",
                                          "└─ s44 pending"});
}

TEST_CASE("a frame that still does not fit is clipped to rows - 1 lines with a count of the "
          "rest",
          "[runtime][render]") {
  auto m = tree(5, 2, 100);
  m.notices.push_back("forcing stop…");
  for (size_t rows : {4u, 10u, 20u, 50u}) {
    auto lines = layout_frame(m, {rows, 80}, true);
    INFO("rows " << rows);
    REQUIRE(lines.size() == rows - 1);
    CHECK_THAT(lines[0], Catch::StartsWith("wide 01ABC "));
    CHECK_THAT(lines[1], Catch::Contains("forcing stop…"));
    // Header, notice, summary and 102 steps: all but rows - 2 are counted.
    auto shown = rows - 2;
    CHECK_THAT(lines.back(),
               Catch::Contains("… +" + std::to_string(105 - shown) + " more"));
  }
  // A window too small for more than the header and notice shows those.
  CHECK(layout_frame(m, {3, 80}, false)
        == std::vector<std::string>{"wide 01ABC running", "forcing stop…"});
  CHECK(layout_frame(m, {2, 80}, false) == std::vector<std::string>{"wide 01ABC running"});
}

TEST_CASE("completed steps inside a running child execution fold too, and the tree's "
          "connectors follow the steps shown",
          "[runtime][render]") {
  frame_model m;
  m.graph = "team";
  m.id = "01X";
  m.status = "running";
  m.steps.push_back(step("plan", "completed"));
  auto r = step("research", "running");
  r.child_graph = "researcher";
  r.child_status = "running";
  for (int i = 0; i < 20; ++i)
    r.children.push_back(step("c" + std::to_string(i), i < 18 ? "completed" : "running"));
  m.steps.push_back(r);
  m.steps.push_back(step("write", "pending"));
  auto lines = layout_frame(m, {10, 80}, false);
  CHECK(lines == std::vector<std::string>{"team 01X running", "✓ 19 completed",
                                          "├─ research running  → researcher running",
                                          "│  ├─ c18 running", "│  └─ c19 running",
                                          "└─ write pending"});
}

TEST_CASE("every line is cut to the width less one column, colour codes and box characters "
          "counted right",
          "[runtime][render]") {
  auto m = tree(1, 1, 1);
  m.steps[1].last_line = std::string(200, 'x');
  m.steps[2].name = "a-step-with-a-rather-long-name-" + std::string(80, 'n');
  for (size_t cols : {10u, 30u, 80u}) {
    for (bool colour : {false, true}) {
      INFO("cols " << cols << " colour " << colour);
      auto lines = layout_frame(m, {20, cols}, colour);
      REQUIRE(lines.size() == 4);
      for (auto& l : lines)
        CHECK(display_width(l) <= cols - 1);
      CHECK(display_width(lines[3]) == cols - 1);
      CHECK_THAT(lines[3], Catch::EndsWith("…"));
    }
  }
  // The final frame (no window) keeps every line whole.
  auto whole = layout_frame(m, {}, false);
  CHECK(whole[2] == "├─ s1 running  " + std::string(59, 'x') + "…");
  CHECK(display_width(whole[3]) == 3 + m.steps[2].name.size() + 8);
}

TEST_CASE("display widths: escape sequences none, box characters one, wide characters two",
          "[runtime][render]") {
  CHECK(display_width("\033[32mcompleted\033[0m") == 9);
  CHECK(display_width("├─ │  └─ ✓ … →") == 14);
  CHECK(display_width("漢字") == 4);
  CHECK(display_width("🎉") == 2);
  CHECK(display_width("e\xCC\x81") == 1); // e + combining acute
  CHECK(display_width("\xFF\xFE") == 2);  // invalid bytes: a column each
  CHECK(fit_width("漢字漢字", 5) == "漢字…");
  CHECK(fit_width("abc", 3) == "abc");
  CHECK(fit_width("abcd", 3) == "ab…");
  CHECK(fit_width("\033[31mabcd\033[0m", 3) == "\033[31mab…\033[0m");
  CHECK(fit_width("abcd", 0).empty());
}

TEST_CASE("a step's output cannot move the cursor or colour the frame", "[runtime][render]") {
  CHECK(printable("a\033[2Jb\tc\rd\x7f" "e") == "a [2Jb c d e");
  CHECK(printable("\xC2\x9B" "1m") == " 1m"); // C1 CSI
  CHECK(printable("ok \xFF") == "ok ?");
  CHECK(printable("漢字 ✓") == "漢字 ✓");
}

TEST_CASE("a failed step's last stderr lines are shown under it", "[runtime][render]") {
  frame_model m;
  m.graph = "demo";
  m.id = "01F";
  m.status = "failed";
  m.reason = "step_failed";
  auto boom = step("boom", "failed");
  boom.stderr_tail = {"err 6", "err 7"};
  m.steps.push_back(boom);
  m.steps.push_back(step("after", "pending"));
  CHECK(layout_frame(m, {}, false)
        == std::vector<std::string>{"demo 01F failed (step_failed)", "├─ boom failed",
                                    "│    stderr: err 6", "│    stderr: err 7",
                                    "└─ after pending"});
}

// -- the escalation as it happens (tree_view) --------------------------------------------

namespace {

/// A tree_view of root `r1` (graph `team`, one step `search`), whose
/// lookups answer from plain data.
tree_view team_view() {
  tree_source src;
  src.execution = [](const std::string& id) -> std::optional<execution_record> {
    execution_record r;
    r.id = id;
    r.root_id = id;
    r.graph = "team";
    r.status = execution_status::running;
    return r;
  };
  src.graph_document = [](const std::string&) -> std::optional<nlohmann::json> {
    return nlohmann::json{{"steps", {{"search", {{"run", {"sh"}}}}}}};
  };
  return tree_view{std::move(src), "r1", false};
}

event_record event(const std::string& type, int64_t time, const std::string& step,
                   const std::string& status, nlohmann::json data = nullptr) {
  event_record e;
  e.time = time;
  from_string(type, e.type);
  e.execution_id = "r1";
  e.root_id = "r1";
  e.step = step;
  from_string(status, !step.empty(), e.status);
  e.data = std::move(data);
  return e;
}

nlohmann::json signalled(const char* sig, nlohmann::json next, nlohmann::json in) {
  return {{"attempt", 1}, {"signal", sig}, {"next", std::move(next)}, {"next_in_ms", std::move(in)}};
}

} // namespace

TEST_CASE("a stopping step's line shows the last signal sent to it and counts down to the next",
          "[runtime][render]") {
  auto v = team_view();
  const int64_t t = 1'700'000'000'000;
  v.apply(event("execution.started", t - 5000, {}, "running"));
  v.apply(event("step.started", t - 4000, "search", "running", {{"attempt", 1}}));
  v.apply(event("step.output", t - 3000, "search", {}, {{"stream", "stdout"}, {"line", "ready"}}));
  CHECK(v.next_change(t) == std::nullopt); // no countdown: no redraw needed
  v.apply(event("execution.stopping", t - 10, {}, "stopping"));
  v.apply(event("step.signalled", t, "search", {}, signalled("SIGINT", "SIGTERM", 10'000)));
  auto line = [&](int64_t now) { return v.render({}, now).back(); };
  CHECK(line(t) == "└─ search stopping  SIGINT sent · SIGTERM in 10s  ready");
  CHECK(line(t + 1) == "└─ search stopping  SIGINT sent · SIGTERM in 10s  ready");
  CHECK(line(t + 1000) == "└─ search stopping  SIGINT sent · SIGTERM in 9s  ready");
  CHECK(line(t + 9999) == "└─ search stopping  SIGINT sent · SIGTERM in 1s  ready");
  CHECK(line(t + 60'000) == "└─ search stopping  SIGINT sent · SIGTERM in 0s  ready");
  // The frame changes when the seconds do, and not after 0.
  CHECK(v.next_change(t) == t + 1000);
  CHECK(v.next_change(t + 1) == t + 1000);
  CHECK(v.next_change(t + 1000) == t + 2000);
  CHECK(v.next_change(t + 9999) == t + 10'000);
  CHECK(v.next_change(t + 10'000) == std::nullopt);

  v.apply(event("step.signalled", t + 10'050, "search", {}, signalled("SIGTERM", "SIGKILL", 5000)));
  CHECK(line(t + 10'050) == "└─ search stopping  SIGTERM sent · SIGKILL in 5s  ready");
  v.apply(event("step.signalled", t + 15'100, "search", {}, signalled("SIGKILL", nullptr, nullptr)));
  CHECK(line(t + 15'100) == "└─ search stopping  SIGKILL sent  ready");
  CHECK(v.next_change(t + 15'100) == std::nullopt);

  // Reset by the stop: the signals were of the attempt that ended.
  v.apply(event("step.pending", t + 15'200, "search", "pending"));
  CHECK(line(t + 15'200) == "└─ search pending");
  v.apply(event("execution.resumed", t + 19'000, {}, "running"));
  v.apply(event("step.started", t + 20'000, "search", "running", {{"attempt", 2}}));
  CHECK(line(t + 20'000) == "└─ search running  ready");
}

TEST_CASE("a waiting step's line shows its signal and what is left until its deadline, and the "
          "frame changes as that does",
          "[runtime][render]") {
  auto v = team_view();
  const int64_t t = 1'700'000'000'000;
  const int64_t deadline = t + 24 * 3'600'000;
  v.apply(event("execution.started", t - 5000, {}, "running"));
  v.apply(event("step.waiting", t, "search", "waiting",
                {{"attempt", 1}, {"signal", "approval"}, {"deadline", canopy::core::to_rfc3339(deadline)},
                 {"prompt", "Go?"}}));
  auto line = [&](int64_t now) { return v.render({}, now).back(); };
  CHECK(line(t + 60'000) == "└─ search waiting · approval · 23h59m left");
  CHECK(line(deadline - 4'000) == "└─ search waiting · approval · 4.0s left");
  CHECK(line(deadline) == "└─ search waiting · approval · deadline passed");
  CHECK(v.next_change(t + 1) == t + 1000);
  CHECK(v.next_change(deadline) == std::nullopt);
  // Taken: the line is the step's, nothing of the wait stays.
  v.apply(event("step.completed", t + 5000, "search", "completed"));
  CHECK(line(t + 5000) == "└─ search completed");
  CHECK(v.next_change(t + 5000) == std::nullopt);
}

TEST_CASE("a running step's timeout escalation shows on its line, and signals of unknown steps "
          "are ignored",
          "[runtime][render]") {
  auto v = team_view();
  const int64_t t = 1'700'000'000'000;
  v.apply(event("step.started", t - 4000, "search", "running", {{"attempt", 1}}));
  v.apply(event("step.signalled", t, "search", {}, signalled("SIGINT", "SIGTERM", 300)));
  v.apply(event("step.signalled", t, "nope", {}, signalled("SIGINT", "SIGTERM", 300)));
  CHECK(v.render({}, t) == std::vector<std::string>{"team r1 running",
                                                    "└─ search running  SIGINT sent · SIGTERM in 1s"});
  CHECK(v.next_change(t) == t + 300);
  v.apply(event("step.failed", t + 400, "search", "failed", {{"error", "timeout"}}));
  CHECK(v.render({}, t + 400).back() == "└─ search failed");
}

TEST_CASE("a step the graph did not list appears when it prints or changes status",
          "[runtime][render]") {
  auto v = team_view();
  const int64_t t = 1'700'000'000'000;
  v.apply(event("step.output", t, "extra", {}, {{"stream", "stdout"}, {"line", "hello"}}));
  CHECK(v.render({}, t) == std::vector<std::string>{"team r1 running", "├─ search pending",
                                                    "└─ extra running  hello"});
  v.apply(event("step.completed", t + 1, "extra", "completed"));
  v.apply(event("step.queued", t + 2, "late", "queued"));
  CHECK(v.render({}, t + 2) == std::vector<std::string>{"team r1 running", "├─ search pending",
                                                        "├─ extra completed",
                                                        "└─ late queued"});
}

TEST_CASE("canopy events prints a signal sent to a step with the next one and its delay",
          "[runtime][render]") {
  auto e = event("step.signalled", 0, "search", {}, signalled("SIGTERM", "SIGKILL", 5000));
  CHECK(event_line(e, "team") == "00:00:00.000 step.signalled      team/search SIGTERM (SIGKILL in 5s)");
  e.data = signalled("SIGINT", "SIGTERM", 300);
  CHECK_THAT(event_line(e, "team"), Catch::EndsWith("team/search SIGINT (SIGTERM in 300ms)"));
  e.data = signalled("SIGKILL", nullptr, nullptr);
  CHECK_THAT(event_line(e, "team"), Catch::EndsWith("team/search SIGKILL"));
}

TEST_CASE("lookups run before the view changes: look_up asks the source for an execution and "
          "its unknown ancestors, and learn and apply ask nothing more",
          "[runtime][render]") {
  // r1 (graph team) runs step `sub`, whose child c1 (graph inner) runs `deep`,
  // whose child g1 (graph leaf) runs `work`.
  struct node {
    std::string parent, step, graph, first_step;
  };
  std::map<std::string, node> tree{{"r1", {"", "", "team", "sub"}},
                                   {"c1", {"r1", "sub", "inner", "deep"}},
                                   {"g1", {"c1", "deep", "leaf", "work"}}};
  int asked = 0;
  tree_source src;
  src.execution = [&](const std::string& id) -> std::optional<execution_record> {
    ++asked;
    auto& n = tree.at(id);
    execution_record r;
    r.id = id;
    r.root_id = "r1";
    r.parent_id = n.parent;
    r.parent_step = n.step;
    r.graph = n.graph;
    r.status = execution_status::running;
    return r;
  };
  src.graph_document = [&](const std::string& id) -> std::optional<nlohmann::json> {
    return nlohmann::json{{"steps", {{tree.at(id).first_step, {{"fn", "noop"}}}}}};
  };
  auto started = [](const std::string& ex, const std::string& step) {
    auto e = event("step.started", 1000, step, "running");
    e.execution_id = ex;
    return e;
  };
  tree_view inline_view{src, "r1", false};
  inline_view.apply(started("r1", "sub"));
  inline_view.apply(started("g1", "work"));

  tree_view split{src, "r1", false};
  asked = 0;
  auto found = split.look_up("r1");
  CHECK(asked == 1);
  CHECK(found.size() == 1);
  split.learn(std::move(found));
  split.apply(started("r1", "sub"));
  CHECK(asked == 1);
  // The grandchild: it and its parent are looked up, the known root is not.
  found = split.look_up("g1");
  CHECK(asked == 3);
  REQUIRE(found.size() == 2);
  CHECK(found[0].id == "g1");
  CHECK(found[1].id == "c1");
  auto before = split.render({}, 2000);
  CHECK(split.look_up("r1").empty()); // known: nothing asked
  CHECK(asked == 3);
  split.learn(std::move(found));
  split.apply(started("g1", "work"));
  CHECK(asked == 3);
  CHECK(split.label("g1") == "team/sub/deep");
  CHECK(split.render({}, 2000) == inline_view.render({}, 2000));
  CHECK(before != split.render({}, 2000));
}
