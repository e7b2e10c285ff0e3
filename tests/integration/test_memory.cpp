// The memory keeper's release of free heap (runtime/node/memory.hpp), with the
// allocator the test binary links (jemalloc, unless a sanitizer build).

#include "runtime/node/memory.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

using namespace canopy::core;

namespace {

/// 256 MiB in 64 KiB blocks, touched, then freed: free pages the allocator keeps.
void free_256_mib() {
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 4096; ++i) {
    blocks.emplace_back(new char[64 * 1024]);
    std::memset(blocks.back().get(), 1, 64 * 1024);
  }
}

} // namespace

TEST_CASE("a large free heap is handed back to the kernel once it stops growing, a small one "
          "is kept",
          "[runtime][memory]") {
  size_t last = 0;
  heap_figures before;
  if (!allocator_figures(before)) {
    WARN("not linked with jemalloc (a sanitizer build): nothing to release");
    CHECK(release_free_heap_if_settled(last) == 0);
    return;
  }
  // Whatever earlier tests left free goes first.
  last = SIZE_MAX;
  release_free_heap_if_settled(last);
  free_256_mib();
  heap_figures freed;
  REQUIRE(allocator_figures(freed));
  REQUIRE(freed.free_bytes > (size_t{64} << 20));
  // It grew since the last look (which found little free): kept for now.
  CHECK(release_free_heap_if_settled(last) == 0);
  CHECK(last > (size_t{64} << 20));
  // The next look finds it no larger: handed back.
  CHECK(release_free_heap_if_settled(last) > (size_t{64} << 20));
  heap_figures after;
  REQUIRE(allocator_figures(after));
  CHECK(after.free_bytes < (size_t{32} << 20));
  // Nothing large is free now: nothing is released.
  last = SIZE_MAX;
  CHECK(release_free_heap_if_settled(last) == 0);
}
