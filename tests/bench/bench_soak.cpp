// bench_soak: months of a node's life in one run.
//
// A real `canopy serve` (inline commands off, retention on: settled trees
// go 5 s after they end, pruned every 2 s) takes N executions (default
// 1,000,000) from 64 clients that, like bench_load's, start `held` (a sleep
// of 10 minutes) and stop it with `{"mode": "graceful", "wait": 30}` three
// times in four, and start `small` and poll it to `completed` once in four.
// One more thread mixes in what long-lived servers meet: SSE readers that
// disconnect after the first event, slow requests (sent a few bytes at a
// time), malformed requests (bad JSON, a garbage request line, an unknown
// route). Every 10 s it prints a row: executions, throughput, stop p99,
// heap (RssAnon) with the allocator's count beside it, RSS, store bytes,
// open descriptors, threads. Then, 15 s after the load (the last trees
// pruned, idle HTTP threads gone), it leaves the server idle for 60 s while
// a CPU hog runs on every core and reports the server's CPU use, and the
// latency of the first request after the idle (and after four more idles of
// 10 s) against warm ones under the same hogs.
//
// Exits 1 when the heap (RssAnon) grew by more than 16 MiB after warm-up
// (the first tenth of the executions), when the server holds more open
// descriptors at rest after the load than before it, when the idle server
// used more than 1 % of a core, or when any request answered 5xx or got no
// answer; 2 when the server cannot be started.
//
//   usage: bench_soak [--executions N] [--clients N] [--idle-seconds S]

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/load_graphs.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using clock_type = std::chrono::steady_clock;

namespace {

// -- shared counters -----------------------------------------------------------------

struct totals {
  uint64_t target = 0;
  std::atomic<uint64_t> reserved{0}; ///< executions a client has taken on
  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> s5xx{0}, no_answer{0}, wrong_stops{0}, unexpected_4xx{0};
  std::atomic<uint64_t> chaos{0}, chaos_wrong{0};
  std::mutex mtx;
  std::vector<double> stop_ms; ///< of the current 10 s window
  std::vector<std::string> samples;
  bool done() const { return reserved.load() >= target; }
};

void note(totals& t, const std::string& what) {
  std::lock_guard<std::mutex> guard{t.mtx};
  if (t.samples.size() < 20)
    t.samples.push_back(what);
}

http_answer counted(totals& t, http_answer a, const std::string& what) {
  if (a.status >= 500 || a.status == 0) {
    ++(a.status == 0 ? t.no_answer : t.s5xx);
    note(t, what + " -> " + std::to_string(a.status) + " " + a.text.substr(0, 200));
  }
  return a;
}

// -- the load ------------------------------------------------------------------------

void client_loop(int port, int index, totals& t) {
  auto c = make_load_client(port);
  for (uint64_t i = 0; t.reserved.fetch_add(1) < t.target; ++i) {
    bool complete = (i + static_cast<uint64_t>(index)) % 4 == 0;
    auto started = counted(t,
                           post_json(c, std::string{"/v1/graphs/"} + (complete ? "small" : "held")
                                          + "/executions",
                                     {{"inputs", json::object()}}),
                           "start");
    if (started.status != 201 || !started.body.is_object()) {
      if (started.status >= 400 && started.status < 500) {
        ++t.unexpected_4xx;
        note(t, "start -> " + std::to_string(started.status) + " " + started.text.substr(0, 200));
      }
      continue;
    }
    ++t.started;
    auto id = started.body["id"].get<std::string>();
    if (complete) {
      for (auto deadline = clock_type::now() + std::chrono::seconds{60};
           clock_type::now() < deadline;) {
        auto doc = counted(t, get_json(c, "/v1/executions/" + id), "get");
        auto status = doc.body.is_object() ? doc.body.value("status", "") : "";
        if (status == "completed" || status == "failed" || status == "stopped")
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds{5});
      }
      continue;
    }
    auto t0 = clock_type::now();
    auto stop = counted(t,
                        post_json(c, "/v1/executions/" + id + "/stop",
                                  {{"mode", "graceful"}, {"wait", 30}}),
                        "stop");
    auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (stop.status != 200 || stop_result_of(stop.body, "") != "stopped") {
      ++t.wrong_stops;
      note(t, "stop -> " + std::to_string(stop.status) + " " + stop.text.substr(0, 200));
    }
    std::lock_guard<std::mutex> guard{t.mtx};
    t.stop_ms.push_back(ms);
  }
}

/// Sends `raw` to the server a few bytes at a time (`pause` between
/// pieces) and reads the status line. @returns the status, 0 when none came.
int raw_request(int port, const std::string& raw, size_t piece, std::chrono::milliseconds pause) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int status = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    bool sent = true;
    for (size_t at = 0; at < raw.size() && sent; at += piece) {
      auto n = std::min(piece, raw.size() - at);
      sent = ::send(fd, raw.data() + at, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
      if (at + n < raw.size())
        std::this_thread::sleep_for(pause);
    }
    char buf[64] = {};
    if (sent && ::recv(fd, buf, sizeof buf - 1, 0) > 12 && std::string{buf, 5} == "HTTP/")
      status = std::atoi(buf + 9);
  }
  ::close(fd);
  return status;
}

/// What long-lived servers meet besides the load, one kind after another.
void chaos_loop(int port, totals& t) {
  auto c = make_load_client(port);
  std::string auth = "Authorization: Bearer " + alice_token + "\r\n";
  for (uint64_t i = 0; !t.done(); ++i) {
    bool ok = true;
    switch (i % 5) {
      case 0: { // an SSE reader that goes away after the first event
        auto s = counted(t, post_json(c, "/v1/graphs/chain/executions", {{"inputs", json::object()}}),
                         "start chain");
        if (s.status != 201)
          break;
        auto r = make_load_client(port);
        bool first = false;
        r.Get(("/v1/executions/" + s.body["id"].get<std::string>() + "/events").c_str(),
              [&](const char*, size_t) {
                first = true;
                return false; // disconnect
              });
        ok = first;
        break;
      }
      case 1: // a slow request: a GET trickling in, 8 bytes per 20 ms
        ok = raw_request(port,
                         "GET /v1/executions?limit=5 HTTP/1.1\r\nHost: x\r\n" + auth
                           + "Connection: close\r\n\r\n",
                         8, std::chrono::milliseconds{20})
             == 200;
        break;
      case 2: // malformed JSON
        ok = counted(t, request(c, "POST", "/v1/graphs/small/executions", "{\"inputs\": [1,"),
                     "bad json")
               .status
             == 400;
        break;
      case 3: // a garbage request line
        ok = raw_request(port, "\x01\x02 NOT HTTP\r\n\r\n", 64, std::chrono::milliseconds{0}) == 400;
        break;
      case 4: // an unknown route
        ok = counted(t, get_json(c, "/v1/nothing/here"), "unknown").status == 404;
        break;
    }
    ++t.chaos;
    if (!ok) {
      ++t.chaos_wrong;
      note(t, "chaos kind " + std::to_string(i % 5) + " got an unexpected answer");
    }
  }
}

// -- what the server holds -----------------------------------------------------------

struct server_figures {
  long anon_kib = 0, rss_kib = 0;
  double heap_mib = -1, store_mib = -1; ///< from /metrics; -1: not there
  size_t fds = 0, threads = 0;
};

double metric(const std::string& text, const std::string& name) {
  auto at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size() + 2);
}

server_figures look(const server_process& srv) {
  server_figures f;
  f.anon_kib = rss_kib(srv.pid(), "RssAnon");
  f.rss_kib = rss_kib(srv.pid());
  f.threads = static_cast<size_t>(rss_kib(srv.pid(), "Threads"));
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator{"/proc/" + std::to_string(srv.pid()) + "/fd", ec};
       !ec && it != std::filesystem::directory_iterator{}; it.increment(ec))
    ++f.fds;
  auto c = srv.client(alice_token);
  if (auto r = c.Get("/metrics"); r && r->status == 200) {
    f.heap_mib = metric("\n" + r->body, "canopy_heap_bytes") / 1048576.0;
    f.store_mib = metric("\n" + r->body, "canopy_store_bytes") / 1048576.0;
  }
  return f;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto k = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

double request_ms(httplib::Client& c) {
  auto t0 = clock_type::now();
  c.Get("/v1/executions?limit=1");
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

} // namespace

int main(int argc, char** argv) {
  uint64_t executions = 1000000;
  int clients = 64;
  int idle_seconds = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--executions" && i + 1 < argc)
      executions = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--clients" && i + 1 < argc)
      clients = std::atoi(argv[++i]);
    else if (a == "--idle-seconds" && i + 1 < argc)
      idle_seconds = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_soak [--executions N] [--clients N] [--idle-seconds S]\n");
      return 2;
    }
  }
  if (executions == 0 || clients <= 0 || idle_seconds <= 0) {
    std::fprintf(stderr, "usage: bench_soak [--executions N] [--clients N] [--idle-seconds S]\n");
    return 2;
  }

  std::unique_ptr<server_process> srv;
  try {
    server_process::options o;
    o.config = {{"allow_inline_commands", false},
                {"retention",
                 {{"completed", "5s"}, {"failed", "5s"}, {"stopped", "5s"}, {"interval", "2s"}}}};
    srv = std::make_unique<server_process>(o);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cannot start the server: %s\n", ex.what());
    return 2;
  }
  auto port = srv->port();
  {
    auto c = srv->client(alice_token);
    if (!register_load_graphs(c))
      return 2;
  }
  auto at_rest = look(*srv);

  totals t;
  t.target = executions;
  auto t0 = clock_type::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < clients; ++i)
    pool.emplace_back([&, i] { client_loop(port, i, t); });
  std::thread chaos{[&] { chaos_loop(port, t); }};

  std::printf("| s | executions | per s | stop p99 (ms) | heap (RssAnon) MiB | allocated MiB "
              "| RSS MiB | store MiB | fds | threads |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<server_figures> rows;
  std::optional<server_figures> warm; // the first row after a tenth of the executions
  uint64_t last_started = 0;
  for (auto next = t0 + std::chrono::seconds{10}; !t.done(); next += std::chrono::seconds{10}) {
    while (clock_type::now() < next && !t.done())
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    if (t.done())
      break;
    std::vector<double> window;
    {
      std::lock_guard<std::mutex> guard{t.mtx};
      window.swap(t.stop_ms);
    }
    auto f = look(*srv);
    auto started = t.started.load();
    if (!warm && started >= executions / 10)
      warm = f;
    rows.push_back(f);
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("| %.0f | %llu | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %zu | %zu |\n", s,
                static_cast<unsigned long long>(started),
                static_cast<double>(started - last_started) / 10.0, percentile(window, 0.99),
                f.anon_kib / 1024.0, f.heap_mib, f.rss_kib / 1024.0, f.store_mib, f.fds, f.threads);
    std::fflush(stdout);
    last_started = started;
  }
  for (auto& th : pool)
    th.join();
  chaos.join();
  double elapsed = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto after_load = look(*srv);

  // Rest: descriptors back to where they were (the clients have hung up; the
  // server closes a connection when it reads the end of it).
  auto rest = look(*srv);
  for (auto until = clock_type::now() + std::chrono::seconds{10};
       rest.fds > at_rest.fds && clock_type::now() < until; rest = look(*srv))
    std::this_thread::sleep_for(std::chrono::milliseconds{200});

  // Idle with every core busy, once the load's aftermath is over: the last
  // trees pruned (5 s after they ended, every 2 s), the HTTP threads of the
  // closed connections gone (5 s idle).
  std::this_thread::sleep_for(std::chrono::seconds{15});
  auto settled = look(*srv);
  auto probe = srv->client(alice_token);
  std::vector<double> warm_ms;
  for (int i = 0; i < 20; ++i)
    warm_ms.push_back(request_ms(probe));
  std::atomic<bool> hogging{true};
  std::vector<std::thread> hogs;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    hogs.emplace_back([&] {
      volatile uint64_t x = 0;
      while (hogging.load(std::memory_order_relaxed))
        x = x + 1;
    });
  auto cpu0 = cpu_ms(srv->pid());
  auto idle0 = clock_type::now();
  std::this_thread::sleep_for(std::chrono::seconds{idle_seconds});
  auto cpu1 = cpu_ms(srv->pid());
  double idle_s = std::chrono::duration<double>(clock_type::now() - idle0).count();
  // The first request after the idle, and four more after 10 s idles each;
  // then the same request back to back under the same hogs: what the first
  // ones are compared with, so that they measure the idle, not the hogs.
  std::vector<double> first_ms{request_ms(probe)};
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds{10});
    first_ms.push_back(request_ms(probe));
  }
  std::vector<double> hogged_ms;
  for (int i = 0; i < 20; ++i)
    hogged_ms.push_back(request_ms(probe));
  hogging = false;
  for (auto& h : hogs)
    h.join();
  double idle_core = 100.0 * (cpu1 - cpu0) / 1000.0 / idle_s;

  int exit_code = -1;
  try {
    exit_code = srv->terminate(std::chrono::seconds{120});
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s\n", ex.what());
  }

  double growth = warm ? (after_load.anon_kib - warm->anon_kib) / 1024.0 : 0;
  std::printf("\n| metric | value |\n|---|---|\n");
  std::printf("| executions started | %llu in %.0f s (%.0f/s) |\n",
              static_cast<unsigned long long>(t.started.load()), elapsed,
              static_cast<double>(t.started.load()) / elapsed);
  std::printf("| heap (RssAnon) after warm-up / after the load (MiB) | %.1f / %.1f (growth %.1f, "
              "limit 16) |\n",
              warm ? warm->anon_kib / 1024.0 : 0.0, after_load.anon_kib / 1024.0, growth);
  std::printf("| allocated (jemalloc) after warm-up / after the load (MiB) | %.1f / %.1f |\n",
              warm ? warm->heap_mib : 0.0, after_load.heap_mib);
  std::printf("| descriptors at rest before / after the load | %zu / %zu |\n", at_rest.fds,
              rest.fds);
  std::printf("| threads before / after the load / 15 s later | %zu / %zu / %zu |\n",
              at_rest.threads, rest.threads, settled.threads);
  std::printf("| idle CPU, every core busy (%% of a core, %d s) | %.2f (limit 1) |\n", idle_seconds,
              idle_core);
  std::printf("| request after an idle, median (max) of 5 / warm median under the hogs / warm "
              "median, quiet (ms) | %.2f (%.2f) / %.2f / %.2f |\n",
              percentile(first_ms, 0.5), percentile(first_ms, 1.0), percentile(hogged_ms, 0.5),
              percentile(warm_ms, 0.5));
  std::printf("| 5xx / no answer / wrong stop answers / unexpected 4xx | %llu / %llu / %llu / %llu |\n",
              static_cast<unsigned long long>(t.s5xx), static_cast<unsigned long long>(t.no_answer),
              static_cast<unsigned long long>(t.wrong_stops),
              static_cast<unsigned long long>(t.unexpected_4xx));
  std::printf("| disturbances (SSE hang-ups, slow, malformed) / unexpected answers | %llu / %llu |\n",
              static_cast<unsigned long long>(t.chaos), static_cast<unsigned long long>(t.chaos_wrong));
  std::printf("| SIGTERM exit code | %d |\n", exit_code);
  for (auto& s : t.samples)
    std::printf("  unexpected: %s\n", s.c_str());
  bool bad = growth > 16 || rest.fds > at_rest.fds || idle_core > 1.0 || t.s5xx > 0
             || t.no_answer > 0 || t.wrong_stops > 0 || t.chaos_wrong > 0 || exit_code != 0;
  return bad ? 1 : 0;
}
