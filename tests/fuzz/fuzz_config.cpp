// libFuzzer target: the node configuration parser (runtime/docs/reference/config.md#node-config) on arbitrary
// bytes, as `canopy serve --config FILE` reads them: text → parse_json_text
// → parse_node_config. An accepted config must have the shape the server
// relies on (a HOST:PORT listen address, sane limits); a refused one must
// say why with a path.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "persistence/graph.hpp"
#include "runtime/node/config.hpp"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_config: %s\n", what);
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = canopy::core::parse_json_text(std::string(reinterpret_cast<const char*>(data), size));
  if (!doc)
    return 0;
  auto cfg = canopy::core::parse_node_config(*doc);
  if (!cfg) {
    check(!cfg.errors.empty(), "a refused config names no error");
    for (auto& e : cfg.errors)
      check(!canopy::core::to_string(e).empty(), "an error renders as an empty string");
    return 0;
  }
  std::string host;
  int port = -1;
  check(canopy::core::split_host_port(cfg.value->listen, host, port),
        "an accepted config has a listen address that is not HOST:PORT");
  check(cfg.value->max_parallel > 0, "an accepted config allows no step to run");
  return 0;
}
