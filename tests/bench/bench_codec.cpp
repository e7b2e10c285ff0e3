// bench_codec: encode and decode speed and size of the hot stored records
// (step, event, execution), the schema-1 JSON text (`encode_json`, then
// json::parse + *_from_json, as the store read it) against the binary
// encoding (`encode`, `decode_*`). Prints a Markdown table.
//
// Usage: bench_codec [iterations per record and round, default 200000]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "persistence/duration.hpp"
#include "persistence/records.hpp"

using namespace canopy::core;

namespace {

step_record sample_step() {
  step_record x;
  x.execution_id = "01jf3k9q4z8m2r7t5v6w0x1y2a";
  x.step = "summarise";
  x.status = step_status::completed;
  x.attempt = 1;
  x.result = {{"stdout", "The quick brown fox jumps over the lazy dog. Résumé: 42 items.\n"},
              {"stderr", ""},
              {"exit_code", 0},
              {"json", {{"score", 0.87}, {"tags", {"a", "b", "c"}}}}};
  x.started_at = 1763900000123;
  x.ended_at = 1763900000456;
  return x;
}

event_record sample_event() {
  event_record x;
  x.seq = 123456;
  x.time = 1763900000456;
  x.type = event_type::step_completed;
  x.execution_id = "01jf3k9q4z8m2r7t5v6w0x1y2a";
  x.root_id = "01jf3k9q4z8m2r7t5v6w0x1y2b";
  x.parent_id = "01jf3k9q4z8m2r7t5v6w0x1y2b";
  x.step = "summarise";
  x.status = step_status::completed;
  x.data = {{"attempt", 1}, {"duration_ms", 333}};
  return x;
}

execution_record sample_execution() {
  execution_record x;
  x.id = "01jf3k9q4z8m2r7t5v6w0x1y2a";
  x.graph = "research";
  x.status = execution_status::completed;
  x.root_id = "01jf3k9q4z8m2r7t5v6w0x1y2b";
  x.parent_id = x.root_id;
  x.depth = 1;
  x.parent_step = "review";
  x.inputs = {{"topic", "actor supervision"}, {"limit", 10}, {"deep", true}};
  x.outputs = {{"verdict", {{"ok", true}, {"notes", "fine"}}}};
  x.created_at = 1763900000000;
  x.started_at = 1763900000001;
  x.ended_at = 1763900000999;
  x.owner_pid = 4242;
  x.owner_start = 987654321;
  return x;
}

struct timing {
  double encode_ns = 0;
  double decode_ns = 0;
  size_t bytes = 0;
};

/// Times `n` encodes, then `n` decodes of the last encoding.
template <class Enc, class Dec>
timing measure(int n, Enc enc, Dec dec) {
  using clock = std::chrono::steady_clock;
  timing t;
  std::string bytes;
  size_t sink = 0;
  auto a = clock::now();
  for (int i = 0; i < n; ++i) {
    bytes = enc();
    sink += bytes.size();
  }
  auto b = clock::now();
  for (int i = 0; i < n; ++i)
    sink += dec(bytes) ? 1 : 0;
  auto c = clock::now();
  if (sink == 0)
    std::abort(); // keeps the loops from being optimised away
  t.encode_ns = std::chrono::duration<double, std::nano>(b - a).count() / n;
  t.decode_ns = std::chrono::duration<double, std::nano>(c - b).count() / n;
  t.bytes = bytes.size();
  return t;
}

/// The best of `rounds` measurements (the machine is shared: the minimum is
/// the least disturbed).
template <class Enc, class Dec>
timing best(int rounds, int n, Enc enc, Dec dec) {
  timing out = measure(n, enc, dec);
  for (int i = 1; i < rounds; ++i) {
    auto t = measure(n, enc, dec);
    out.encode_ns = std::min(out.encode_ns, t.encode_ns);
    out.decode_ns = std::min(out.decode_ns, t.decode_ns);
  }
  return out;
}

constexpr int rounds = 5;

template <class T, class FromJson, class Decode>
void row(const char* name, int n, const T& x, FromJson from_json, Decode decode) {
  auto old = best(rounds, n, [&] { return encode_json(x); },
                     [&](const std::string& s) { return from_json(json::parse(s, nullptr, false)); });
  auto neu = best(rounds, n, [&] { return encode(x); },
                     [&](const std::string& s) { return decode(s); });
  // The decoders must agree, or the comparison means nothing.
  auto a = from_json(json::parse(encode_json(x)));
  auto b = decode(encode(x));
  if (!a || !b || to_json(*a) != to_json(*b)) {
    std::fprintf(stderr, "%s: the codecs disagree\n", name);
    std::exit(1);
  }
  std::printf("| %s | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.1f× | %zu / %zu |\n", name,
              old.encode_ns, neu.encode_ns, old.decode_ns, neu.decode_ns,
              old.encode_ns + old.decode_ns, neu.encode_ns + neu.decode_ns,
              (old.encode_ns + old.decode_ns) / (neu.encode_ns + neu.decode_ns), old.bytes,
              neu.bytes);
}

} // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  if (n <= 0)
    n = 200000;
  std::printf("bench_codec: %d encodes and %d decodes per record, best of %d rounds, ns per "
              "operation (JSON text / binary)\n\n",
              n, n, rounds);
  std::printf("| record | encode ns | decode ns | encode+decode ns | speed-up | bytes |\n");
  std::printf("|---|---|---|---|---|---|\n");
  row("step", n, sample_step(), step_from_json, decode_step);
  row("event", n, sample_event(), event_from_json, decode_event);
  row("execution", n, sample_execution(), execution_from_json, decode_execution);
  return 0;
}
