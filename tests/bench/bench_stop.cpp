// bench_stop: stopping a live tree of executions.
//
// (a) Trees of 1,111 / 11,111 / 111,111 executions (10-ary, leaves at depth
//     3/4/5). Every inner execution has 10 `graph` steps naming the next
//     level's file; every leaf runs one cooperative `fn: sleep` of one hour.
//     Once every leaf's sleep has started (counted from `step.started`
//     events), the root is stopped with `handle.stop()`; measured: stop
//     request to the committed snapshot (the root's actor is down, which it
//     is only after the snapshot's commit was acknowledged), and to the
//     `stop.handled` event. The snapshot's own commit is timed by the store
//     (`runtime_options::on_commit`): the stop without it is what the
//     execution core costs beyond the disk's two flushes. The snapshot is
//     then checked in the store: the
//     root `stopped`/`requested`, the stop request handled, every execution
//     of the tree `stopped`, every step `pending`, nothing left live.
// (b) Beside each, a tree of bare CAF actors of the same shape in the same
//     process (the runtime's actor system), stopped with trap-and-forward:
//     each actor traps the exit, forwards it to its children and quits after
//     their down messages. Timed from anon_send_exit(root) to the last actor
//     done (a counter, not await_all_actors_done). Both trees are left
//     alone for `settle_time` once running before their stop, so both stops
//     start from an idle scheduler (CAF's workers asleep); `--bare-warm`
//     stops the bare tree at once instead (its workers still polling from
//     the spawn: 10-20 % faster at 11,111).
//     Both are timed over the same number of rounds (`--rounds=N`, default
//     5), a canopy tree and a bare tree alternately, so that both medians
//     see the same moments of a noisy machine; the table shows median and
//     min–max of each and the ratio of the medians.
// (c) RSS (VmRSS) per live execution: (RSS once every leaf runs - RSS before
//     start) / executions; again 2.5 s later (the store writer has settled and the memory keeper
//     has handed back free heap; the stop is timed after this), after freed heap is released, and the
//     malloc bytes in use (jemalloc's count, or mallinfo2). Also the bare CAF tree per actor (its
//     VmRSS delta reuses heap freed by the canopy tree: use the malloc one).
//     The "before" sample follows a release of the free heap and of the
//     store's mapped file pages (`store::drop_mapped_pages`), so that neither
//     what an earlier tree left nor its later release skews the deltas.
// (d) Resume: a 100,000-step execution (50,000 noops complete, then a one
//     hour sleep that the other 49,999 noops need) is stopped once the first
//     half completed; timed from `resume()` to the `step.started` event of
//     its first pending step.
//
//   usage: bench_stop [SIZE...] [--rounds=N] [--bare-warm] [--no-resume]
//                     [--resume-steps=N] [--timeout=SECONDS] [--keep] [--perf=PREFIX]
//   SIZE: 1111, 11111, 111111 (or the leaf depth 3, 4, 5); default all three.
//   `--no-trees` runs only (d). Every wait has a timeout (default 600 s);
//   a hang prints what is known and exits 2. `--perf=PREFIX` attaches
//   `perf record -g` to this process around each stop and the resume only
//   (PREFIX.stopN.data, PREFIX.resume.data); the timings then include perf's
//   overhead. `--exit-when-running` exits (without cleanup) as soon as the
//   first tree runs, so that a heap profiler's "leaks" are the live tree.

#include <lmdb.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <caf/all.hpp>

#include "runtime/node/memory.hpp"
#include "runtime/node/runtime.hpp"
#include "tests/integration/mapped_kib.hpp"

using namespace canopy::core;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

// -- helpers ---------------------------------------------------------------------

/// How long a running tree is left alone before its stop: the canopy tree
/// for its settled RSS sample (two and a half memory-keeper ticks: it hands
/// free heap back once it has stopped growing, runtime/node/memory.hpp), the bare
/// tree as long, so that both stops start from the same idle scheduler.
constexpr auto settle_time = std::chrono::milliseconds{2500};

/// Stop the bare tree at once once it runs (`--bare-warm`).
bool bare_warm = false;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// A field of /proc/self/status in KiB (VmRSS, RssAnon, RssFile, VmHWM).
long status_kib(const char* field) {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  auto len = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, len, field) == 0 && line.size() > len && line[len] == ':')
      return std::atol(line.c_str() + len + 1);
  return -1;
}

struct rss_sample {
  long rss = 0, anon = 0, file = 0;
  long store_map = 0; ///< of `file`: the store's mapped file pages
  double heap = 0; ///< bytes allocated with malloc and in use (jemalloc's or mallinfo2)
};

double heap_in_use() {
  canopy::core::heap_figures h;
  if (canopy::core::allocator_figures(h))
    return static_cast<double>(h.used_bytes);
  auto mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd);
}

/// Hands freed heap back to the kernel (jemalloc: its free pages; glibc: malloc_trim).
void release_heap() {
  if (!canopy::core::release_free_heap())
    malloc_trim(0);
}

/// `with_map`: also the store's map (reads /proc/self/smaps: not every 10 ms).
rss_sample sample_rss(bool trim = false, bool with_map = true) {
  if (trim)
    release_heap(); // return freed heap, so a delta starts from a clean baseline
  rss_sample s{status_kib("VmRSS"), status_kib("RssAnon"), status_kib("RssFile")};
  if (with_map)
    s.store_map = canopy::core::test::mapped_kib("/data.mdb");
  s.heap = heap_in_use();
  return s;
}

std::string cpu_model() {
  std::ifstream in{"/proc/cpuinfo"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      return pos == std::string::npos ? line : line.substr(pos + 2);
    }
  return "unknown";
}

std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string today() {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

std::string group(double v) {
  auto s = std::to_string(static_cast<long long>(v + 0.5));
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<size_t>(i), ",");
  return s;
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// "median ms (min–max)" of `v`, with `digits` decimals.
std::string spread(const std::vector<double>& v, int digits) {
  if (v.empty())
    return "–";
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f ms (%.*f–%.*f)", digits, median(v), digits, *lo, digits,
                *hi);
  return buf;
}

std::string tmp_root;
bool keep_tmp = false;
bool exit_when_running = false;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_stop: FAILED: %s\n", msg.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  if (!keep_tmp && !tmp_root.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_root, ec);
  }
  // Live actors would block the runtime's destructor: leave at once.
  std::_Exit(2);
}

/// The floor under any stop that ends in a durable snapshot: the time of one
/// durable LMDB commit (one small record, the store's flags: fsync on
/// commit) in `dir`, on the store's file system. @returns the median of `n`.
double durable_commit_ms(const fs::path& dir, int n) {
  fs::create_directories(dir);
  MDB_env* env = nullptr;
  MDB_dbi dbi;
  MDB_txn* txn = nullptr;
  if (mdb_env_create(&env) != 0 || mdb_env_set_mapsize(env, size_t{64} << 20) != 0
      || mdb_env_open(env, dir.c_str(), MDB_NOTLS, 0644) != 0
      || mdb_txn_begin(env, nullptr, 0, &txn) != 0 || mdb_dbi_open(txn, nullptr, 0, &dbi) != 0
      || mdb_txn_commit(txn) != 0)
    die("cannot open the LMDB environment for the commit anchor in " + dir.string());
  std::string value(160, 'v');
  std::vector<double> times;
  for (int i = 0; i < n; ++i) {
    auto t0 = clock_type::now();
    auto key = "commit" + std::to_string(i);
    MDB_val k{key.size(), key.data()}, v{value.size(), value.data()};
    if (mdb_txn_begin(env, nullptr, 0, &txn) != 0 || mdb_put(txn, dbi, &k, &v, 0) != 0
        || mdb_txn_commit(txn) != 0)
      die("a commit of the anchor failed");
    times.push_back(ms_between(t0, clock_type::now()));
  }
  mdb_env_close(env);
  return median(std::move(times));
}

/// Polls `pred` every millisecond until it holds or `timeout` passes.
bool wait_until(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  auto deadline = clock_type::now() + timeout;
  while (!pred()) {
    if (clock_type::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return true;
}

/// `--perf=PREFIX`: `perf record -g` attached to this process around one
/// phase, written to PREFIX.NAME.data.
std::string perf_prefix;
std::string perf_callgraph = "fp"; ///< `--perf-callgraph=dwarf` for libraries without frame pointers
std::string perf_freq = "4000";

struct perf_session {
  pid_t pid = -1;
  explicit perf_session(const std::string& name) {
    if (perf_prefix.empty())
      return;
    auto out = perf_prefix + "." + name + ".data";
    auto me = std::to_string(::getpid());
    std::vector<std::string> args{"perf", "record", "--call-graph", perf_callgraph, "-F", perf_freq, "-o", out, "-p", me};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid, "perf", nullptr, nullptr, argv.data(), environ) != 0) {
      pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{700}); // let it attach
  }
  ~perf_session() {
    if (pid <= 0)
      return;
    ::kill(pid, SIGINT);
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
};

void write_file(const fs::path& p, const json& doc) {
  std::ofstream out{p};
  out << doc.dump();
  if (!out)
    die("cannot write " + p.string());
}

// -- (a) the canopy tree ------------------------------------------------------------

/// Writes level_0.json .. level_D.json into `dir`: levels 0..D-1 have 10
/// `graph` steps naming the next level, level D one hour-long sleep.
fs::path write_tree_files(const fs::path& dir, int depth) {
  fs::create_directories(dir);
  for (int k = 0; k <= depth; ++k) {
    json doc = {{"name", "level_" + std::to_string(k)}, {"steps", json::object()}};
    if (k == 0)
      doc["limits"] = {{"max_steps", 100000000}};
    if (k < depth) {
      for (int i = 0; i < 10; ++i)
        doc["steps"]["c" + std::to_string(i)] = {
          {"graph", "level_" + std::to_string(k + 1) + ".json"}};
    } else {
      doc["steps"]["sleep"] = {{"fn", "sleep"}, {"with", {{"ms", 3600000}}}};
    }
    write_file(dir / ("level_" + std::to_string(k) + ".json"), doc);
  }
  return dir / "level_0.json";
}

struct tree_events {
  std::atomic<bool> stop_requested{false};
  std::atomic<size_t> started_after_stop{0}; ///< step.started delivered after stop.requested
  std::atomic<size_t> stopped_events{0};     ///< execution.stopped
  std::atomic<size_t> pending_events{0};     ///< step.pending
  std::atomic<size_t> leaves_started{0};
  std::atomic<size_t> executions_started{0};
  std::atomic<bool> handled{false};
  std::atomic<int64_t> handled_ns{0}; ///< steady clock, at delivery
  std::atomic<int64_t> root_stopped_event_ms{0}; ///< the event's own time (wall ms)
};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           clock_type::now().time_since_epoch())
    .count();
}

clock_type::time_point from_ns(int64_t ns) {
  return clock_type::time_point{std::chrono::nanoseconds{ns}};
}

/// The store's commits while a stop is timed (`runtime_options::on_commit`,
/// called on the committing thread once each commit returned).
struct commit_log {
  static constexpr size_t capacity = 256;
  std::atomic<bool> on{false};
  std::atomic<size_t> n{0};
  std::array<std::pair<int64_t, int64_t>, capacity> entries; ///< (end, duration) in steady ns
  void start() {
    n = 0;
    on = true;
  }
  void record(double seconds) {
    if (!on.load())
      return;
    auto i = n.fetch_add(1);
    if (i < capacity)
      entries[i] = {steady_ns(), static_cast<int64_t>(seconds * 1e9)};
  }
  /// Stops recording. @returns the duration (ms) of the last commit that
  /// ended before `until_ns` (the stop's snapshot) and how many there were.
  std::pair<double, size_t> finish(int64_t until_ns) {
    on = false;
    auto count = std::min(n.load(), capacity);
    double last_ms = 0;
    int64_t last_end = 0;
    size_t before = 0;
    for (size_t i = 0; i < count; ++i) {
      auto [end, dur] = entries[i];
      if (end > until_ns)
        continue;
      ++before;
      if (end >= last_end) {
        last_end = end;
        last_ms = static_cast<double>(dur) / 1e6;
      }
    }
    return {last_ms, before};
  }
};

commit_log commits;

struct tree_result {
  size_t executions = 0;
  double parse_ms = 0;
  double start_to_leaves_ms = 0;
  double stop_request_ms = 0;  ///< handle.stop() returned (request durable + delivered)
  double cascade_ms = 0;       ///< root wrote its snapshot batch (event time, ms resolution)
  double committed_ms = 0;     ///< root actor down: snapshot committed and acknowledged
  double snapshot_commit_ms = 0; ///< the snapshot's own commit (the last before the root's down)
  size_t commits_in_stop = 0;    ///< commits from the stop to the root's down
  double handled_event_ms = 0; ///< `stop.handled` delivered to the subscriber
  double verify_ms = 0;
  double materialized_ms = 0;  ///< the writer materialised the compact snapshot (idle time)
  rss_sample before_parse, before, running, settled, settled_trimmed, after;
  rss_sample peak; ///< the highest VmRSS and malloc in use sampled during the start
  std::string verdict;
};

/// Samples VmRSS and malloc in use every 10 ms until destroyed; keeps the highest.
class peak_sampler {
public:
  explicit peak_sampler(rss_sample& out) : out_(out) {
    thread_ = std::thread{[this] {
      std::unique_lock<std::mutex> lock{mtx_};
      while (!done_) {
        auto s = sample_rss(false, false);
        out_.rss = std::max(out_.rss, s.rss);
        out_.anon = std::max(out_.anon, s.anon);
        out_.heap = std::max(out_.heap, s.heap);
        cv_.wait_for(lock, std::chrono::milliseconds{10});
      }
    }};
  }
  ~peak_sampler() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

private:
  rss_sample& out_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// Checks the stored snapshot of the stopped tree. @returns "" or a problem.
std::string verify_tree(const store& db, const std::string& root_id, const std::string& stop_id,
                        int depth, size_t expected) {
  std::ostringstream problems;
  int shown = 0;
  auto problem = [&](const std::string& s) {
    if (shown++ < 5)
      problems << s << "; ";
  };
  auto root = db.execution(root_id);
  if (!root)
    return "root not found";
  if (root->status != execution_status::stopped || root->reason != step_reason::requested)
    problem(std::string{"root is "} + to_string(root->status) + "/" + to_string(root->reason));
  auto req = db.stop(stop_id);
  if (!req)
    problem("stop request not found");
  else if (!req->handled || req->result != stop_result::stopped)
    problem("stop request handled=" + std::to_string(req->handled) + " result=" + to_string(req->result));
  size_t seen = 0, stopped = 0, pending_steps = 0, steps_total = 0;
  std::vector<std::pair<std::string, int>> todo{{root_id, 0}};
  while (!todo.empty()) {
    auto [id, level] = todo.back();
    todo.pop_back();
    ++seen;
    auto rec = db.execution(id);
    if (!rec) {
      problem("execution " + id + " missing");
      continue;
    }
    if (rec->status == execution_status::stopped)
      ++stopped;
    else
      problem("execution " + id + " (level " + std::to_string(level) + ") is "
              + to_string(rec->status));
    if (level > 0 && rec->reason != step_reason::parent_stopped)
      problem("execution " + id + " reason '" + to_string(rec->reason) + "'");
    auto steps = db.steps(id);
    if (!steps) {
      problem("steps of " + id + " unreadable");
      continue;
    }
    size_t want_steps = level < depth ? 10 : 1;
    if (steps->size() != want_steps)
      problem("execution " + id + " has " + std::to_string(steps->size()) + " steps");
    for (auto& s : *steps) {
      ++steps_total;
      if (s.status == step_status::pending)
        ++pending_steps;
      else
        problem("step " + id + "/" + s.step + " is " + to_string(s.status));
    }
    auto kids = db.children(id);
    if (!kids) {
      problem("children of " + id + " unreadable");
      continue;
    }
    if (kids->size() != (level < depth ? 10u : 0u))
      problem("execution " + id + " has " + std::to_string(kids->size()) + " children");
    for (auto& k : *kids)
      todo.emplace_back(k, level + 1);
  }
  if (seen != expected)
    problem("found " + std::to_string(seen) + " executions, expected " + std::to_string(expected));
  if (auto live = db.live(); live && !live->empty())
    problem(std::to_string(live->size()) + " executions still live");
  auto s = problems.str();
  if (!s.empty())
    return s;
  std::ostringstream ok;
  ok << "ok: " << stopped << " executions stopped, " << pending_steps << "/" << steps_total
     << " steps pending, request handled";
  return ok.str();
}

tree_result run_tree(runtime& rt, const fs::path& dir, int depth, std::chrono::seconds timeout) {
  tree_result out;
  size_t leaves = 1;
  out.executions = 1;
  for (int k = 0; k < depth; ++k) {
    leaves *= 10;
    out.executions += leaves;
  }
  auto file = write_tree_files(dir, depth);
  out.before_parse = sample_rss(true);
  auto t0 = clock_type::now();
  auto parsed = rt.parse_file(file.string());
  if (!parsed)
    die("tree graph invalid: " + to_string(parsed.errors.front()));
  out.parse_ms = ms_between(t0, clock_type::now());

  auto ev = std::make_shared<tree_events>();
  // Like the free heap, the file pages an earlier tree left mapped would be
  // dropped during this start (by the writer): without them in "before" too.
  (void) rt.db()->drop_mapped_pages();
  out.before = sample_rss(true);
  auto sub = rt.subscribe([ev](const event_record& e) {
    // Events arrive in seq order: nothing may start once the request is stored.
    if (e.type == event_type::step_started && ev->stop_requested.load())
      ev->started_after_stop.fetch_add(1);
    if (e.type == event_type::stop_requested)
      ev->stop_requested.store(true);
    else if (e.type == event_type::execution_stopped)
      ev->stopped_events.fetch_add(1);
    else if (e.type == event_type::step_pending)
      ev->pending_events.fetch_add(1);
    if (e.type == event_type::step_started && e.step == "sleep")
      ev->leaves_started.fetch_add(1, std::memory_order_relaxed);
    else if (e.type == event_type::execution_started)
      ev->executions_started.fetch_add(1, std::memory_order_relaxed);
    else if (e.type == event_type::stop_handled && e.parent_id.empty()) { // the only root
      ev->handled_ns.store(steady_ns());
      ev->handled.store(true);
    } else if (e.type == event_type::execution_stopped && e.parent_id.empty())
      ev->root_stopped_event_ms.store(e.time);
  });
  t0 = clock_type::now();
  std::optional<peak_sampler> sampler{std::in_place, out.peak};
  auto h = rt.start(parsed.value, json::object());
  if (!h)
    die("start failed: " + caf::to_string(h.error()));
  parsed = parse_result{}; // the runtime holds the graph now
  if (!wait_until([&] { return ev->leaves_started.load() >= leaves; }, timeout))
    die("only " + std::to_string(ev->leaves_started.load()) + " of " + std::to_string(leaves)
        + " leaves started (" + std::to_string(ev->executions_started.load())
        + " executions started) within the timeout");
  out.start_to_leaves_ms = ms_between(t0, clock_type::now());
  sampler.reset();
  out.running = sample_rss(false);
  // The store writer may still hold the last start batches and their event
  // copies: let it settle, then sample again (and once more after giving
  // freed heap back to the kernel).
  std::this_thread::sleep_for(settle_time);
  out.settled = sample_rss(false);
  out.settled_trimmed = sample_rss(true);
  if (exit_when_running) {
    // For heap profilers: what is still allocated at exit is the live tree.
    std::printf("exit with %zu executions live: VmRSS %ld KiB, malloc in use %.0f KiB "
                "(peak during the start: VmRSS %ld KiB, malloc in use %.0f KiB)\n",
                out.executions, out.settled.rss, out.settled.heap / 1024, out.peak.rss,
                out.peak.heap / 1024);
    std::fflush(stdout);
    std::error_code ec;
    fs::remove_all(tmp_root, ec);
    std::exit(0);
  }

  // -- the stop ---------------------------------------------------------------
  std::optional<perf_session> perf;
  perf.emplace("stop" + std::to_string(out.executions));
  auto wall0 = wall_ms();
  commits.start();
  auto ts = clock_type::now();
  auto req = h->stop();
  auto t_req = clock_type::now();
  if (!req)
    die("stop failed: " + caf::to_string(req.error()));
  if (req->result == canopy::core::stop_result::no_execution)
    die("stop answered no_execution");
  if (!h->wait_for(std::chrono::duration_cast<millis>(timeout))) {
    auto rec = h->status();
    die("stop did not finish within the timeout (root is "
        + (rec ? std::string{to_string(rec->status)} : std::string{"unreadable"}) + ")");
  }
  auto t_down = clock_type::now();
  std::tie(out.snapshot_commit_ms, out.commits_in_stop) = commits.finish(
    std::chrono::duration_cast<std::chrono::nanoseconds>(t_down.time_since_epoch()).count());
  perf.reset(); // the profile covers the stop up to the committed snapshot
  if (!wait_until([&] { return ev->handled.load(); }, timeout))
    die("no stop.handled event for the root within the timeout");
  out.stop_request_ms = ms_between(ts, t_req);
  out.committed_ms = ms_between(ts, t_down);
  out.handled_event_ms = ms_between(ts, from_ns(ev->handled_ns.load()));
  out.cascade_ms = static_cast<double>(ev->root_stopped_event_ms.load() - wall0);
  sub.cancel();

  // -- the snapshot -------------------------------------------------------------
  t0 = clock_type::now();
  out.verdict = verify_tree(*rt.db(), h->id(), req->request.id, depth, out.executions);
  out.verify_ms = ms_between(t0, clock_type::now());
  // The store writer materialises the compact snapshot once idle for 1 s:
  // wait for it, so that it never runs beside the bare CAF tree.
  if (!wait_until(
        [&] {
          auto left = rt.db()->subtree_stops(h->id());
          return left && left->empty();
        },
        timeout))
    die("the compact snapshot was not materialised within the timeout");
  out.materialized_ms = ms_between(ts, clock_type::now());
  // Materialised, the store must read the same.
  auto again = verify_tree(*rt.db(), h->id(), req->request.id, depth, out.executions);
  if (again != out.verdict)
    out.verdict += " (**after materialising**: " + again + ")";
  size_t steps_total = (out.executions - 1) + leaves; // graph steps + sleeps
  std::ostringstream evs;
  evs << "; events: " << ev->stopped_events.load() << " execution.stopped, "
      << ev->pending_events.load() << " step.pending, " << ev->started_after_stop.load()
      << " step.started after stop.requested";
  if (ev->stopped_events.load() != out.executions || ev->pending_events.load() != steps_total
      || ev->started_after_stop.load() != 0)
    evs << " (**UNEXPECTED**: want " << out.executions << ", " << steps_total << ", 0)";
  out.verdict += evs.str();
  // The ended executions' machines wait in the graveyard until the memory
  // keeper reaps them, within two of its ticks after the last ending
  // (actors/graveyard.hpp): what the tree keeps is sampled after that.
  std::this_thread::sleep_until(t_down
                                + std::chrono::milliseconds{2 * memory_keeper_interval_ms + 500});
  out.after = sample_rss(true);
  return out;
}

// -- (b) the bare CAF tree -----------------------------------------------------------

struct bare_ctx {
  int max_depth = 0;
  size_t total = 0;
  std::atomic<size_t> started{0};
  std::atomic<size_t> persisted{0};
  std::atomic<size_t> done{0};
  std::mutex mtx;
  std::condition_variable cv;
};

struct bare_state {
  std::vector<caf::actor> kids;
  size_t pending = 0;
  caf::error reason;
  bool stopping = false;
  std::shared_ptr<bare_ctx> ctx;
  ~bare_state() {
    if (ctx && ctx->done.fetch_add(1) + 1 == ctx->total) {
      std::lock_guard<std::mutex> guard{ctx->mtx};
      ctx->cv.notify_all();
    }
  }
};

caf::behavior bare_node(caf::stateful_actor<bare_state>* self, int depth, caf::actor_addr parent,
                        std::shared_ptr<bare_ctx> ctx) {
  auto& st = self->state;
  st.ctx = ctx;
  if (depth < ctx->max_depth)
    for (int i = 0; i < 10; ++i) {
      auto k = self->spawn<caf::linked>(bare_node, depth + 1, self->address(), ctx);
      self->monitor(k);
      st.kids.push_back(k);
    }
  self->set_exit_handler([=](caf::exit_msg& m) {
    auto& st = self->state;
    // anon_send_exit() sets source = receiver; children's exit_msgs are ignored.
    bool from_above = m.source == parent || m.source == self->address();
    if (!from_above || st.stopping)
      return;
    st.stopping = true;
    st.reason = m.reason;
    st.ctx->persisted.fetch_add(1, std::memory_order_relaxed); // "persist"
    if (st.kids.empty()) {
      self->quit(m.reason);
      return;
    }
    st.pending = st.kids.size();
    for (auto& k : st.kids)
      self->send_exit(k, m.reason);
  });
  self->set_down_handler([=](caf::down_msg&) {
    auto& st = self->state;
    if (st.stopping && --st.pending == 0) {
      st.kids.clear();
      self->quit(st.reason);
    }
  });
  ctx->started.fetch_add(1, std::memory_order_relaxed);
  return {[](int) {}};
}

struct bare_result {
  std::vector<double> stop_ms;
  double spawn_ms = 0;
  double rss_per_actor_b = 0;
  double heap_per_actor_b = 0;
};

bare_result run_bare(caf::actor_system& sys, int depth, size_t total, int rounds,
                     std::chrono::seconds timeout) {
  bare_result out;
  for (int r = 0; r < rounds; ++r) {
    auto ctx = std::make_shared<bare_ctx>();
    ctx->max_depth = depth;
    ctx->total = total;
    auto before = sample_rss(true);
    auto t0 = clock_type::now();
    auto root = sys.spawn(bare_node, 0, caf::actor_addr{}, ctx);
    if (!wait_until([&] { return ctx->started.load() >= total; }, timeout))
      die("bare CAF tree did not start");
    auto t1 = clock_type::now();
    auto running = sample_rss(false);
    if (!bare_warm)
      std::this_thread::sleep_for(settle_time);
    if (r == 0) {
      out.spawn_ms = ms_between(t0, t1);
      out.rss_per_actor_b = 1024.0 * static_cast<double>(running.rss - before.rss)
                            / static_cast<double>(total);
      out.heap_per_actor_b = (running.heap - before.heap) / static_cast<double>(total);
    }
    auto ts = clock_type::now();
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    {
      std::unique_lock<std::mutex> guard{ctx->mtx};
      if (!ctx->cv.wait_for(guard, timeout, [&] { return ctx->done.load() >= total; }))
        die("bare CAF tree did not stop: " + std::to_string(ctx->done.load()) + " of "
            + std::to_string(total) + " done");
    }
    auto te = clock_type::now();
    if (ctx->persisted.load() != total)
      die("bare CAF tree: persisted " + std::to_string(ctx->persisted.load()));
    out.stop_ms.push_back(ms_between(ts, te));
    root = nullptr;
  }
  return out;
}

// -- (d) resume ------------------------------------------------------------------------

struct resume_result {
  size_t steps = 0;
  double parse_ms = 0;
  double run_half_ms = 0;
  double stop_ms = 0;
  double resume_call_ms = 0;   ///< resume() returned
  double first_started_ms = 0; ///< first pending step's step.started delivered
  std::string verdict;
};

resume_result run_resume(runtime& rt, size_t steps, std::chrono::seconds timeout) {
  resume_result out;
  out.steps = steps;
  size_t half = steps / 2;
  auto t0 = clock_type::now();
  json doc = {{"name", "resume_bench"},
              {"limits", {{"max_steps", 100000000}}},
              {"steps", json::object()}};
  auto& js = doc["steps"];
  for (size_t i = 0; i < half; ++i)
    js["n" + std::to_string(i)] = {{"fn", "noop"}};
  js["wait"] = {{"fn", "sleep"}, {"with", {{"ms", 3600000}}}};
  for (size_t i = half + 1; i < steps; ++i)
    js["m" + std::to_string(i)] = {{"fn", "noop"}, {"needs", {"wait"}}};
  auto parsed = parse_graph(doc, tmp_root, rt.graph_options());
  if (!parsed)
    die("resume graph invalid: " + to_string(parsed.errors.front()));
  doc = json{};
  out.parse_ms = ms_between(t0, clock_type::now());

  std::atomic<size_t> completed{0};
  std::atomic<bool> waiting{false};
  std::string id;
  {
    auto sub = rt.subscribe([&](const event_record& e) {
      if (e.type == event_type::step_completed)
        completed.fetch_add(1, std::memory_order_relaxed);
      else if (e.type == event_type::step_started && e.step == "wait")
        waiting.store(true);
    });
    t0 = clock_type::now();
    auto h = rt.start(parsed.value, json::object());
    if (!h)
      die("start failed: " + caf::to_string(h.error()));
    parsed = parse_result{};
    id = h->id();
    if (!wait_until([&] { return completed.load() >= half && waiting.load(); }, timeout))
      die("resume bench: only " + std::to_string(completed.load()) + " steps completed");
    out.run_half_ms = ms_between(t0, clock_type::now());
    t0 = clock_type::now();
    auto req = h->stop();
    if (!req)
      die("stop failed: " + caf::to_string(req.error()));
    if (!h->wait_for(std::chrono::duration_cast<millis>(timeout)))
      die("resume bench: stop did not finish");
    out.stop_ms = ms_between(t0, clock_type::now());
    sub.cancel();
  }
  auto rec = rt.db()->execution(id);
  if (!rec || rec->status != execution_status::stopped)
    die("resume bench: execution not stopped before resume");
  size_t done_before = 0;
  if (auto before = rt.db()->steps(id))
    for (auto& s : *before)
      done_before += s.status == step_status::completed;

  // -- the resume ---------------------------------------------------------------
  std::atomic<int64_t> first_ns{0};
  auto sub = rt.subscribe([&](const event_record& e) {
    if (e.type == event_type::step_started && e.execution_id == id && first_ns.load() == 0)
      first_ns.store(steady_ns());
  });
  std::optional<perf_session> perf;
  perf.emplace("resume");
  t0 = clock_type::now();
  auto h = rt.resume(id);
  auto t1 = clock_type::now();
  if (!h)
    die("resume failed: " + caf::to_string(h.error()));
  if (!wait_until([&] { return first_ns.load() != 0; }, timeout))
    die("resume bench: no step started after resume");
  perf.reset();
  out.resume_call_ms = ms_between(t0, t1);
  out.first_started_ms = ms_between(t0, from_ns(first_ns.load()));
  sub.cancel();
  // Clean up: stop it again.
  if (auto req = h->stop(); !req)
    die("second stop failed");
  if (!h->wait_for(std::chrono::duration_cast<millis>(timeout)))
    die("resume bench: second stop did not finish");
  auto after = rt.db()->steps(id);
  size_t done_after = 0;
  if (after)
    for (auto& s : *after)
      done_after += s.status == step_status::completed;
  std::ostringstream v;
  v << done_before << " completed before resume, " << done_after << " after the second stop";
  if (done_before != half)
    v << " (EXPECTED " << half << ")";
  out.verdict = v.str();
  return out;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<int> depths;
  int rounds = 5; ///< canopy and bare CAF alike: both medians over as many samples
  bool do_resume = true, do_trees = true;
  size_t resume_steps = 100000;
  long timeout_s = 600;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* key) -> const char* {
      auto n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? a.c_str() + n : nullptr;
    };
    if (auto v = val("--rounds="))
      rounds = std::max(1, std::atoi(v));
    else if (auto v = val("--resume-steps="))
      resume_steps = std::stoul(v);
    else if (auto v = val("--timeout="))
      timeout_s = std::atol(v);
    else if (a == "--bare-warm")
      bare_warm = true;
    else if (a == "--no-resume")
      do_resume = false;
    else if (a == "--no-trees")
      do_trees = false;
    else if (auto v = val("--perf="))
      perf_prefix = v;
    else if (auto v = val("--perf-callgraph="))
      perf_callgraph = v;
    else if (auto v = val("--perf-freq="))
      perf_freq = v;
    else if (a == "--exit-when-running")
      exit_when_running = true;
    else if (a == "--keep")
      keep_tmp = true;
    else if (a == "1111" || a == "3")
      depths.push_back(3);
    else if (a == "11111" || a == "4")
      depths.push_back(4);
    else if (a == "111111" || a == "5")
      depths.push_back(5);
    else {
      std::fprintf(stderr,
                   "usage: bench_stop [1111|11111|111111|3|4|5 ...] [--rounds=N] "
                   "[--bare-warm] [--no-resume] [--no-trees] [--resume-steps=N] "
                   "[--timeout=S] [--keep] [--perf=PREFIX]\n");
      return 1;
    }
  }
  if (depths.empty())
    depths = {3, 4, 5};
  if (!do_trees)
    depths.clear();
  std::chrono::seconds timeout{timeout_s};

  char tmpl[] = "/tmp/canopy-bench-stop-XXXXXX";
  if (!mkdtemp(tmpl))
    die("mkdtemp failed");
  tmp_root = tmpl;

  std::printf("## bench_stop\n\n%s, %u CPUs (`nproc`), %s, load average %s, pid %d\n\n",
              today().c_str(), std::thread::hardware_concurrency(), cpu_model().c_str(),
              load_average().c_str(), static_cast<int>(::getpid()));
  std::fflush(stdout);

  auto rss_start = sample_rss(false);
  auto opened = runtime::open([&] { runtime_options o; o.home = tmp_root + "/home"; o.on_commit = [](double s) { commits.record(s); }; return o; }());
  if (!opened)
    die("cannot open runtime: " + caf::to_string(opened.error()));
  auto& rt = **opened;
  std::fprintf(stderr, "runtime open: RSS %ld KiB (process start %ld KiB), %zu CAF workers\n",
               sample_rss(false).rss, rss_start.rss, rt.system().scheduler().num_workers());

  struct row {
    int depth;
    std::vector<tree_result> canopy;
    bare_result bare;
    double commit_ms = 0; ///< one durable LMDB commit, right after the bare tree
  };
  std::vector<row> rows;
  for (auto d : depths) {
    row r;
    r.depth = d;
    // Canopy and bare CAF alternate round by round: a slow minute of the
    // machine falls on both series alike.
    for (int i = 0; i < rounds; ++i) {
      std::fprintf(stderr, "tree depth %d, round %d of %d ...\n", d, i + 1, rounds);
      auto dir = fs::path(tmp_root) / ("tree" + std::to_string(d) + "_" + std::to_string(i));
      r.canopy.push_back(run_tree(rt, dir, d, timeout));
      auto& c = r.canopy.back();
      std::fprintf(stderr,
                   "  %zu executions: parse %.0f ms, start->leaves %.0f ms, stop: request %.1f "
                   "ms, cascade %.0f ms, committed %.1f ms (the snapshot's commit %.2f ms, %zu "
                   "commits), handled event %.1f ms; %s\n",
                   c.executions, c.parse_ms, c.start_to_leaves_ms, c.stop_request_ms,
                   c.cascade_ms, c.committed_ms, c.snapshot_commit_ms, c.commits_in_stop,
                   c.handled_event_ms, c.verdict.c_str());
      auto bare = run_bare(rt.system(), d, c.executions, 1, timeout);
      std::fprintf(stderr, "  bare CAF: stop %.1f ms\n", bare.stop_ms.front());
      if (i == 0)
        r.bare = std::move(bare);
      else
        r.bare.stop_ms.push_back(bare.stop_ms.front());
    }
    r.commit_ms = durable_commit_ms(fs::path(tmp_root) / ("commit" + std::to_string(d)), 20);
    rows.push_back(std::move(r));
  }

  resume_result res;
  if (do_resume) {
    std::fprintf(stderr, "resume, %zu steps ...\n", resume_steps);
    res = run_resume(rt, resume_steps, timeout);
  }

  // -- report -------------------------------------------------------------------------
  if (!rows.empty()) {
    std::printf("### Stop: request to committed snapshot\n\n");
    std::printf("Median (min–max) of %d rounds each, canopy and bare CAF alternately; bare CAF "
                "trap-and-forward %s.\n\n",
                rounds, bare_warm ? "stopped at once once running" : "stopped after the same idle time");
    std::printf("| executions | canopy: stop → committed snapshot | bare CAF trap-and-forward | "
                "**ratio of the medians** | of which: cascade until the root builds its snapshot "
                "(ms res.) | of which: the snapshot's commit | stop → `stop.handled` event | one "
                "durable LMDB commit, idle (median of 20) | floor: (bare + one commit) / bare | "
                "ratio without the snapshot's commit | targets |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto& r : rows) {
      std::vector<double> committed, cascade, handled, snapshot_commit, without_commit;
      for (auto& c : r.canopy) {
        committed.push_back(c.committed_ms);
        snapshot_commit.push_back(c.snapshot_commit_ms);
        without_commit.push_back(c.committed_ms - c.snapshot_commit_ms);
        cascade.push_back(c.cascade_ms);
        handled.push_back(c.handled_event_ms);
      }
      auto bare = median(r.bare.stop_ms);
      auto ratio = median(committed) / bare;
      auto n = r.canopy.front().executions;
      // The targets: the stop ≤ 1.5× the bare tree, its cascade ≤ 1.3×.
      auto cascade_ratio = median(cascade) / bare;
      std::string target = ratio <= 1.5 ? "≤ 1.5×: met" : "≤ 1.5×: **missed**";
      char buf[96];
      std::snprintf(buf, sizeof(buf), "; cascade %.1f× (≤ 1.3×: %s)", cascade_ratio,
                    cascade_ratio <= 1.3 ? "met" : "**missed**");
      target += buf;
      // A durable snapshot is committed after the cascade: no stop can beat
      // the bare tree plus one commit. The snapshot's own commit is timed in
      // the stop (by the store): the stop without it shows what the
      // execution core costs beyond the disk.
      std::printf("| %s | %s | %s | **%.2f×** | %s | %s | %s | %.1f ms | %.1f× | %.1f× | %s |\n",
                  group(static_cast<double>(n)).c_str(), spread(committed, 1).c_str(),
                  spread(r.bare.stop_ms, 1).c_str(), ratio, spread(cascade, 0).c_str(),
                  spread(snapshot_commit, 2).c_str(), spread(handled, 1).c_str(), r.commit_ms,
                  (bare + r.commit_ms) / bare, median(without_commit) / bare, target.c_str());
    }

    std::printf("\n### Memory: RSS per live execution (first round; delta from before start / executions)\n\n");
    std::printf("| executions | VmRSS before start | VmRSS, all leaves running | **per execution: "
                "VmRSS at once** (anon / file, of which the store's map) | VmRSS 2.5 s later | same, after releasing free heap | "
                "malloc in use: at once / 2.5 s later | peak during the start: VmRSS / malloc in use | "
                "parsed graph (malloc, before start) | bare CAF per actor: VmRSS / malloc | "
                "target ≤ 4 KiB |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto& r : rows) {
      auto& c = r.canopy.front();
      auto n = static_cast<double>(c.executions);
      auto kib = [&](long a, long b) { return static_cast<double>(a - b) / n; };
      auto per = kib(c.running.rss, c.before.rss);
      auto heap_per = (c.settled.heap - c.before.heap) / n / 1024;
      auto heap_at_once = (c.running.heap - c.before.heap) / n / 1024;
      auto graph_per = (c.before.heap - c.before_parse.heap) / n / 1024;
      auto peak_heap_per = (c.peak.heap - c.before.heap) / n / 1024;
      std::printf("| %s | %.1f MiB | %.1f MiB | **%.2f KiB** (%.2f / %.2f, %.2f) | %.2f KiB | %.2f KiB "
                  "| %.2f / %.2f KiB | %.2f / %.2f KiB | %.2f KiB | %.2f / %.2f KiB | %s |\n",
                  group(n).c_str(), c.before.rss / 1024.0, c.running.rss / 1024.0, per,
                  kib(c.running.anon, c.before.anon), kib(c.running.file, c.before.file),
                  kib(c.running.store_map, c.before.store_map), kib(c.settled.rss, c.before.rss),
                  kib(c.settled_trimmed.rss, c.before.rss), heap_at_once, heap_per,
                  kib(c.peak.rss, c.before.rss), peak_heap_per, graph_per,
                  r.bare.rss_per_actor_b / 1024, r.bare.heap_per_actor_b / 1024,
                  per <= 4 ? "met" : "**missed**");
    }

    std::printf("\n### Details\n\n| executions | graph parse | start → all leaves running | "
                "handle.stop() returned | stop → materialised (idle time) | kept once stopped "
                "and materialised: VmRSS (anon / file) / malloc in use (delta from before start) | snapshot "
                "check |\n|---|---|---|---|---|---|---|\n");
    for (auto& r : rows)
      for (auto& c : r.canopy)
        std::printf("| %s | %.0f ms | %.0f ms | %.1f ms | %.0f ms | %.1f (%.1f / %.1f) / %.1f MiB "
                    "| %s (%.0f ms) |\n",
                    group(static_cast<double>(c.executions)).c_str(), c.parse_ms,
                    c.start_to_leaves_ms, c.stop_request_ms, c.materialized_ms,
                    static_cast<double>(c.after.rss - c.before.rss) / 1024,
                    static_cast<double>(c.after.anon - c.before.anon) / 1024,
                    static_cast<double>(c.after.file - c.before.file) / 1024,
                    (c.after.heap - c.before.heap) / (1024 * 1024), c.verdict.c_str(),
                    c.verify_ms);
  }
  if (do_resume) {
    std::printf("\n### Resume of a stopped %s-step execution (half completed)\n\n",
                group(static_cast<double>(res.steps)).c_str());
    std::printf("| metric | value |\n|---|---|\n");
    std::printf("| graph build + parse | %.0f ms |\n", res.parse_ms);
    std::printf("| start → half completed and the sleep running | %.0f ms |\n", res.run_half_ms);
    std::printf("| stop → stopped | %.0f ms |\n", res.stop_ms);
    std::printf("| resume() call returned | %.0f ms |\n", res.resume_call_ms);
    std::printf("| **resume() → first pending step started** | **%.0f ms** (target < 200 ms: %s) |\n",
                res.first_started_ms, res.first_started_ms < 200 ? "met" : "**missed**");
    std::printf("| steps | %s |\n", res.verdict.c_str());
  }
  std::printf("\nPeak RSS of the process (VmHWM): %.0f MiB\n", status_kib("VmHWM") / 1024.0);
  std::fflush(stdout);

  opened->reset();
  if (!keep_tmp) {
    std::error_code ec;
    fs::remove_all(tmp_root, ec);
  }
  return 0;
}
