// bench_load: `canopy serve` under concurrent HTTP load (runtime/docs/reference/http.md).
//
// A real server subprocess (inline commands off) on a temp home. 64 client
// threads (each with its own keep-alive connection) loop until the duration
// ends: start an execution of a registered graph, then
//   - 3 of 4 times: `held` (one `fn: sleep` of 10 minutes): stop it with
//     `{"mode": "graceful", "wait": 30}`, timing the stop call's round trip;
//     the answer must be 200 `stopped` with the execution `stopped`;
//   - 1 of 4 times: `small` (`fn: sleep` 5 ms, then `fn: echo`): poll it
//     until it completes.
// One more thread checks the event stream: it starts `chain` executions
// (five 20 ms sleeps) and follows each live over SSE, and also replays a
// sample of the clients' executions over SSE; each stream's seqs must equal
// the execution's JSON event log (nothing lost, nothing twice). The
// server's VmRSS is read at the start (after warm-up) and at the end. Also
// printed: the server's CPU time per answered request, how many polls a
// `small` execution took and when it was seen completed, and the store's
// commits (group commits of the writer) per second with their mean
// duration: what sets how long an execution takes under this load.
//
// Prints a Markdown table. Exits 1 when any request answered 5xx, any event
// was lost, a request got no answer, or a stop answered anything but
// `stopped`; 2 when the server cannot be started.
//
// With `--floor`, the same client loops (without the SSE checker) first run
// for the same duration against an in-process server with canopy's HTTP
// layer and instant canned answers (tests/bench/floor_server.hpp), whose
// bodies are copied from a first real server; then the run above on a fresh
// one; then a table compares the two. The floor is what the HTTP layer alone
// allows on this machine. A floor `small` execution completes 5 ms after
// its start (`--floor-run-ms N`: after N ms, so that its clients poll as
// often as canopy's do under load). `--floor-durable` also runs the durable
// floor after it: the same server, each change committed to LMDB by one
// group-committing writer before it is answered (floor_server.hpp), so
// what is left is the HTTP layer and the disk's flushes.
//
//   usage: bench_load [--seconds N] [--clients N] [--floor] [--floor-durable]
//                     [--floor-run-ms N]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/floor_server.hpp"
#include "tests/bench/load_graphs.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using clock_type = std::chrono::steady_clock;

namespace {

/// Counters shared by every thread.
struct totals {
  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> stops{0};
  std::atomic<uint64_t> wrong_stop_answers{0};
  std::atomic<uint64_t> s2xx{0}, s4xx{0}, s5xx{0}, other{0}, no_answer{0};
  std::atomic<uint64_t> streams{0};
  std::atomic<uint64_t> streamed_events{0};
  std::atomic<uint64_t> lost_events{0};
  std::atomic<uint64_t> duplicate_events{0};
  std::atomic<uint64_t> unended_streams{0};
  std::mutex mtx;
  std::vector<double> stop_ms;
  std::vector<double> small_ms; ///< a `small` execution: start answered -> seen completed
  std::atomic<uint64_t> small_polls{0};
  std::map<std::string, uint64_t> samples; ///< first few unexpected answers
  std::deque<std::string> recent;          ///< ids for the SSE checker
};

void count(totals& t, int status) {
  if (status >= 200 && status < 300)
    ++t.s2xx;
  else if (status >= 400 && status < 500)
    ++t.s4xx;
  else if (status >= 500)
    ++t.s5xx;
  else if (status == 0)
    ++t.no_answer;
  else
    ++t.other;
}

void note(totals& t, const std::string& what) {
  std::lock_guard<std::mutex> guard{t.mtx};
  if (t.samples.size() < 20 || t.samples.count(what))
    ++t.samples[what];
}

/// A counted request.
http_answer call(totals& t, httplib::Client& c, const std::string& method,
                 const std::string& path, const json& body = nullptr) {
  auto a = method == "GET" ? get_json(c, path)
                           : request(c, method, path, body.is_null() ? "" : body.dump());
  count(t, a.status);
  if (a.status >= 500 || a.status == 0)
    note(t, method + " " + path.substr(0, path.find('/', 4)) + " -> "
              + std::to_string(a.status) + " " + a.text.substr(0, 200));
  return a;
}

void client_loop(int port, int index, clock_type::time_point end, totals& t) {
  auto c = make_load_client(port);
  std::vector<double> lat, small;
  for (uint64_t i = 0; clock_type::now() < end; ++i) {
    bool complete = (i + index) % 4 == 0;
    auto started = call(t, c, "POST",
                        std::string{"/v1/graphs/"} + (complete ? "small" : "held") + "/executions",
                        json{{"inputs", json::object()}});
    if (started.status != 201 || !started.body.is_object()) {
      note(t, "start -> " + std::to_string(started.status) + " " + started.text.substr(0, 200));
      continue;
    }
    ++t.started;
    auto id = started.body["id"].get<std::string>();
    if (i % 8 == 0) {
      std::lock_guard<std::mutex> guard{t.mtx};
      t.recent.push_back(id);
      if (t.recent.size() > 256)
        t.recent.pop_front();
    }
    if (complete) {
      auto answered = clock_type::now();
      for (auto deadline = clock_type::now() + std::chrono::seconds{60};
           clock_type::now() < deadline;) {
        auto doc = call(t, c, "GET", "/v1/executions/" + id);
        ++t.small_polls;
        auto status = doc.body.is_object() ? doc.body.value("status", "") : "";
        if (status == "completed") {
          ++t.completed;

          small.push_back(
            std::chrono::duration<double, std::milli>(clock_type::now() - answered).count());
          break;
        }
        if (status == "failed" || status == "stopped") {
          note(t, "small execution ended " + status);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{5});
      }
      continue;
    }
    auto t0 = clock_type::now();
    auto stop = call(t, c, "POST", "/v1/executions/" + id + "/stop",
                     json{{"mode", "graceful"}, {"wait", 30}});
    lat.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    ++t.stops;
    auto result = stop_result_of(stop.body, "");
    auto status = stop.body.is_object() ? stop.body.value("status", "") : "";
    if (stop.status != 200 || result != "stopped" || status != "stopped") {
      ++t.wrong_stop_answers;
      note(t, "stop -> " + std::to_string(stop.status) + " result=" + result
                + " execution=" + status);
    }
  }
  std::lock_guard<std::mutex> guard{t.mtx};
  t.stop_ms.insert(t.stop_ms.end(), lat.begin(), lat.end());
  t.small_ms.insert(t.small_ms.end(), small.begin(), small.end());
}

/// The server's store commits so far, from its `/metrics`
/// (`canopy_store_commit_seconds`): every write transaction, each a group
/// of the batches that waited for it.
struct commit_totals {
  double count = 0;
  double seconds = 0;
};

commit_totals commit_figures(server_process& srv, totals& t) {
  commit_totals out;
  auto c = srv.client(alice_token);
  auto m = call(t, c, "GET", "/metrics");
  auto value_of = [&](const std::string& name) {
    auto at = m.text.find("\n" + name + " ");
    return at == std::string::npos ? 0.0 : std::atof(m.text.c_str() + at + name.size() + 2);
  };
  out.count = value_of("canopy_store_commit_seconds_count");
  out.seconds = value_of("canopy_store_commit_seconds_sum");
  return out;
}

/// Follows `id` over SSE (from the start) and compares with its JSON log.
void check_stream(int port, const std::string& id, totals& t) {
  auto c = make_load_client(port);
  c.set_keep_alive(false);
  auto s = read_sse(c, "/v1/executions/" + id + "/events");
  count(t, s.status);
  ++t.streams;
  if (s.status != 200 || !s.ended) {
    ++t.unended_streams;
    note(t, "sse " + std::to_string(s.status) + " ended=" + std::to_string(s.ended) + " "
              + s.error);
    return;
  }
  auto seqs = s.seqs();
  t.streamed_events += seqs.size();
  auto log = call(t, c, "GET", "/v1/executions/" + id + "/events");
  if (log.status != 200)
    return;
  std::set<uint64_t> streamed(seqs.begin(), seqs.end());
  t.duplicate_events += seqs.size() - streamed.size();
  uint64_t lost = 0;
  for (auto& e : log.body["items"])
    if (!streamed.count(e["seq"].get<uint64_t>()))
      ++lost;
  if (lost > 0)
    note(t, "sse of " + id + " lost " + std::to_string(lost) + " events");
  t.lost_events += lost;
}

void sse_loop(int port, clock_type::time_point end, totals& t) {
  auto c = make_load_client(port);
  for (uint64_t i = 0; clock_type::now() < end; ++i) {
    if (i % 2 == 0) {
      // Live: our own chain, followed from its first event.
      auto started = call(t, c, "POST", "/v1/graphs/chain/executions",
                          json{{"inputs", json::object()}});
      if (started.status != 201)
        continue;
      ++t.started;
      check_stream(port, started.body["id"].get<std::string>(), t);
    } else {
      std::string id;
      {
        std::lock_guard<std::mutex> guard{t.mtx};
        if (!t.recent.empty()) {
          id = t.recent.back();
          t.recent.pop_back();
        }
      }
      if (!id.empty())
        check_stream(port, id, t);
    }
  }
}

/// Runs the client loops (and, with `sse`, the stream checker) against
/// `port` until `end`.
void drive(int port, int clients, bool sse, clock_type::time_point end, totals& t) {
  std::vector<std::thread> pool;
  for (int i = 0; i < clients; ++i)
    pool.emplace_back([&, i] { client_loop(port, i, end, t); });
  if (sse)
    pool.emplace_back([&] { sse_loop(port, end, t); });
  for (auto& th : pool)
    th.join();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto k = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

load_summary summarize(const totals& t, double elapsed) {
  load_summary s;
  s.starts = static_cast<double>(t.started) / elapsed;
  s.requests = static_cast<double>(t.s2xx + t.s4xx + t.s5xx + t.other) / elapsed;
  s.p50 = percentile(t.stop_ms, 0.50);
  s.p99 = percentile(t.stop_ms, 0.99);
  s.max = percentile(t.stop_ms, 1.0);
  s.bad = t.s5xx > 0 || t.no_answer > 0 || t.wrong_stop_answers > 0;
  return s;
}

/// The floor's answers, copied from a real server (then ended).
/// @returns false when it could not run.
bool floor_answers(floor_bodies& bodies) {
  auto srv = start_load_server();
  if (!srv)
    return false;
  auto c = srv->client(alice_token);
  return capture_floor_bodies(c, bodies);
}

/// The floor run: the client loops against a floor_server answering with
/// `bodies` for `seconds`. @returns false when it could not run.
bool run_floor(floor_bodies bodies, int seconds, int clients, int run_ms, bool durable,
               load_summary& out) {
  temp_dir home;
  std::unique_ptr<floor_log> log;
  if (durable) {
    log = std::make_unique<floor_log>(home.path);
    if (!log->ok())
      return false;
  }
  floor_server fs{std::move(bodies), std::chrono::milliseconds{run_ms}, log.get()};
  if (fs.port() < 0) {
    std::fprintf(stderr, "floor: cannot bind\n");
    return false;
  }
  totals t;
  auto t0 = clock_type::now();
  drive(fs.port(), clients, false, t0 + std::chrono::seconds{seconds}, t);
  out = summarize(t, std::chrono::duration<double>(clock_type::now() - t0).count());
  for (auto& [what, n] : t.samples)
    std::printf("%s: %llu x %s\n", durable ? "durable floor" : "floor",
                static_cast<unsigned long long>(n), what.c_str());
  return true;
}

} // namespace

int main(int argc, char** argv) {
  static constexpr auto usage
    = "usage: bench_load [--seconds N] [--clients N] [--floor] [--floor-durable]"
      " [--floor-run-ms N]\n";
  int seconds = 60;
  int clients = 64;
  bool floor = false;
  bool floor_durable = false;
  int floor_run_ms = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--seconds" || a == "--clients") && i + 1 < argc) {
      (a == "--seconds" ? seconds : clients) = std::atoi(argv[++i]);
    } else if (a == "--floor") {
      floor = true;
    } else if (a == "--floor-durable") {
      floor = floor_durable = true;
    } else if (a == "--floor-run-ms" && i + 1 < argc) {
      floor = true;
      floor_run_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
  }
  if (seconds <= 0 || clients <= 0) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  load_summary floor_run, durable_run;
  floor_bodies bodies;
  if (floor && !(floor_answers(bodies)
                 && run_floor(bodies, seconds, clients, floor_run_ms, false, floor_run)))
    return 2;
  if (floor_durable && !run_floor(bodies, seconds, clients, floor_run_ms, true, durable_run))
    return 2;

  auto srv = start_load_server();
  if (!srv)
    return 2;
  auto port = srv->port();
  long rss_start = rss_kib(srv->pid());
  long anon_start = rss_kib(srv->pid(), "RssAnon");
  double cpu_start = cpu_ms(srv->pid());

  totals t;
  auto commits_start = commit_figures(*srv, t);
  auto t0 = clock_type::now();
  auto end = t0 + std::chrono::seconds{seconds};
  // The server's memory every 10 s: a plateau is allocator warm-up, a line
  // that keeps climbing is a leak.
  std::vector<std::pair<long, long>> rss_series; // (VmRSS, RssAnon) KiB
  std::mutex series_mtx;
  std::condition_variable series_cv;
  bool load_done = false;
  std::thread sampler{[&] {
    std::unique_lock<std::mutex> lock{series_mtx};
    for (auto next = t0 + std::chrono::seconds{10}; next < end;
         next += std::chrono::seconds{10}) {
      if (series_cv.wait_until(lock, next, [&] { return load_done; }))
        return;
      rss_series.emplace_back(rss_kib(srv->pid()), rss_kib(srv->pid(), "RssAnon"));
    }
  }};
  drive(port, clients, true, end, t);
  {
    std::lock_guard<std::mutex> guard{series_mtx};
    load_done = true;
  }
  series_cv.notify_all();
  sampler.join();
  double elapsed = std::chrono::duration<double>(clock_type::now() - t0).count();
  long rss_end = rss_kib(srv->pid());
  long anon_end = rss_kib(srv->pid(), "RssAnon");
  double server_cpu_ms = cpu_ms(srv->pid()) - cpu_start;
  auto commits = commit_figures(*srv, t);
  commits.count -= commits_start.count;
  commits.seconds -= commits_start.seconds;

  // Leave nothing running, then a clean shutdown.
  {
    auto c = srv->client(alice_token);
    for (auto& g : {"held", "small", "chain"})
      post_json(c, std::string{"/v1/graphs/"} + g + "/stop", {{"mode", "force"}, {"wait", 60}});
  }
  int exit_code = -1;
  double shutdown_s = 0;
  try {
    auto s0 = clock_type::now();
    exit_code = srv->terminate(std::chrono::seconds{120});
    shutdown_s = std::chrono::duration<double>(clock_type::now() - s0).count();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s\n", ex.what());
  }

  auto mib = [](long kib) { return static_cast<double>(kib) / 1024.0; };
  std::printf("| metric | value |\n|---|---|\n");
  std::printf("| duration (s) | %.1f |\n", elapsed);
  std::printf("| clients | %d (+1 SSE checker) |\n", clients);
  std::printf("| executions started | %llu |\n", static_cast<unsigned long long>(t.started));
  std::printf("| throughput (executions/s) | %.1f |\n", static_cast<double>(t.started) / elapsed);
  std::printf("| completed (polled) | %llu |\n", static_cast<unsigned long long>(t.completed));
  std::printf("| polls per completed execution; seen completed after p50 / p99 (ms) | %.1f; %.1f / %.1f |\n",
              t.completed > 0 ? static_cast<double>(t.small_polls) / static_cast<double>(t.completed) : 0.0,
              percentile(t.small_ms, 0.50), percentile(t.small_ms, 0.99));
  std::printf("| stops (graceful, wait 30) | %llu |\n", static_cast<unsigned long long>(t.stops));
  std::printf("| stop latency p50 (ms) | %.1f |\n", percentile(t.stop_ms, 0.50));
  std::printf("| stop latency p99 (ms) | %.1f |\n", percentile(t.stop_ms, 0.99));
  std::printf("| stop latency max (ms) | %.1f |\n", percentile(t.stop_ms, 1.0));
  std::printf("| stop answers other than 200 stopped | %llu |\n",
              static_cast<unsigned long long>(t.wrong_stop_answers));
  std::printf("| HTTP 2xx / 4xx / 5xx | %llu / %llu / %llu |\n",
              static_cast<unsigned long long>(t.s2xx), static_cast<unsigned long long>(t.s4xx),
              static_cast<unsigned long long>(t.s5xx));
  std::printf("| store commits (per s), mean duration (ms) | %.0f, %.2f |\n",
              commits.count / elapsed, commits.count > 0 ? commits.seconds * 1000.0 / commits.count : 0.0);
  auto answered = t.s2xx + t.s4xx + t.s5xx + t.other;
  std::printf("| server CPU (s), per answered request (µs) | %.1f, %.0f |\n",
              server_cpu_ms / 1000.0,
              answered > 0 ? server_cpu_ms * 1000.0 / static_cast<double>(answered) : 0.0);
  std::printf("| requests without an answer | %llu |\n",
              static_cast<unsigned long long>(t.no_answer));
  std::printf("| SSE streams checked (events) | %llu (%llu) |\n",
              static_cast<unsigned long long>(t.streams),
              static_cast<unsigned long long>(t.streamed_events));
  std::printf("| lost events / duplicates / unended streams | %llu / %llu / %llu |\n",
              static_cast<unsigned long long>(t.lost_events),
              static_cast<unsigned long long>(t.duplicate_events),
              static_cast<unsigned long long>(t.unended_streams));
  std::printf("| server RSS start / end (MiB) | %.1f / %.1f |\n", mib(rss_start), mib(rss_end));
  std::printf("| of which anonymous (heap), start / end (MiB) | %.1f / %.1f |\n", mib(anon_start),
              mib(anon_end));
  std::printf("| SIGTERM exit code (shutdown s) | %d (%.2f) |\n", exit_code, shutdown_s);
  if (!rss_series.empty()) {
    std::printf("\nserver RSS / RssAnon every 10 s (MiB):");
    for (auto& [rss, anon] : rss_series)
      std::printf(" %.0f/%.0f", mib(rss), mib(anon));
    std::printf("\n");
  }
  if (!t.samples.empty()) {
    std::printf("\nunexpected answers (first kinds):\n");
    for (auto& [what, n] : t.samples)
      std::printf("  %llu x %s\n", static_cast<unsigned long long>(n), what.c_str());
  }
  if (floor)
    print_floor_comparison(floor_run, summarize(t, elapsed), clients, seconds);
  if (floor_durable) {
    std::printf("\nThe durable floor: the same, each change committed to LMDB first.\n");
    print_floor_comparison(durable_run, summarize(t, elapsed), clients, seconds);
  }
  bool bad = floor_run.bad || durable_run.bad || t.s5xx > 0 || t.lost_events > 0 || t.duplicate_events > 0 || t.no_answer > 0
             || t.unended_streams > 0 || t.wrong_stop_answers > 0 || exit_code != 0;
  return bad ? 1 : 0;
}
