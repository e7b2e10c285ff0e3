// Retention: `canopy prune` on a local home, and the plain
// prune function's batching and rules.

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "persistence/error.hpp"
#include "persistence/retention.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// Ids of the home's root executions.
std::set<std::string> root_ids(const std::string& home) {
  auto r = run_canopy(home, {"ls", "--json"});
  REQUIRE(r.exit_code == 0);
  std::set<std::string> out;
  for (auto& e : r.out_json())
    out.insert(e["id"].get<std::string>());
  return out;
}

/// Runs `file` to its end; @returns the execution id.
std::string run_to_end(const std::string& home, const std::string& file) {
  auto r = run_canopy(home, {"run", file, "--json"}, 60s);
  INFO(r.err);
  REQUIRE(r.out_json().is_object());
  return r.out_json()["id"].get<std::string>();
}

} // namespace

TEST_CASE("prune deletes settled trees past the age, counts their executions, frees space in "
          "the store and leaves live and recent trees",
          "[integration][cli][retention]") {
  temp_dir home;
  temp_dir g;
  auto child = g.write("child.json", R"({"steps": {"x": {"fn": "echo", "with": {"v": 1}}}})");
  // Some bulk, so that the freed pages show.
  std::string big(20000, 'x');
  auto parent = g.write("parent.json", R"({"steps": {"c": {"graph": "child.json"},
    "big": {"fn": "echo", "with": {"text": ")" + big + R"("}}}})");
  auto failing = g.write("fail.json", R"({"steps": {"f": {"fn": "fail"}}})");
  auto gate = g.path + "/gate";
  auto held = g.write("held.json", R"({"steps": {"w": {"run": ["sh", "-c",
    "while [ ! -e \"$1\" ]; do sleep 0.05; done", "w", ")" + gate + R"("]}}})");
  std::vector<std::string> done;
  for (int i = 0; i < 6; ++i)
    done.push_back(run_to_end(home.path, parent));
  auto failed = run_to_end(home.path, failing);
  auto r = run_canopy(home.path, {"run", held, "--detach", "--json"}, 30s);
  REQUIRE(r.exit_code == 0);
  auto live = r.out_json()["id"].get<std::string>();
  REQUIRE(root_ids(home.path).size() == 8);

  // Nothing is old enough yet.
  auto none = run_canopy(home.path, {"prune", "--older-than", "1d"});
  CHECK(none.exit_code == 0);
  CHECK(none.out.rfind("pruned 0 trees (0 executions)", 0) == 0);

  // A dry run counts and deletes nothing.
  auto dry = run_canopy(home.path, {"prune", "--older-than", "0s", "--dry-run", "--json"});
  INFO(dry.err);
  REQUIRE(dry.exit_code == 0);
  CHECK(dry.out_json()["trees"] == 7);
  CHECK(dry.out_json()["executions"] == 13); // 6 parents with a child each, and the failed one
  CHECK(root_ids(home.path).size() == 8);

  // By status.
  auto only_failed = run_canopy(home.path, {"prune", "--older-than", "0s", "--status", "failed"});
  CHECK(only_failed.exit_code == 0);
  CHECK(only_failed.out.rfind("pruned 1 tree (1 execution)", 0) == 0);
  CHECK(root_ids(home.path).count(failed) == 0);

  auto all = run_canopy(home.path, {"prune", "--older-than", "0s", "--json"});
  INFO(all.err);
  REQUIRE(all.exit_code == 0);
  CHECK(all.out_json()["trees"] == 6);
  CHECK(all.out_json()["executions"] == 12);
  CHECK(all.out_json()["used_bytes_after"].get<uint64_t>()
        < all.out_json()["used_bytes_before"].get<uint64_t>());
  CHECK(root_ids(home.path) == std::set<std::string>{live});
  for (auto& id : done) {
    auto show = run_canopy(home.path, {"show", id});
    CHECK(show.exit_code == 4);
    CHECK(run_canopy(home.path, {"events", id}).exit_code == 4);
  }
  // The live tree was never touched and still completes.
  touch(gate);
  auto follow = run_canopy(home.path, {"events", live, "--follow", "--json"}, 60s);
  CHECK(follow.exit_code == 0);
  CHECK(run_canopy(home.path, {"show", live, "--json"}).out_json()["status"] == "completed");
}

TEST_CASE("prune refuses a bad age or status with exit 2 and names it", "[integration][cli][retention]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"prune", "--older-than", "7x"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--older-than") && Catch::Contains("7x"));
  r = run_canopy(home.path, {"prune", "--older-than", "7d", "--status", "running"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--status") && Catch::Contains("running"));
  r = run_canopy(home.path, {"prune"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--older-than") && Catch::Contains("--config"));
  temp_dir cfg;
  auto none = cfg.write("none.json", R"({"users": {"a": {"token": "t"}}})");
  r = run_canopy(home.path, {"prune", "--config", none});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no \"retention\""));
  auto bad = cfg.write("bad.json", R"({"retention": {"completed": "soon"}})");
  r = run_canopy(home.path, {"prune", "--config", bad});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/retention/completed"));
  r = run_canopy(home.path, {"prune", "--config", bad, "--older-than", "1d"});
  CHECK(r.exit_code == 2);
}

TEST_CASE("prune --config takes the config's retention rules: only the statuses with an age go",
          "[integration][cli][retention]") {
  temp_dir home;
  temp_dir g;
  auto ok = g.write("ok.json", R"({"steps": {"x": {"fn": "echo", "with": {"v": 1}}}})");
  auto failing = g.write("fail.json", R"({"steps": {"f": {"fn": "fail"}}})");
  auto done = run_to_end(home.path, ok);
  auto failed = run_to_end(home.path, failing);
  auto config = g.write("node.json", R"({"retention": {"completed": "1ms", "failed": "30d"}})");
  auto r = run_canopy(home.path, {"prune", "--config", config, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out_json()["trees"] == 1);
  CHECK(root_ids(home.path) == std::set<std::string>{failed});
  (void) done;
}

TEST_CASE("retention rules read each status's age and name a bad key or value by its path",
          "[persistence][retention]") {
  auto r = retention_from_json(json{{"completed", "7d"}, {"stopped", "12h"}});
  REQUIRE(r);
  CHECK(r->completed == millis{7 * 86'400'000LL});
  CHECK(r->stopped == millis{12 * 3'600'000LL});
  CHECK(!r->failed);
  CHECK(r->age_of(execution_status::completed) == r->completed);
  CHECK(!r->age_of(execution_status::running));
  auto bad_key = retention_from_json(json{{"running", "1d"}});
  REQUIRE(!bad_key);
  CHECK_THAT(message_of(bad_key.error()), Catch::Contains("/retention/running"));
  auto bad_value = retention_from_json(json{{"failed", 30}});
  REQUIRE(!bad_value);
  CHECK_THAT(message_of(bad_value.error()), Catch::Contains("/retention/failed"));
  CHECK(!retention_from_json(json::array()));
}

TEST_CASE("prune deletes in commits of at most the given number of trees and only what is due",
          "[persistence][retention]") {
  temp_dir dir;
  store_options o;
  o.home = dir.path;
  auto db = store::open(o);
  REQUIRE(db);
  write_batch b;
  auto now = now_ms();
  for (int i = 0; i < 5; ++i) {
    execution_record x;
    x.id = "old" + std::to_string(i);
    x.root_id = x.id;
    x.status = execution_status::completed;
    x.created_at = now - 100'000;
    x.ended_at = now - 90'000;
    b.executions.push_back(x);
  }
  execution_record recent;
  recent.id = "recent";
  recent.root_id = recent.id;
  recent.status = execution_status::completed;
  recent.ended_at = now - 1000;
  b.executions.push_back(recent);
  execution_record old_stopped = b.executions.front();
  old_stopped.id = old_stopped.root_id = "stopped";
  old_stopped.status = execution_status::stopped;
  b.executions.push_back(old_stopped);
  REQUIRE(!(*db)->commit(b));

  retention_rules rules;
  rules.completed = millis{60'000};
  std::vector<size_t> sizes;
  auto commit = [&](write_batch w) {
    sizes.push_back(w.deleted_trees.size());
    return (*db)->commit(w);
  };
  auto r = prune(**db, rules, now, false, commit, 2);
  REQUIRE(r);
  CHECK(r->trees == 5);
  CHECK(r->commits == 3);
  CHECK(sizes == std::vector<size_t>{2, 2, 1});
  CHECK((*db)->execution("recent"));
  CHECK((*db)->execution("stopped")); // no age for stopped trees: kept
  CHECK(!(*db)->execution("old0"));
  auto again = prune(**db, rules, now, false, commit, 2);
  REQUIRE(again);
  CHECK(again->trees == 0);
}
