#pragma once

// What the HTTP load benchmarks (bench_load, bench_soak) share: their
// clients and the graphs they register.

#include <cstdio>
#include <memory>
#include <string>

#include "tests/integration/server_process.hpp"

namespace canopy::core::test {

/// A keep-alive client of alice's with TCP_NODELAY (a POST's body is not
/// held back by Nagle) and generous timeouts.
inline httplib::Client make_load_client(int port) {
  httplib::Client c{"127.0.0.1", port};
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(120, 0);
  c.set_write_timeout(60, 0);
  c.set_bearer_token_auth(alice_token.c_str());
  return c;
}

/// Registers `held` (one sleep of 10 minutes), `small` (a 5 ms sleep, then
/// an echo) and `chain` (five 20 ms sleeps in a row). @returns false, after
/// saying why on stderr, when the server refused one.
inline bool register_load_graphs(httplib::Client& c) {
  json chain = {{"name", "chain"}, {"steps", json::object()}};
  for (int i = 0; i < 5; ++i) {
    json s = {{"fn", "sleep"}, {"with", {{"ms", 20}}}};
    if (i > 0)
      s["needs"] = {"c" + std::to_string(i - 1)};
    chain["steps"]["c" + std::to_string(i)] = s;
  }
  for (auto& g : {json{{"name", "held"},
                       {"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", 600000}}}}}}}},
                  json{{"name", "small"},
                       {"steps",
                        {{"a", {{"fn", "sleep"}, {"with", {{"ms", 5}}}}},
                         {"b", {{"fn", "echo"}, {"with", {{"v", 1}}}, {"needs", {"a"}}}}}}},
                  chain}) {
    auto a = post_json(c, "/v1/graphs", g);
    if (a.status != 201) {
      std::fprintf(stderr, "cannot register %s: %d %s\n", g["name"].dump().c_str(), a.status,
                   a.text.c_str());
      return false;
    }
  }
  return true;
}

/// A real `canopy serve` (inline commands off) with the load graphs
/// registered and one `small` execution run to its end (so its RSS includes
/// a running node); null after saying why on stderr.
inline std::unique_ptr<server_process> start_load_server() {
  std::unique_ptr<server_process> srv;
  try {
    server_process::options o;
    o.config = {{"allow_inline_commands", false}};
    srv = std::make_unique<server_process>(o);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cannot start the server: %s\n", ex.what());
    return nullptr;
  }
  auto c = srv->client(alice_token);
  if (!register_load_graphs(c))
    return nullptr;
  auto w = post_json(c, "/v1/graphs/small/executions");
  if (w.status == 201)
    wait_status(c, w.body["id"].get<std::string>(), "completed");
  return srv;
}

} // namespace canopy::core::test
