// The memory keeper's release of free heap (runtime/memory.hpp), with the
// allocator the test binary links (tcmalloc, unless a sanitizer build).

#include "runtime/memory.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

using namespace canopy;

TEST_CASE("a large free heap is handed back to the kernel, a small one is kept",
          "[runtime][memory]") {
  heap_figures before;
  if (!tcmalloc_figures(before)) {
    WARN("not linked with tcmalloc (a sanitizer build): nothing to release");
    CHECK(release_free_heap_if_large() == 0);
    return;
  }
  // Whatever earlier tests left free goes first.
  release_free_heap_if_large();
  {
    // 256 MiB in 64 KiB blocks, touched, then freed: free in the page heap.
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 4096; ++i) {
      blocks.emplace_back(new char[64 * 1024]);
      std::memset(blocks.back().get(), 1, 64 * 1024);
    }
  }
  heap_figures freed;
  REQUIRE(tcmalloc_figures(freed));
  REQUIRE(freed.free_bytes > (size_t{64} << 20));
  CHECK(release_free_heap_if_large() == freed.free_bytes);
  heap_figures after;
  REQUIRE(tcmalloc_figures(after));
  CHECK(after.free_bytes < (size_t{32} << 20));
  // Nothing large is free now: nothing is released.
  CHECK(release_free_heap_if_large() == 0);
}
