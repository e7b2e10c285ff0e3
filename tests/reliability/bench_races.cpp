// bench_races: the race harness on demand.
//
//   bench_races [--trials N] [--minutes M] [--seed S] [--verbose] [--keep]
//
// Runs race trials (race_trial.hpp): canopy `run`, `resume`, `serve`,
// stops, readers and signals racing for one tree, judged at the end of
// each trial. Trial i runs with seed S + i, so a failing trial, printed
// with its seed, replays with `--seed SEED --trials 1`. Stops after N
// trials or M minutes, whichever comes first (default: 20 trials), then
// prints a summary: trials, seeds, violations by kind, trials per minute,
// actions and fenced exits. Exit code 0 when no trial found a violation, 1
// otherwise, 2 for a usage error.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "tests/reliability/race_trial.hpp"

using namespace canopy::core::test;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: bench_races [--trials N] [--minutes M] [--seed S] [--verbose] [--keep]\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  long trials = -1;
  double minutes = -1;
  uint64_t seed = 20261127;
  bool verbose = false;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--verbose") {
      verbose = true;
    } else if (a == "--keep") {
      keep = true;
    } else if (a == "--trials" && (v = value()) && std::atol(v) > 0) {
      trials = std::atol(v);
    } else if (a == "--minutes" && (v = value()) && std::atof(v) > 0) {
      minutes = std::atof(v);
    } else if (a == "--seed" && (v = value())) {
      seed = std::strtoull(v, nullptr, 10);
    } else {
      return usage();
    }
  }
  if (trials < 0 && minutes < 0)
    trials = 20;
  std::printf("seed %llu, %s%s%s\n", static_cast<unsigned long long>(seed),
              trials > 0 ? (std::to_string(trials) + " trials").c_str() : "",
              trials > 0 && minutes > 0 ? " or " : "",
              minutes > 0 ? (std::to_string(minutes) + " minutes").c_str() : "");
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed_min = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 60.0;
  };
  long done = 0, failed = 0;
  size_t fenced = 0;
  std::map<std::string, size_t> by_kind, actions, trials_by_kind;
  for (; (trials < 0 || done < trials) && (minutes < 0 || elapsed_min() < minutes); ++done) {
    race_options opts;
    opts.seed = seed + static_cast<uint64_t>(done);
    opts.keep = keep;
    auto r = run_race_trial(opts);
    fenced += r.fenced;
    for (auto& [k, n] : r.action_counts)
      actions[k] += n;
    std::map<std::string, size_t> kinds;
    for (auto& v : r.violations)
      ++kinds[v.kind];
    for (auto& [k, n] : kinds) {
      by_kind[k] += n;
      ++trials_by_kind[k];
    }
    if (!r.ok())
      ++failed;
    if (!r.ok() || verbose) {
      std::printf("%s\n", r.report().c_str());
      std::fflush(stdout);
    }
    std::fprintf(stderr, "trial %ld (seed %llu): %s, %ld ms\n", done,
                 static_cast<unsigned long long>(opts.seed),
                 r.ok() ? "ok" : (std::to_string(r.violations.size()) + " violations").c_str(),
                 r.elapsed_ms);
  }
  auto mins = elapsed_min();
  std::printf("\n| trials | seeds | failed trials | violations | trials per minute "
              "| fenced exits |\n"
              "|---|---|---|---|---|---|\n");
  size_t total = 0;
  for (auto& [k, n] : by_kind)
    total += n;
  std::printf("| %ld | %llu..%llu | %ld | %zu | %.1f | %zu |\n", done,
              static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed + (done > 0 ? done - 1 : 0)), failed, total,
              mins > 0 ? static_cast<double>(done) / mins : 0.0, fenced);
  std::printf("\n| violation | count | trials |\n|---|---|---|\n");
  for (auto& k : race_violation_kinds())
    std::printf("| %s | %zu | %zu |\n", k.c_str(), by_kind[k], trials_by_kind[k]);
  std::printf("\n| action | count |\n|---|---|\n");
  for (auto& [k, n] : actions)
    std::printf("| %s | %zu |\n", k.c_str(), n);
  return failed == 0 ? 0 : 1;
}
