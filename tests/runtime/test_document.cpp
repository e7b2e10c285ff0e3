// What a tree's model calls used (runtime/node/document.hpp model_totals) and how
// `show` prints it (render_document), over hand-made tree documents.

#include <catch2/catch.hpp>

#include "runtime/node/document.hpp"
#include "runtime/cli/render.hpp"

using namespace canopy::core;
using json = nlohmann::json;

namespace {

json call(int64_t in, int64_t out, json spend = nullptr) {
  json r = {{"content", "ok"}, {"usage", {{"prompt_tokens", in}, {"completion_tokens", out}}}};
  if (!spend.is_null())
    r["spend"] = spend;
  return {{"status", "completed"}, {"kind", "llm"}, {"needs", json::array()}, {"result", r}};
}

json doc(json steps, json children = json::array()) {
  return {{"graph", "g"}, {"id", "x"}, {"status", "completed"},
          {"steps", std::move(steps)}, {"children", std::move(children)}};
}

} // namespace

TEST_CASE("a tree's model totals sum every call of every execution in it",
          "[runtime][document][llm]") {
  // A single call, and a tool loop whose two turns are child executions.
  auto turn1 = doc({{"model", call(100, 20, 0.002)},
                    {"search_1", {{"status", "completed"}, {"result", {{"stdout", "x"}}}}}});
  auto turn2 = doc({{"model", call(200, 30, 0.003)}});
  auto tree = doc({{"summary", call(50, 10, 0.001)},
                   {"check", {{"status", "completed"}, {"kind", "llm"},
                              {"result", {{"content", "done"}, {"turns", 2}}}}}},
                  {turn1, turn2});
  auto totals = model_totals(tree);
  CHECK(totals["calls"] == 3);
  CHECK(totals["prompt_tokens"] == 350);
  CHECK(totals["completion_tokens"] == 60);
  CHECK(totals["tokens"] == 410);
  CHECK(totals["spend"].get<double>() == Approx(0.006));

  tree["model"] = totals;
  CHECK_THAT(render_document(tree, 0),
             Catch::Contains("model: 3 calls · 410 tokens (350 in, 60 out) · spent 0.006\n"));
}

TEST_CASE("a tree without priced calls has no spend, and one without calls has no totals",
          "[runtime][document][llm]") {
  auto unpriced = model_totals(doc({{"ask", call(7, 3)}}));
  CHECK(unpriced["calls"] == 1);
  CHECK(unpriced["spend"].is_null());
  auto tree = doc({{"ask", call(7, 3)}});
  tree["model"] = unpriced;
  auto text = render_document(tree, 0);
  CHECK_THAT(text, Catch::Contains("model: 1 call · 10 tokens (7 in, 3 out)\n"));
  CHECK_THAT(text, !Catch::Contains("spent"));

  auto none = doc({{"a", {{"status", "completed"}, {"result", {{"stdout", ""}}}}}});
  CHECK(model_totals(none).is_null());
  CHECK_THAT(render_document(none, 0), !Catch::Contains("model:"));
}
