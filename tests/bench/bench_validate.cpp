// bench_validate: time and peak memory of validating large graph documents
// from their text (parse_json_text + parse_graph, as `validate` and the HTTP
// API do), one forked process per case so that each peak RSS is its own.
//   chain:  N steps, each needing and referencing the previous one;
//   layers: N steps in layers of 100, each needing two steps of the layer
//           before and referencing a step two layers back (upstream through
//           one of them: the check that needs more than the direct needs);
//   cycle:  N steps, each needing the next, the last needing the first
//           (rejected with the cycle spelled out).
// Prints a Markdown table; exits 1 when a valid case does not validate, the
// cycle is not reported, or a case takes >= 1 s of CPU or >= 200 MiB.
//
// Usage: bench_validate [steps, default 100000]

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "persistence/graph.hpp"

using namespace canopy::core;

namespace {

std::string id(size_t i) {
  return "s" + std::to_string(i);
}

std::string ref(size_t i) {
  return "${steps." + id(i) + "}";
}

std::string chain(size_t n) {
  std::string text = R"({"name": "chain", "steps": {)";
  text.reserve(n * 96); // as read from a file: no regrowth
  for (size_t i = 0; i < n; ++i) {
    text += (i > 0 ? ",\"" : "\"") + id(i) + R"(":{"fn":"echo")";
    if (i > 0) {
      text += R"(,"needs":[")" + id(i - 1) + R"("],"with":{"a":")" + ref(i - 1) + "\"}";
    }
    text += "}";
  }
  return text + "}}";
}

std::string layers(size_t n) {
  const size_t width = 100;
  std::string text = R"({"name": "layers", "steps": {)";
  text.reserve(n * 96); // as read from a file: no regrowth
  for (size_t i = 0; i < n; ++i) {
    text += (i > 0 ? ",\"" : "\"") + id(i) + R"(":{"fn":"echo")";
    if (i >= width) {
      auto layer = i / width;
      auto k = i % width;
      auto a = (layer - 1) * width + k;
      auto b = (layer - 1) * width + (k + 1) % width;
      text += R"(,"needs":[")" + id(a) + R"(",")" + id(b) + R"("],"with":{"a":")"
              + ref(layer >= 2 ? (layer - 2) * width + (k + 2) % width : a) + "\"}";
    }
    text += "}";
  }
  return text + "}}";
}

std::string cycle(size_t n) {
  std::string text = R"({"name": "cycle", "steps": {)";
  text.reserve(n * 96); // as read from a file: no regrowth
  for (size_t i = 0; i < n; ++i)
    text += (i > 0 ? ",\"" : "\"") + id(i) + R"(":{"fn":"echo","needs":[")"
            + id((i + 1) % n) + R"("],"with":{"a":")" + ref((i + 1) % n) + "\"}}";
  return text + "}}";
}

/// CPU seconds (user + system) this process used so far.
double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
         + static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// Peak resident set of this process in KiB (VmHWM).
long peak_rss_kib() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

/// In a child: builds the text, validates it, prints one table row.
/// @returns the child's exit code: 0 when the outcome and limits hold.
int measure(const char* name, std::string (*make)(size_t), size_t n, bool expect_valid) {
  auto text = make(n);
  auto size = text.size();
  auto t0 = std::chrono::steady_clock::now();
  auto c0 = cpu_seconds();
  auto doc = parse_json_text(text);
  std::string{}.swap(text); // as `validate`: the text is freed once parsed
  if (!doc) {
    std::printf("| %s | %zu | malformed JSON | | |\n", name, n);
    return 1;
  }
  auto t1 = std::chrono::steady_clock::now();
  if (std::getenv("BENCH_VALIDATE_STAGES"))
    std::fprintf(stderr, "%s: text %.1f MiB, after JSON: peak %.1f MiB\n", name,
                 static_cast<double>(size) / 1048576.0,
                 static_cast<double>(peak_rss_kib()) / 1024.0);
  auto result = parse_graph(std::move(*doc), "/tmp");
  auto t2 = std::chrono::steady_clock::now();
  auto cpu = cpu_seconds() - c0;
  auto seconds = std::chrono::duration<double>(t2 - t0).count();
  auto parse_s = std::chrono::duration<double>(t1 - t0).count();
  auto mib = static_cast<double>(peak_rss_kib()) / 1024.0;
  std::string outcome;
  bool ok;
  if (expect_valid) {
    ok = static_cast<bool>(result);
    outcome = ok ? "valid" : "REJECTED: " + to_string(result.errors.front());
  } else {
    ok = !result && result.errors.size() == 1
         && result.errors.front().message.rfind("dependency cycle: ", 0) == 0;
    outcome = ok ? "cycle reported"
                 : "cycle NOT reported: " + std::to_string(result.errors.size()) + " errors, "
                     + (result.errors.empty() ? std::string{} : to_string(result.errors[0]));
  }
  std::printf("| %s | %zu | %.1f KiB | %.3f | %.3f | %.3f | %.1f | %s |\n", name, n,
              static_cast<double>(size) / 1024.0, cpu, seconds, parse_s, mib, outcome.c_str());
  std::fflush(stdout);
  // CPU time, not wall time, is held to 1 s: on a shared machine the wall
  // clock counts the other processes too.
  return ok && cpu < 1.0 && mib < 200.0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 100000;
  std::printf("| case | steps | text | CPU s | wall s | of which JSON text | peak RSS MiB | "
              "outcome |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
  std::fflush(stdout);
  struct bench_case {
    const char* name;
    std::string (*make)(size_t);
    bool valid;
  };
  const bench_case cases[] = {{"chain", chain, true}, {"layers", layers, true},
                              {"cycle", cycle, false}};
  int failures = 0;
  for (auto& c : cases) {
    auto pid = ::fork();
    if (pid == 0)
      std::_Exit(measure(c.name, c.make, n, c.valid));
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ++failures;
  }
  if (failures > 0)
    std::printf("\n%d case(s) over 1 s or 200 MiB, or with the wrong outcome\n", failures);
  return failures > 0 ? 1 : 0;
}
