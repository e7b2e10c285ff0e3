// libFuzzer target: the graph parser and validator (runtime/docs/reference/graph-format.md) on arbitrary
// bytes, as `canopy validate`/`run` and `POST /v1/graphs` see them: text →
// parse_json_text → parse_graph (with and without inline commands), and for
// an accepted graph the resume path (encode the stored form, decode it,
// load_stored_graph), which must accept whatever parse_graph accepted.
//
// `graph` steps that name files read from a fixed in-memory table, never
// from the disk (a fuzzer must not open /dev/stdin or a FIFO).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "persistence/error.hpp"
#include "persistence/graph.hpp"
#include "persistence/records.hpp"

using canopy::core::json;

namespace {

/// The files a fuzzed graph may include: one valid child, one that
/// includes itself, one invalid.
caf::expected<json> load_file(const std::string& path) {
  static const std::map<std::string, json> files = {
    {"/fuzz/child.json",
     json::parse(R"({"inputs": ["x"], "steps": {"a": {"fn": "echo", "with": {"v": "${inputs.x}"}}},
                    "outputs": {"v": "${steps.a.v}"}})")},
    {"/fuzz/self.json", json::parse(R"({"steps": {"s": {"graph": "self.json"}}})")},
    {"/fuzz/bad.json", json::parse(R"({"steps": {"a": {}}})")}};
  auto i = files.find(path);
  if (i == files.end())
    return canopy::core::make_error(canopy::core::persistence_errc::io_error, "no such file: " + path);
  return i->second;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_graph: %s\n", what);
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = canopy::core::parse_json_text(std::string(reinterpret_cast<const char*>(data), size));
  if (!doc)
    return 0;
  canopy::core::parse_options opts;
  opts.tools = {"writer", "planner"};
  opts.load_file = load_file;
  auto local = canopy::core::parse_graph(*doc, "/fuzz", opts);
  for (auto& e : local.errors)
    check(!canopy::core::to_string(e).empty(), "an error renders as an empty string");
  opts.allow_inline = false; // a server's default
  auto served = canopy::core::parse_graph(*doc, "/fuzz", opts);
  check(!served || local, "a graph valid without inline commands is invalid with them");
  if (!local)
    return 0;
  check(local.errors.empty(), "an accepted graph comes with errors");
  // Resume: the stored form decodes and loads without validation.
  auto& g = *local.value;
  auto bytes = canopy::core::encode_graph(g.document, g.base_dir, g.files);
  auto stored = canopy::core::decode_graph(bytes);
  check(static_cast<bool>(stored), "the stored form of an accepted graph does not decode");
  opts.allow_inline = true;
  auto again = canopy::core::load_stored_graph(stored->document, stored->base_dir,
                                         stored->files, opts);
  check(static_cast<bool>(again), "load_stored_graph refuses a graph parse_graph accepted");
  check(again.value->steps.size() == g.steps.size(), "the stored graph lost steps");
  return 0;
}
