#include "runtime/node/memory.hpp"

#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <caf/all.hpp>

#include "actors/messages.hpp"

// tcmalloc's C interface (gperftools), resolved at run time: null unless the
// process links tcmalloc, so the libraries need not.
extern "C" {
int MallocExtension_GetNumericProperty(const char* property, size_t* value)
  __attribute__((weak));
void MallocExtension_ReleaseFreeMemory() __attribute__((weak));
}

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

bool tcmalloc_figures(heap_figures& out) {
  if (MallocExtension_GetNumericProperty == nullptr)
    return false;
  size_t free_bytes = 0, used = 0;
  if (!MallocExtension_GetNumericProperty("tcmalloc.pageheap_free_bytes", &free_bytes)
      || !MallocExtension_GetNumericProperty("generic.current_allocated_bytes", &used))
    return false;
  out.free_bytes = free_bytes;
  out.used_bytes = used;
  return true;
}

size_t release_free_heap_if_settled(size_t& last_free_bytes) {
  heap_figures h;
  if (!tcmalloc_figures(h) || MallocExtension_ReleaseFreeMemory == nullptr)
    return 0;
  auto last = last_free_bytes;
  last_free_bytes = h.free_bytes;
  constexpr size_t floor_bytes = size_t{32} << 20;
  constexpr size_t growth_bytes = size_t{4} << 20; // less is noise, not a burst
  if (h.free_bytes <= floor_bytes || h.free_bytes > last + growth_bytes)
    return 0;
  MallocExtension_ReleaseFreeMemory();
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
