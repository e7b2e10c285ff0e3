// Consumer of the installed canopy: one `fn` step, run to completion.
// Usage: consumer HOME
#include <cstdio>

#include "persistence/error.hpp"
#include "runtime/runtime.hpp"

using canopy::json;

int main(int argc, char** argv) {
  if (argc < 2)
    return 2;
  canopy::runtime_options opts;
  opts.home = argv[1];
  auto rt = canopy::runtime::open(opts);
  if (!rt) {
    std::fprintf(stderr, "open: %s\n", canopy::message_of(rt.error()).c_str());
    return 1;
  }
  (*rt)->register_fn("twice", [](canopy::fn_context& ctx) -> caf::expected<json> {
    return json{{"n", 2 * ctx.with().value("n", 0)}};
  });
  auto g = canopy::parse_graph(json::parse(R"({"name": "one", "inputs": ["n"],
    "steps": {"double": {"fn": "twice", "with": {"n": "${inputs.n}"}}},
    "outputs": {"n": "${steps.double.n}"}})"), ".", (*rt)->graph_options());
  if (!g) {
    std::fprintf(stderr, "invalid graph: %s\n", canopy::to_string(g.errors[0]).c_str());
    return 1;
  }
  auto h = (*rt)->start(g.value, {{"n", 21}});
  if (!h)
    return 1;
  auto rec = h->wait();
  if (!rec || rec->status != canopy::execution_status::completed || rec->outputs.value("n", 0) != 42) {
    std::fprintf(stderr, "unexpected result: %s\n", rec ? rec->outputs.dump().c_str() : "no record");
    return 1;
  }
  std::printf("completed: %s\n", rec->outputs.dump().c_str());
  return 0;
}
