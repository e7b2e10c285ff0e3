// The server's retention: the config's `retention` rules prune
// settled trees past their age on a running `canopy serve`, and the metrics
// `canopy_pruned_total` and `canopy_store_bytes` show it.

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// The value of the sample `name` (with its labels) in a Prometheus text;
/// -1 when there is none.
double metric(const std::string& text, const std::string& name) {
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0
        && line[name.size()] == ' ')
      return std::stod(line.substr(name.size() + 1));
  return -1;
}

std::string metrics_text(httplib::Client& c) {
  auto a = request(c, "GET", "/metrics");
  REQUIRE(a.status == 200);
  return a.text;
}

} // namespace

TEST_CASE("a server prunes settled trees past their retention age on its own and leaves live "
          "trees and statuses without an age",
          "[integration][server][retention]") {
  server_process::options o;
  o.config = {{"retention", {{"completed", "3s"}, {"interval", "1s"}}}};
  server_process srv{o};
  auto c = srv.client(alice_token);
  for (auto& g : {json{{"name", "quick"}, {"steps", {{"e", {{"fn", "echo"}, {"with", {{"v", 1}}}}}}}},
                  json{{"name", "bad"}, {"steps", {{"f", {{"fn", "fail"}}}}}},
                  json{{"name", "long"},
                       {"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", 120000}}}}}}}}}) {
    auto a = post_json(c, "/v1/graphs", g);
    REQUIRE(a.status == 201);
  }
  auto start = [&](const std::string& graph) {
    auto a = post_json(c, "/v1/graphs/" + graph + "/executions", {{"inputs", json::object()}});
    REQUIRE(a.status == 201);
    return a.body["id"].get<std::string>();
  };
  auto live = start("long");
  auto failed = start("bad");
  std::vector<std::string> quick;
  for (int i = 0; i < 5; ++i)
    quick.push_back(start("quick"));
  // Each is seen completed first (its age counts from its end).
  for (auto& id : quick)
    CHECK(wait_status(c, id, "completed")["status"] == "completed");
  CHECK(wait_status(c, failed, "failed")["status"] == "failed");
  auto before = metrics_text(c);
  CHECK(metric(before, "canopy_store_bytes") > 0);

  // Pruned in the background: wait for the counter, then look.
  auto deadline = std::chrono::steady_clock::now() + 60s;
  auto after = metrics_text(c);
  while (metric(after, "canopy_pruned_total") < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms); // the poll interval of the wait, as wait_until's
    after = metrics_text(c);
  }
  INFO("metrics:\n" << after << "\nserver log:\n" << srv.log());
  CHECK(metric(after, "canopy_pruned_total") == 5);
  CHECK(metric(after, "canopy_executions{status=\"completed\"}") == 0);
  CHECK(metric(after, "canopy_executions{status=\"failed\"}") == 1);
  CHECK(metric(after, "canopy_store_bytes") > 0);
  for (auto& id : quick)
    CHECK(get_json(c, "/v1/executions/" + id).status == 404);
  CHECK(get_json(c, "/v1/executions/" + failed).body["status"] == "failed");
  CHECK(get_json(c, "/v1/executions/" + live).body["status"] == "running");
  CHECK(eventually(
    [&] { return srv.log().find("event=retention.pruned trees=") != std::string::npos; }, 10s));
}
