#pragma once

// Helpers of the server's acceptance tests (test_server*.cpp): graphs whose
// steps wait for a gate file or sleep, and checks of error bodies, SSE
// framing, listings and metrics.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

namespace canopy::core::test::server_test {

/// A server that accepts inline `run` steps.
inline server_process::options inline_server(const std::string& home = {}) {
  server_process::options o;
  o.config = {{"allow_inline_commands", true}};
  o.home = home;
  return o;
}

/// A `run` step that waits until the file `gate` exists, then prints
/// `{"passed": true}`. Grace periods are short so a stop never escalates
/// slowly.
inline json gate_step(const std::string& gate, json needs = json::array()) {
  // Bounded (about a minute) so a failed test never leaves it behind.
  json s = {{"run", {"sh", "-c",
                     "i=0; while [ ! -e \"$GATE\" ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; "
                     "sleep 0.02; done; echo '{\"passed\": true}'"}},
            {"env", {{"GATE", gate}}},
            {"grace", {{"interrupt", "2s"}, {"terminate", "1s"}}}};
  if (!needs.empty())
    s["needs"] = needs;
  return s;
}

/// hello (fn echo) → gate (waits for the file) → tail (fn echo).
inline json gated_graph(const std::string& name, const std::string& gate) {
  return {{"name", name},
          {"inputs", {"who"}},
          {"steps",
           {{"hello", {{"fn", "echo"}, {"with", {{"greeting", "hi ${inputs.who}"}}}}},
            {"gate", gate_step(gate, {"hello"})},
            {"tail",
             {{"fn", "echo"}, {"with", {{"after", "${steps.gate.json.passed}"}}},
              {"needs", {"gate"}}}}}},
          {"outputs", {{"greeting", "${steps.hello.greeting}"}, {"passed", "${steps.tail.after}"}}}};
}

/// One step that sleeps `ms` (a stop ends it at once).
inline json sleeper_graph(const std::string& name, int ms) {
  return {{"name", name}, {"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", ms}}}}}}}};
}

/// Registers `doc`; @returns its version.
inline int register_graph(httplib::Client& c, const json& doc) {
  auto a = post_json(c, "/v1/graphs", doc);
  INFO("POST /v1/graphs: " << a.status << " " << a.text);
  REQUIRE(a.status == 201);
  REQUIRE(a.body["id"] == doc["name"]);
  return a.body["version"].get<int>();
}

/// Starts an execution of graph `name`; @returns its document.
inline json start(httplib::Client& c, const std::string& name, const json& inputs = json::object()) {
  auto a = post_json(c, "/v1/graphs/" + name + "/executions", {{"inputs", inputs}});
  INFO("start " << name << ": " << a.status << " " << a.text);
  REQUIRE(a.status == 201);
  REQUIRE(a.body["id"].is_string());
  return a.body;
}

inline bool step_is(const json& doc, const std::string& step, const std::string& status) {
  return doc.is_object() && doc["steps"].is_object() && doc["steps"].contains(step)
         && doc["steps"][step]["status"] == status;
}

/// Checks the runtime/docs/reference/http.md error body of `a`: status, code (when given), a
/// message, and the JSON path (when given).
inline void check_error(const http_answer& a, int status, const std::string& code = {},
                 std::optional<std::string> path = std::nullopt) {
  INFO("answer: " << a.status << " " << a.text);
  CHECK(a.status == status);
  bool shaped = a.body.is_object() && a.body.contains("error") && a.body["error"].is_object();
  CHECK(shaped);
  if (!shaped)
    return;
  auto& e = a.body["error"];
  CHECK(e["code"].is_string());
  CHECK(!e.value("code", "").empty());
  CHECK(e["message"].is_string());
  CHECK(!e.value("message", "").empty());
  CHECK(e["path"].is_string());
  if (!code.empty())
    CHECK(e.value("code", "") == code);
  if (path)
    CHECK(e.value("path", "?") == *path);
}

/// Checks the SSE framing of `s`: `id:` is the event's seq, `event:` its
/// type, seqs strictly increasing. @returns the seqs.
inline std::vector<uint64_t> check_stream(const sse_stream& s) {
  std::vector<uint64_t> seqs;
  for (auto& e : s.events) {
    auto d = e.json_data();
    INFO("event " << e.event << " data " << e.data);
    REQUIRE(d.is_object());
    REQUIRE(e.id.has_value());
    CHECK(d["seq"] == *e.id);
    CHECK(d["type"] == e.event);
    if (!seqs.empty())
      CHECK(*e.id > seqs.back());
    seqs.push_back(*e.id);
  }
  return seqs;
}

inline bool has_event(const sse_stream& s, const std::string& type, const std::string& step = {}) {
  return std::any_of(s.events.begin(), s.events.end(), [&](const sse_event& e) {
    return e.event == type && (step.empty() || e.json_data().value("step", "") == step);
  });
}

/// Ids of the user's executions (`GET /v1/executions`, every page).
inline std::set<std::string> listed_ids(httplib::Client& c) {
  std::set<std::string> out;
  std::string cursor;
  for (int page = 0; page < 100; ++page) {
    auto a = get_json(c, "/v1/executions?limit=1000" + (cursor.empty() ? "" : "&cursor=" + cursor));
    REQUIRE(a.status == 200);
    for (auto& item : a.body["items"])
      out.insert(item["id"].get<std::string>());
    if (a.body["next"].is_null())
      return out;
    cursor = a.body["next"].get<std::string>();
  }
  FAIL("listing never ended");
  return out;
}

/// `canopy --home HOME show ID --json` from another process.
inline json show(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  INFO("show stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

/// Prometheus samples: `name{labels}` → value.
inline std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos)
      continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

inline double sample(const std::map<std::string, double>& m, const std::string& key) {
  auto i = m.find(key);
  INFO("metric " << key);
  REQUIRE(i != m.end());
  return i->second;
}

} // namespace canopy::core::test::server_test
