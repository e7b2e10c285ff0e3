// bench_store: reading, recovering and pruning a home of up to a million
// stored executions.
//
// For each size N (default 10,000, 100,000 and 1,000,000) a fresh home is
// filled by direct store commits (the persistence library, no HTTP): root
// executions of eight graphs owned by alice, 90 % completed, 6 % failed and
// 4 % stopped, every tenth with a child execution of its `review` step, each
// with three steps and the events a real run writes (queued, started, each
// step's started and completed or failed, the end); N counts roots and
// children. The oldest 90 % of the roots ended 30 days ago, the rest an
// hour ago. Then, per size:
//   - open + recovery (`store::open` and `recover_interrupted`, in this
//     process) with no live execution, and again after 1,000 roots were
//     added `running` with a dead recorded owner (recovery must stop them);
//   - `canopy ls --limit 20` and `canopy ls --status failed --limit 20`,
//     real subprocesses started as a shell starts them, beside `canopy
//     --version`: what starting the process costs alone (15 rounds, the
//     three in turn: median and range; peak RSS from wait4);
//   - against a real `canopy serve` on 127.0.0.1: `GET /v1/executions?limit=50`,
//     a deep cursor page (an id 90 % down the history), `GET
//     /v1/executions/{id}`, a `/metrics` scrape (time, body size) and the
//     dashboard's executions page (its list page and its six per-status
//     counts, `?status=S&limit=1000`), each the median of 9; the server's
//     RssAnon after start and after the reads;
//   - `canopy prune --older-than 7d` (the oldest 90 % of the trees) while
//     one client loops over the reads above: the prune's time and the p99
//     of those requests meanwhile.
// Prints one Markdown table per size, each measured value beside its target.
//
//   usage: bench_store [--sizes 10000,100000,1000000]

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "persistence/store.hpp"
#include "runtime/node/memory.hpp"
#include "runtime/node/runtime.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core;
using namespace canopy::core::test;
using clock_type = std::chrono::steady_clock;

namespace {

// -- measuring ----------------------------------------------------------------------

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double percentile(std::vector<double> xs, double p) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto i = static_cast<size_t>(p * static_cast<double>(xs.size() - 1) + 0.5);
  return xs[std::min(i, xs.size() - 1)];
}

/// The allocator's bytes in use by this process (0 without jemalloc).
double heap_mib() {
  canopy::core::heap_figures h;
  canopy::core::allocator_figures(h);
  return static_cast<double>(h.used_bytes) / (1 << 20);
}

/// One finished subprocess: its wall time, exit code, peak RSS and stdout lines.
struct run_result {
  double ms = 0;
  int code = -1;
  long maxrss_kib = 0;
  size_t lines = 0;
};

// -- commands as a shell runs them ------------------------------------------------------

/// A small process, forked before the bench maps any home, that runs each
/// command as a shell does (fork of a small process, exec, wait4), so the
/// time and the peak RSS that wait4 reports are the command's own: a fork of
/// this process would copy its page tables and count its resident pages.
/// Requests and answers travel on two pipes; it ends at end of input.
class spawner {
public:
  /// Forks the spawner. Call first thing in `main`.
  void start() {
    int to[2], from[2];
    if (::pipe(to) != 0 || ::pipe(from) != 0)
      throw std::runtime_error("pipe failed");
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(to[1]);
      ::close(from[0]);
      serve(to[0], from[1]);
      ::_exit(0);
    }
    ::close(to[0]);
    ::close(from[1]);
    to_ = to[1];
    from_ = from[0];
  }

  ~spawner() {
    if (pid_ <= 0)
      return;
    ::close(to_);
    ::close(from_);
    ::waitpid(pid_, nullptr, 0);
  }

  /// Runs `argv` with stdout to `out_file`. @returns its wall time (from
  /// the fork to its reaping), exit code and peak RSS.
  run_result run(const std::vector<std::string>& argv, const std::string& out_file) {
    std::string msg;
    for (auto& a : argv)
      msg.append(a).push_back('\0');
    msg.append(out_file).push_back('\0');
    uint32_t len = static_cast<uint32_t>(msg.size());
    run_result r;
    if (!write_all(to_, &len, sizeof(len)) || !write_all(to_, msg.data(), msg.size())
        || !read_all(from_, &r, sizeof(r)))
      throw std::runtime_error("the spawner is gone");
    return r;
  }

private:
  static bool write_all(int fd, const void* p, size_t n) {
    for (auto* c = static_cast<const char*>(p); n > 0;) {
      auto w = ::write(fd, c, n);
      if (w <= 0)
        return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  static bool read_all(int fd, void* p, size_t n) {
    for (auto* c = static_cast<char*>(p); n > 0;) {
      auto got = ::read(fd, c, n);
      if (got <= 0)
        return false;
      c += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }

  /// The spawner's loop: one request, one command, one answer.
  static void serve(int in, int out) {
    uint32_t len = 0;
    while (read_all(in, &len, sizeof(len))) {
      std::string msg(len, '\0');
      if (!read_all(in, msg.data(), len))
        return;
      std::vector<char*> args;
      for (size_t p = 0; p < msg.size(); p = msg.find('\0', p) + 1)
        args.push_back(msg.data() + p);
      char* out_file = args.back();
      args.back() = nullptr;
      run_result r;
      auto t0 = clock_type::now();
      pid_t pid = ::fork();
      if (pid == 0) {
        int fd = ::open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::execv(args[0], args.data());
        ::_exit(127);
      }
      int status = 0;
      struct rusage ru {};
      ::wait4(pid, &status, 0, &ru);
      r.ms = ms_since(t0);
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.maxrss_kib = ru.ru_maxrss;
      if (!write_all(out, &r, sizeof(r)))
        return;
    }
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
};

spawner commands;

/// Runs `canopy --home HOME ARGS...` with stdout to a file (through `commands`).
run_result run_timed(const std::string& home, const std::vector<std::string>& args,
                     const std::string& out_file) {
  std::vector<std::string> argv{canopy_binary(), "--home", home};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = commands.run(argv, out_file);
  r.lines = line_count(out_file);
  return r;
}

/// One command over the rounds of `interleaved_runs`: its median time and
/// range, its largest peak RSS, and the lines its last run printed.
struct timed_command {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  long maxrss_kib = 0;
  size_t lines = 0;
};

/// Runs each command of `commands` once per round, in turn, for `rounds`
/// rounds, after one untimed run that brings the binary's pages into the
/// cache: a disturbance of the machine falls on all of them alike.
std::vector<timed_command> interleaved_runs(const std::string& home,
                                            const std::vector<std::vector<std::string>>& commands,
                                            const std::string& out_file, int rounds = 15) {
  std::vector<std::vector<double>> ms(commands.size());
  std::vector<timed_command> out(commands.size());
  run_timed(home, commands.front(), out_file);
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < commands.size(); ++i) {
      auto one = run_timed(home, commands[i], out_file);
      ms[i].push_back(one.ms);
      out[i].maxrss_kib = std::max(out[i].maxrss_kib, one.maxrss_kib);
      out[i].lines = one.lines;
    }
  for (size_t i = 0; i < commands.size(); ++i) {
    out[i].median_ms = percentile(ms[i], 0.5);
    out[i].min_ms = *std::min_element(ms[i].begin(), ms[i].end());
    out[i].max_ms = *std::max_element(ms[i].begin(), ms[i].end());
  }
  return out;
}

// -- building the home ------------------------------------------------------------------

constexpr int64_t day_ms = 86'400'000;
const char* const step_names[] = {"search", "draft", "review"};

/// The execution's three steps and the events of its run, as a run writes them.
void add_run(write_batch& b, const execution_record& r, const std::string& child = {}) {
  b.events.push_back(make_execution_event(r, event_type::execution_queued, r.created_at,
                                          execution_status::queued));
  b.events.push_back(make_execution_event(r, event_type::execution_started, r.started_at,
                                          execution_status::running));
  int64_t t = r.started_at;
  for (int i = 0; i < 3; ++i) {
    step_record s;
    s.execution_id = r.id;
    s.step = step_names[i];
    s.attempt = 1;
    s.started_at = t;
    s.ended_at = t += 500;
    bool failed = r.status == execution_status::failed && i == 2;
    bool pending = r.status == execution_status::stopped && i == 2;
    s.status = failed ? step_status::failed : pending ? step_status::pending : step_status::completed;
    if (!pending) {
      s.result = {{"exit_code", failed ? 1 : 0}, {"stdout", "step " + s.step + " done\n"},
                  {"stderr", failed ? "boom\n" : ""}, {"json", nullptr}};
      b.events.push_back(make_step_event(r, event_type::step_started, s.started_at, s.step,
                                         step_status::running));
      b.events.push_back(make_step_event(r,
                                         failed ? event_type::step_failed
                                                : event_type::step_completed,
                                         s.ended_at, s.step, s.status));
    } else {
      s.reason = step_reason::requested;
      s.started_at = s.ended_at = 0;
    }
    if (failed)
      s.error = "exit code 1";
    if (i == 2)
      s.child_id = child;
    b.steps.push_back(std::move(s));
  }
  if (is_terminal(r.status))
    b.events.push_back(make_execution_event(r,
                                            r.status == execution_status::completed
                                              ? event_type::execution_completed
                                            : r.status == execution_status::failed
                                              ? event_type::execution_failed
                                              : event_type::execution_stopped,
                                            r.ended_at, r.status, r.reason));
}

execution_record make_root(size_t i, int64_t ended) {
  execution_record r;
  r.id = make_execution_id();
  r.root_id = r.id;
  r.graph = "graph" + std::to_string(i % 8);
  r.owner = "alice";
  auto m = i % 50;
  r.status = m < 3 ? execution_status::failed
             : m < 5 ? execution_status::stopped : execution_status::completed;
  if (r.status == execution_status::failed)
    r.reason = step_reason::step_failed;
  if (r.status == execution_status::stopped)
    r.reason = step_reason::requested;
  r.inputs = {{"topic", "topic " + std::to_string(i)}};
  r.created_at = ended - 2000;
  r.started_at = ended - 1900;
  r.ended_at = ended;
  if (r.status == execution_status::completed)
    r.outputs = {{"report", "report " + std::to_string(i)}};
  return r;
}

/// What the bench keeps of the history it built.
struct built {
  size_t executions = 0;
  std::string recent_id; ///< the newest root
  std::string deep_id;   ///< a root 90 % down the history (newest first)
};

built build_home(const std::string& home, size_t n) {
  store_options opts;
  opts.home = home;
  opts.initial_map_bytes = size_t{1} << 30;
  auto db = store::open(opts);
  if (!db)
    throw std::runtime_error(message_of(db.error()));
  built out;
  auto now = now_ms();
  size_t roots = 0;
  while (out.executions < n) {
    write_batch b;
    for (size_t k = 0; k < 2000 && out.executions < n; ++k, ++roots) {
      auto frac = static_cast<double>(out.executions) / static_cast<double>(n);
      auto ended = frac < 0.9 ? now - 30 * day_ms + static_cast<int64_t>(roots)
                              : now - 3'600'000 + static_cast<int64_t>(roots % 1'000'000);
      auto r = make_root(roots, ended);
      if (out.deep_id.empty() && frac >= 0.1)
        out.deep_id = r.id;
      out.recent_id = r.id;
      std::string child_id;
      if (roots % 10 == 0 && out.executions + 1 < n) {
        auto c = make_root(roots, ended - 100);
        c.id = make_execution_id();
        c.root_id = r.id;
        c.parent_id = r.id;
        c.parent_step = "review";
        c.depth = 1;
        c.status = r.status == execution_status::stopped ? execution_status::stopped
                                                         : execution_status::completed;
        c.reason = c.status == execution_status::stopped ? step_reason::parent_stopped : step_reason::none;
        child_id = c.id;
        // First written live, as a run writes it: that puts it in the
        // children index, which deletions of its tree walk.
        auto queued = c;
        queued.status = execution_status::queued;
        b.executions.push_back(std::move(queued));
        add_run(b, c);
        b.executions.push_back(std::move(c));
        ++out.executions;
      }
      add_run(b, r, child_id);
      b.executions.push_back(std::move(r));
      ++out.executions;
    }
    if (auto err = (*db)->commit(b))
      throw std::runtime_error(message_of(err));
  }
  return out;
}

/// Adds `n` roots left `running` by a dead owner, as a crash leaves them.
void add_interrupted(const std::string& home, size_t n) {
  pid_t dead = ::fork();
  if (dead == 0)
    ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  store_options opts;
  opts.home = home;
  auto db = store::open(opts);
  if (!db)
    throw std::runtime_error(message_of(db.error()));
  write_batch b;
  auto now = now_ms();
  for (size_t i = 0; i < n; ++i) {
    auto r = make_root(i, now);
    r.status = execution_status::running;
    r.reason = step_reason::none;
    r.ended_at = 0;
    r.outputs = nullptr;
    r.owner_pid = dead;
    r.owner_start = 1;
    add_run(b, r);
    b.steps.back().status = step_status::running; // the step it was running
    b.executions.push_back(std::move(r));
  }
  if (auto err = (*db)->commit(b))
    throw std::runtime_error(message_of(err));
}

/// What opening a home with recovery cost.
struct recovery {
  double ms = 0;        ///< open + recovery
  double commit_ms = 0; ///< of which its commit (write and flush)
  size_t recovered = 0; ///< executions
  size_t left_live = 0; ///< executions still live afterwards
  double heap_mib = 0;  ///< heap it left allocated
};

/// Opens `home` and recovers it, as every command does.
recovery open_and_recover(const std::string& home) {
  recovery out;
  auto heap0 = heap_mib();
  auto t0 = clock_type::now();
  store_options opts;
  opts.home = home;
  auto db = store::open(opts);
  if (!db)
    throw std::runtime_error(message_of(db.error()));
  (*db)->on_commit([&](double seconds) { out.commit_ms += seconds * 1000; });
  auto rec = recover_interrupted(**db);
  if (!rec)
    throw std::runtime_error(message_of(rec.error()));
  out.ms = ms_since(t0);
  out.recovered = rec->size();
  if (auto live = (*db)->live())
    out.left_live = live->size();
  out.heap_mib = heap_mib() - heap0;
  return out;
}

// -- the server ---------------------------------------------------------------------------

httplib::Client make_client(int port) {
  httplib::Client c{"127.0.0.1", port};
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);
  c.set_read_timeout(120, 0);
  c.set_bearer_token_auth(alice_token.c_str());
  return c;
}

/// GETs `path`; @returns its time (ms) and body size, -1 ms when not 200.
std::pair<double, size_t> timed_get(httplib::Client& c, const std::string& path) {
  auto t0 = clock_type::now();
  auto res = c.Get(path.c_str());
  auto ms = ms_since(t0);
  if (!res || res->status != 200)
    return {-1, 0};
  return {ms, res->body.size()};
}

/// The median time of `n` GETs of `path`, and the last body size.
std::pair<double, size_t> median_get(httplib::Client& c, const std::string& path, int n = 9) {
  std::vector<double> ms;
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    auto [t, b] = timed_get(c, path);
    if (t < 0)
      return {-1, 0};
    ms.push_back(t);
    bytes = b;
  }
  return {percentile(ms, 0.5), bytes};
}

/// The executions page of the dashboard: its list page and its six counts.
double dashboard_page(httplib::Client& c) {
  auto t0 = clock_type::now();
  if (timed_get(c, "/v1/executions?limit=50").first < 0)
    return -1;
  for (auto* s : {"queued", "running", "stopping", "stopped", "completed", "failed"})
    if (timed_get(c, std::string{"/v1/executions?status="} + s + "&limit=1000").first < 0)
      return -1;
  return ms_since(t0);
}

// -- the report -----------------------------------------------------------------------------

void row(const char* what, const std::string& value, const char* target = "") {
  std::printf("| %s | %s | %s |\n", what, value.c_str(), target);
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, x);
  return buf;
}

std::string ms_mib(double ms, double mib) {
  return fmt("%.1f ms", ms) + fmt(", %.1f MiB", mib);
}

void bench_size(size_t n) {
  temp_dir dir;
  auto home = dir.path + "/home";
  std::printf("\n### %zu executions\n\n", n);
  std::fflush(stdout);
  auto t0 = clock_type::now();
  auto b = build_home(home, n);
  auto build_ms = ms_since(t0);
  std::printf("| measure | value | target |\n|---|---|---|\n");
  row("build (direct commits)", fmt("%.1f s", build_ms / 1000));
  auto rec0 = open_and_recover(home);
  row("open + recovery, none live", ms_mib(rec0.ms, rec0.heap_mib) + " heap", "< 200 ms");
  add_interrupted(home, 1000);
  auto rec1 = open_and_recover(home);
  row("open + recovery, 1,000 interrupted",
      ms_mib(rec1.ms, rec1.heap_mib) + " heap, " + std::to_string(rec1.recovered)
        + " recovered, " + std::to_string(rec1.left_live) + " left live"
        + fmt("; its commit %.1f ms", rec1.commit_ms), "< 200 ms");
  auto out = dir.path + "/ls.out";
  auto runs = interleaved_runs(home, {{"--version"}, {"ls", "--limit", "20"},
                                       {"ls", "--status", "failed", "--limit", "20"}},
                               out);
  auto timed = [](const timed_command& t) {
    return fmt("%.1f ms", t.median_ms) + fmt(" (%.1f", t.min_ms) + fmt("–%.1f)", t.max_ms)
           + fmt(", %.1f MiB peak RSS", t.maxrss_kib / 1024.0);
  };
  row("process start alone (`canopy --version`)", timed(runs[0]));
  row("`ls --limit 20`", timed(runs[1]) + ", " + std::to_string(runs[1].lines) + " lines",
      "< 20 ms");
  row("`ls --status failed --limit 20`",
      timed(runs[2]) + ", " + std::to_string(runs[2].lines) + " lines", "< 20 ms");
  std::fflush(stdout);

  server_process::options o;
  o.home = home;
  o.start_timeout = std::chrono::seconds{600};
  t0 = clock_type::now();
  server_process srv{o};
  row("serve start (to listening)", fmt("%.0f ms", ms_since(t0)),
      ("RssAnon " + std::to_string(rss_kib(srv.pid(), "RssAnon") / 1024) + " MiB").c_str());
  auto c = make_client(srv.port());
  auto first = median_get(c, "/v1/executions?limit=50");
  row("`GET /v1/executions?limit=50`", fmt("%.2f ms", first.first), "< 10 ms");
  auto deep = median_get(c, "/v1/executions?limit=50&cursor=" + b.deep_id);
  row("deep cursor page (90 % down)", fmt("%.2f ms", deep.first), "< 10 ms");
  auto one = median_get(c, "/v1/executions/" + b.recent_id);
  row("`GET /v1/executions/{id}`", fmt("%.2f ms", one.first));
  auto metrics = median_get(c, "/metrics");
  row("`/metrics`", fmt("%.2f ms", metrics.first) + ", " + std::to_string(metrics.second)
                      + " bytes", "< 10 ms, size independent of history");
  std::vector<double> dash;
  for (int i = 0; i < 3; ++i)
    dash.push_back(dashboard_page(c));
  row("dashboard executions page (7 requests)", fmt("%.1f ms", percentile(dash, 0.5)));
  row("serve RssAnon after the reads",
      std::to_string(rss_kib(srv.pid(), "RssAnon") / 1024) + " MiB");
  std::fflush(stdout);

  // Pruning while the server answers: one client loops over the reads.
  std::atomic<bool> pruning{true};
  std::vector<double> lat;
  size_t failures = 0;
  std::thread reader{[&] {
    auto rc = make_client(srv.port());
    const std::string paths[] = {"/v1/executions?limit=50", "/v1/executions/" + b.recent_id,
                                 "/metrics", "/v1/executions?status=failed&limit=50"};
    for (size_t i = 0; pruning; ++i) {
      auto [ms, bytes] = timed_get(rc, paths[i % 4]);
      if (ms < 0)
        ++failures;
      else
        lat.push_back(ms);
    }
  }};
  auto pr = run_timed(home, {"prune", "--older-than", "7d", "--json"}, dir.path + "/prune.out");
  pruning = false;
  reader.join();
  auto pruned = json::parse(read_file(dir.path + "/prune.out"), nullptr, false);
  auto executions = pruned.is_object() ? pruned.value("executions", size_t{0}) : 0;
  row("prune (`canopy prune --older-than 7d`)",
      fmt("%.1f s", pr.ms / 1000) + ", " + std::to_string(executions) + " executions, exit "
        + std::to_string(pr.code) + fmt(", %.0f MiB peak RSS", pr.maxrss_kib / 1024.0));
  row("p99 of reads during the prune",
      fmt("%.1f ms", percentile(lat, 0.99)) + " (" + std::to_string(lat.size()) + " requests, "
        + std::to_string(failures) + " failed" + fmt(", max %.1f ms)", percentile(lat, 1.0)),
      "< 100 ms");
  srv.terminate();
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{10'000, 100'000, 1'000'000};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      sizes.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p < list.size();) {
        auto q = list.find(',', p);
        sizes.push_back(std::stoul(list.substr(p, q - p)));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_store [--sizes N,N,...]\n");
      return 2;
    }
  }
  std::printf("## bench_store\n");
  try {
    commands.start();
    for (auto n : sizes)
      bench_size(n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_store: %s\n", e.what());
    return 2;
  }
  return 0;
}
