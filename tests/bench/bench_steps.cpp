// bench_steps: durable step throughput.
//
// A layered DAG of `fn: noop` steps, WIDTH wide and LAYERS deep; step (k, i)
// needs (k-1, i) and (k-1, (i+1) % WIDTH). Every step is recorded durably
// (step record + started/completed events, group-committed). In the same run a
// raw LMDB writer commits the same number of records in batches of WIDTH, as
// the ceiling. Prints a Markdown table row set.
//
//   usage: bench_steps [STEPS=100000] [WIDTH=1000] [DIR=/tmp/canopy-bench] [--rounds=5]

#include <lmdb.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>
#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/node/runtime.hpp"

using namespace canopy::core;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

std::string step_name(size_t layer, size_t i) {
  return "s" + std::to_string(layer) + "_" + std::to_string(i);
}

/// Commits `n` records of about `value_size` bytes, `batch` per durable txn.
double raw_lmdb_rate(const std::string& dir, size_t n, size_t batch, size_t value_size) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  MDB_env* env;
  mdb_env_create(&env);
  mdb_env_set_mapsize(env, size_t{1} << 30);
  mdb_env_open(env, dir.c_str(), MDB_NOTLS, 0644);
  MDB_dbi dbi;
  MDB_txn* txn;
  mdb_txn_begin(env, nullptr, 0, &txn);
  mdb_dbi_open(txn, nullptr, 0, &dbi);
  mdb_txn_commit(txn);
  std::string value(value_size, 'v');
  auto t0 = clock_type::now();
  for (size_t done = 0; done < n;) {
    mdb_txn_begin(env, nullptr, 0, &txn);
    for (size_t j = 0; j < batch && done < n; ++j, ++done) {
      auto key = "01m819q9wr70p7042zn6heejgn" + std::string(1, '\0') + std::to_string(done);
      MDB_val k{key.size(), key.data()}, v{value.size(), value.data()};
      mdb_put(txn, dbi, &k, &v, 0);
    }
    mdb_txn_commit(txn);
  }
  auto secs = seconds_since(t0);
  mdb_env_close(env);
  return static_cast<double>(n) / secs;
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

/// One durable run of `g` in a fresh home under `dir`. @returns steps/s, or
/// a negative value when it did not complete.
struct run_result {
  double start_secs = 0;
  double run_secs = 0;
  double map_mib = 0;
};

std::optional<run_result> run_once(const std::shared_ptr<const graph>& g, const std::string& home) {
  std::filesystem::remove_all(home);
  auto rt = runtime::open([&] { runtime_options o; o.home = home; return o; }());
  if (!rt) {
    std::fprintf(stderr, "cannot open runtime\n");
    return std::nullopt;
  }
  run_result out;
  auto t0 = clock_type::now();
  auto h = (*rt)->start(g, json::object());
  if (!h)
    return std::nullopt;
  out.start_secs = seconds_since(t0);
  auto rec = h->wait();
  out.run_secs = seconds_since(t0);
  if (!rec || rec->status != execution_status::completed) {
    std::fprintf(stderr, "execution did not complete\n");
    return std::nullopt;
  }
  out.map_mib = static_cast<double>((*rt)->db()->map_size()) / (1 << 20);
  rt->reset();
  std::filesystem::remove_all(home);
  return out;
}

} // namespace

int main(int argc, char** argv) {
  // Positional STEPS WIDTH DIR, and --rounds=N anywhere.
  std::vector<std::string> pos;
  size_t rounds = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--rounds=", 0) == 0) {
      auto v = a.substr(9);
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || std::stoul(v) == 0) {
        std::fprintf(stderr, "bench_steps: --rounds wants a whole number of at least 1, not '%s'\n",
                     v.c_str());
        return 2;
      }
      rounds = std::stoul(v);
    } else
      pos.push_back(a);
  }
  size_t steps = pos.size() > 0 ? std::stoul(pos[0]) : 100000;
  size_t width = pos.size() > 1 ? std::stoul(pos[1]) : 1000;
  std::string dir = pos.size() > 2 ? pos[2] : "/tmp/canopy-bench";
  size_t layers = steps / width;
  std::filesystem::remove_all(dir);

  // -- build and validate the graph ---------------------------------------
  auto t0 = clock_type::now();
  json doc = {{"name", "bench"}, {"steps", json::object()}};
  auto& js = doc["steps"];
  for (size_t k = 0; k < layers; ++k)
    for (size_t i = 0; i < width; ++i) {
      json s = {{"fn", "noop"}};
      if (k > 0)
        s["needs"] = {step_name(k - 1, i), step_name(k - 1, (i + 1) % width)};
      js[step_name(k, i)] = std::move(s);
    }
  auto parsed = parse_graph(doc, dir);
  if (!parsed) {
    std::fprintf(stderr, "graph invalid: %s\n", to_string(parsed.errors.front()).c_str());
    return 1;
  }
  auto parse_secs = seconds_since(t0);

  // -- rounds: canopy, then the ceiling (raw batched LMDB), alternately -----
  // Both vary from run to run with the disk's fsync time: the ratio is of
  // the medians of the same rounds.
  std::vector<double> rates, raws, starts;
  double map_mib = 0;
  for (size_t r = 0; r < rounds; ++r) {
    auto res = run_once(parsed.value, dir + "/home");
    if (!res)
      return 1;
    rates.push_back(static_cast<double>(steps) / res->run_secs);
    starts.push_back(res->start_secs);
    map_mib = res->map_mib;
    raws.push_back(raw_lmdb_rate(dir + "/raw", steps, width, 160));
  }
  auto rss = peak_rss_kib();
  auto rate = median(rates), raw = median(raws);
  auto range = [](const std::vector<double>& xs) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.0f–%.0f", *std::min_element(xs.begin(), xs.end()),
                  *std::max_element(xs.begin(), xs.end()));
    return std::string{buf};
  };

  std::printf("| metric | value |\n|---|---|\n");
  std::printf("| steps (fn: noop, %zu wide x %zu layers) | %zu |\n", width, layers, steps);
  std::printf("| graph parse + validation | %.2f s |\n", parse_secs);
  std::printf("| start (graph and queued record stored), median | %.2f s |\n", median(starts));
  std::printf("| total, start() to completed (durable), median | %.2f s |\n",
              static_cast<double>(steps) / rate);
  std::printf("| **durable steps/s**, median of %zu (min–max) | **%.0f** (%s) |\n", rounds, rate,
              range(rates).c_str());
  std::printf("| raw LMDB, %zu records, %zu per txn (records/s), median of %zu (min–max) | %.0f "
              "(%s) |\n",
              steps, width, rounds, raw, range(raws).c_str());
  std::printf("| **ratio canopy / raw** (medians; target ≥ 25 %%: %s) | **%.1f %%** |\n",
              100.0 * rate / raw >= 25.0 ? "met" : "**missed**", 100.0 * rate / raw);
  std::printf("| peak RSS | %.0f MiB |\n", static_cast<double>(rss) / 1024);
  std::printf("| LMDB map size at the end | %.0f MiB |\n", map_mib);
  std::filesystem::remove_all(dir);
  return 0;
}
