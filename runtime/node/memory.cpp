#include "runtime/node/memory.hpp"

#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <caf/all.hpp>

#include "actors/messages.hpp"

// jemalloc's control interface, resolved at run time: null unless the
// process links jemalloc, so the libraries need not.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
  __attribute__((weak));

namespace canopy::core {

void fix_malloc_thresholds() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr)
      return;
    if (auto t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "mmap_threshold"))
      return;
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  });
}

namespace {

/// Reads the `size_t` statistic `name`. @returns false when it cannot.
bool read_stat(const char* name, size_t& out) {
  size_t len = sizeof(out);
  return mallctl(name, &out, &len, nullptr, 0) == 0 && len == sizeof(out);
}

} // namespace

bool allocator_figures(heap_figures& out) {
  if (mallctl == nullptr)
    return false;
  // The statistics are a snapshot taken when the epoch advances.
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (mallctl("epoch", &epoch, &len, &epoch, len) != 0)
    return false;
  // Arena 4096 is jemalloc's `MALLCTL_ARENAS_ALL`: every arena at once.
  size_t used = 0, dirty = 0, muzzy = 0, page = 0;
  if (!read_stat("stats.allocated", used) || !read_stat("stats.arenas.4096.pdirty", dirty)
      || !read_stat("stats.arenas.4096.pmuzzy", muzzy)
      || !read_stat("arenas.page", page))
    return false;
  // Free pages not yet handed back: dirty ones, and muzzy ones (advised
  // lazily: resident until the kernel wants them).
  out.free_bytes = (dirty + muzzy) * page;
  out.used_bytes = used;
  return true;
}

bool release_free_heap() {
  // Arena 4096: every arena (`MALLCTL_ARENAS_ALL`).
  return mallctl != nullptr && mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) == 0;
}

size_t release_free_heap_if_settled(size_t& last_free_bytes) {
  heap_figures h;
  if (!allocator_figures(h))
    return 0;
  auto last = last_free_bytes;
  last_free_bytes = h.free_bytes;
  constexpr size_t floor_bytes = size_t{32} << 20;
  constexpr size_t growth_bytes = size_t{4} << 20; // less is noise, not a burst
  if (h.free_bytes <= floor_bytes || h.free_bytes > last + growth_bytes)
    return 0;
  release_free_heap();
  last_free_bytes = 0;
  return h.free_bytes;
}

namespace {

struct keeper_state {
  size_t last_free_bytes = 0;
  static inline const char* name = "memory_keeper";
};

caf::behavior memory_keeper(caf::stateful_actor<keeper_state>* self, std::function<void()> sweep) {
  auto interval = std::chrono::milliseconds{memory_keeper_interval_ms};
  self->delayed_send(self, interval, tick_atom::value);
  return {
    [=](tick_atom) {
      if (sweep)
        sweep();
      release_free_heap_if_settled(self->state.last_free_bytes);
      self->delayed_send(self, interval, tick_atom::value);
    },
  };
}

} // namespace

caf::actor spawn_memory_keeper(caf::actor_system& sys, std::function<void()> sweep) {
  return sys.spawn(memory_keeper, std::move(sweep));
}

} // namespace canopy::core
