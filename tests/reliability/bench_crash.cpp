// bench_crash: the crash loop on demand.
//
//   bench_crash [--trials N] [--seed S] [--mode run|serve|both] [--max-kills K] [--verbose]
//
// Runs N trials (both modes alternate by default), each SIGKILLing real
// `canopy run`/`resume` or `canopy serve` processes at random moments and
// resuming until the execution completes (see crash_trial.hpp for what is
// checked), then prints one row per mode. The seed is fixed by default and
// printed first; a run is repeated exactly (up to process timing) with
// --seed. Exit code 0 when no trial found a violation, 1 otherwise, 2 for a
// usage error.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <random>
#include <string>

#include "tests/reliability/crash_trial.hpp"

using namespace canopy::core::test;

namespace {

/// Sums of one mode's trials.
struct totals {
  size_t trials = 0, kills = 0, completed = 0, pending = 0, reruns = 0, order = 0,
         orphans = 0, store = 0, incomplete = 0, log = 0, failed_trials = 0;
  long ms = 0;
  void add(const trial_result& r) {
    ++trials;
    kills += r.kills;
    completed += r.completed_at_kill;
    pending += r.pending_at_kill;
    reruns += r.verdict.reruns;
    order += r.verdict.order_violations;
    orphans += r.orphans;
    store += r.store_failures;
    incomplete += r.verdict.incomplete;
    log += r.verdict.log_violations;
    failed_trials += r.ok() ? 0 : 1;
    ms += r.elapsed_ms;
  }
};

int usage() {
  std::fprintf(stderr, "usage: bench_crash [--trials N] [--seed S] [--mode run|serve|both] "
                       "[--max-kills K] [--verbose]\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  size_t trials = 20;
  uint64_t seed = 20261123;
  std::string mode = "both";
  int max_kills = 3;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--verbose") {
      verbose = true;
    } else if (a == "--trials" && (v = value())) {
      trials = std::strtoull(v, nullptr, 10);
    } else if (a == "--seed" && (v = value())) {
      seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--mode" && (v = value()) && (!std::strcmp(v, "run") || !std::strcmp(v, "serve")
                                                  || !std::strcmp(v, "both"))) {
      mode = v;
    } else if (a == "--max-kills" && (v = value()) && std::atoi(v) > 0) {
      max_kills = std::atoi(v);
    } else {
      return usage();
    }
  }
  std::printf("seed %llu, %zu trials, mode %s, 1-%d kills per trial\n",
              static_cast<unsigned long long>(seed), trials, mode.c_str(), max_kills);
  std::fflush(stdout);
  std::map<std::string, totals> sums;
  try {
    std::mt19937_64 rng{seed};
    crash_workload w;
    std::printf("reference run %lld ms\n", static_cast<long long>(w.reference_duration().count()));
    for (size_t i = 0; i < trials; ++i) {
      trial_options opts;
      opts.mode = mode == "serve" || (mode == "both" && i % 2 == 1) ? crash_mode::serve
                                                                     : crash_mode::run;
      opts.max_kills = max_kills;
      opts.label = std::to_string(i);
      auto r = run_trial(w, opts, rng);
      sums[to_string(opts.mode)].add(r);
      if (!r.ok() || verbose) {
        std::printf("trial %zu (%s): %zu kills, %zu completed at kills, %zu orphans, %zu store "
                    "failures, %ld ms%s\n",
                    i, to_string(opts.mode), r.kills, r.completed_at_kill, r.orphans,
                    r.store_failures, r.elapsed_ms, r.ok() ? "" : " FAILED");
        for (auto& n : r.verdict.notes)
          std::printf("  %s\n", n.c_str());
      }
      if ((i + 1) % 10 == 0)
        std::fprintf(stderr, "%zu/%zu trials\n", i + 1, trials);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_crash: %s\n", e.what());
    return 1;
  }
  std::printf("\n| mode | trials | kills | completed at kills | pending at kills | re-run | "
              "order | orphans | store | incomplete | event log | failed trials | mean trial ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  size_t failed = 0;
  for (auto& [name, t] : sums) {
    std::printf("| %s | %zu | %zu | %zu | %zu | %zu | %zu | %zu | %zu | %zu | %zu | %zu | %ld |\n",
                name.c_str(), t.trials, t.kills, t.completed, t.pending, t.reruns, t.order,
                t.orphans, t.store, t.incomplete, t.log, t.failed_trials,
                t.trials ? t.ms / static_cast<long>(t.trials) : 0L);
    failed += t.failed_trials;
  }
  return failed == 0 ? 0 : 1;
}
