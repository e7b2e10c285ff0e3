// bench_http: request latency of `canopy serve` on kept-alive connections.
//
// A real server subprocess on a temp home. For 1, 16 and 64 connections at
// once (one client thread each, every client one kept-alive connection), each
// client sends N requests in a row of one kind and times every round trip:
//   - `GET /healthz`;
//   - `GET /v1/executions/{id}` of a completed execution (a store read and a
//     document);
//   - start + stop: `POST /v1/graphs/held/executions` (one `fn: sleep` of 10
//     minutes) then `POST .../stop` with `{"wait": 30}` (two requests, timed
//     together: the start's commit, the stop's two commits).
// The first request of each connection is reported apart (it pays the
// connect); "later" is every other request of the connection. Prints a
// Markdown table: p50 / p99 / max of the later requests, and p50 of the
// first ones, so a step between the first and later requests shows. Exits 1
// when a request failed, 2 when the server cannot be started.
//
//   usage: bench_http [--requests N]   (default 200 per connection and kind;
//                                       start+stop: N / 4)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using clock_type = std::chrono::steady_clock;

namespace {

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

/// The timings of one kind at one concurrency.
struct sample {
  std::mutex mtx;
  std::vector<double> first, later;
  size_t failures = 0;
  std::string failure; ///< the first one
};

enum class kind { healthz, get_execution, start_stop };

const char* name_of(kind k) {
  switch (k) {
    case kind::healthz: return "`GET /healthz`";
    case kind::get_execution: return "`GET /v1/executions/{id}`";
    default: return "start + stop (2 requests)";
  }
}

/// One client: a kept-alive connection, `n` requests (or pairs) of `k`.
void client(int port, kind k, int n, const std::string& done_id, sample& out) {
  httplib::Client c{"127.0.0.1", port};
  c.set_keep_alive(true);
  // A POST's head and body are two writes: without TCP_NODELAY on the client
  // too, Nagle holds the body until the server's delayed ACK (~40 ms).
  c.set_tcp_nodelay(true);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(120, 0);
  c.set_bearer_token_auth(alice_token.c_str());
  std::vector<double> times;
  std::string failure;
  size_t failures = 0;
  auto fail = [&](const std::string& what) {
    if (failures++ == 0)
      failure = what;
  };
  for (int i = 0; i < n; ++i) {
    auto t0 = clock_type::now();
    if (k == kind::healthz) {
      auto a = get_json(c, "/healthz");
      if (a.status != 200)
        fail("healthz -> " + std::to_string(a.status) + " " + a.text);
    } else if (k == kind::get_execution) {
      auto a = get_json(c, "/v1/executions/" + done_id);
      if (a.status != 200)
        fail("get -> " + std::to_string(a.status) + " " + a.text);
    } else {
      auto s = post_json(c, "/v1/graphs/held/executions", {{"inputs", json::object()}});
      if (s.status != 201 || !s.body.is_object()) {
        fail("start -> " + std::to_string(s.status) + " " + s.text);
        continue;
      }
      auto id = s.body["id"].get<std::string>();
      auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"wait", 30}});
      if (stop.status != 200 || stop_result_of(stop.body) != "stopped")
        fail("stop -> " + std::to_string(stop.status) + " " + stop.text.substr(0, 200));
    }
    times.push_back(ms_since(t0));
  }
  std::lock_guard<std::mutex> guard{out.mtx};
  if (!times.empty()) {
    out.first.push_back(times.front());
    out.later.insert(out.later.end(), times.begin() + 1, times.end());
  }
  if (failures > 0 && out.failures == 0)
    out.failure = failure;
  out.failures += failures;
}

} // namespace

int main(int argc, char** argv) {
  int requests = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--requests") == 0 && i + 1 < argc) {
      requests = std::max(4, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_http [--requests N]\n");
      return 2;
    }
  }
  std::unique_ptr<server_process> srv;
  try {
    server_process::options o;
    o.config = {{"allow_inline_commands", false}};
    srv = std::make_unique<server_process>(o);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cannot start the server: %s\n", ex.what());
    return 2;
  }
  auto port = srv->port();
  std::string done_id;
  {
    auto c = srv->client(alice_token);
    for (auto& g : {json{{"name", "held"},
                         {"steps", {{"nap", {{"fn", "sleep"}, {"with", {{"ms", 600000}}}}}}}},
                    json{{"name", "small"},
                         {"steps",
                          {{"a", {{"fn", "echo"}, {"with", {{"v", 1}}}}},
                           {"b", {{"fn", "echo"}, {"with", {{"v", 2}}}, {"needs", {"a"}}}}}}}}) {
      auto a = post_json(c, "/v1/graphs", g);
      if (a.status != 201) {
        std::fprintf(stderr, "cannot register: %d %s\n", a.status, a.text.c_str());
        return 2;
      }
    }
    auto s = post_json(c, "/v1/graphs/small/executions", {{"inputs", json::object()}});
    if (s.status != 201) {
      std::fprintf(stderr, "cannot start: %d %s\n", s.status, s.text.c_str());
      return 2;
    }
    done_id = s.body["id"].get<std::string>();
    wait_status(c, done_id, "completed");
  }

  std::printf("## bench_http\n\n%d requests per connection and kind (start + stop: %d pairs), "
              "one kept-alive connection per client thread\n\n",
              requests, requests / 4);
  std::printf("| request | connections | later requests p50 | p99 | max | first request of a "
              "connection, p50 | failures |\n|---|---|---|---|---|---|---|\n");
  bool ok = true;
  for (auto k : {kind::healthz, kind::get_execution, kind::start_stop}) {
    for (int conns : {1, 16, 64}) {
      sample s;
      int n = k == kind::start_stop ? std::max(2, requests / 4) : requests;
      std::vector<std::thread> pool;
      for (int i = 0; i < conns; ++i)
        pool.emplace_back([&] { client(port, k, n, done_id, s); });
      for (auto& t : pool)
        t.join();
      std::printf("| %s | %d | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %zu%s%s |\n", name_of(k),
                  conns, percentile(s.later, 0.5), percentile(s.later, 0.99),
                  percentile(s.later, 1.0), percentile(s.first, 0.5), s.failures,
                  s.failures ? ": " : "", s.failure.substr(0, 120).c_str());
      std::fflush(stdout);
      ok = ok && s.failures == 0;
    }
  }
  return ok ? 0 : 1;
}
