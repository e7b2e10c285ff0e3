#pragma once

// Process-wide memory settings the runtime applies once, when it opens, and
// the memory keeper that hands free heap back to the kernel while it runs.

#include <cstddef>
#include <functional>

#include <caf/fwd.hpp>

namespace canopy::core {

/// Fixes glibc's mmap threshold at its default (128 KiB), which turns off its
/// dynamic adjustment. Left dynamic, the threshold rises to the size of the
/// largest block freed so far (up to 32 MiB): after the first large commit,
/// the store writer's large transient buffers (a commit's batch vectors, the
/// event list handed to subscribers) come from the heap instead of their own
/// mappings, and the pages they leave behind stay resident, spread between
/// the executions' long-lived state. Fixed, every block above 128 KiB is
/// mapped on its own and returned to the kernel when freed
/// (measured: runtime/docs/benchmarks.md#design-measurements).
/// Does nothing when the process set the threshold itself
/// (`MALLOC_MMAP_THRESHOLD_`, or `mmap_threshold` in `GLIBC_TUNABLES`).
/// Threading: any thread; the first call decides, later calls do nothing.
void fix_malloc_thresholds();

/// Heap the allocator holds free and mapped, and heap in use, in bytes.
struct heap_figures {
  size_t free_bytes = 0;
  size_t used_bytes = 0;
};

/// @returns the allocator's figures when the process runs jemalloc (canopy's
/// programs link it; a program that embeds canopy may too), else nothing.
/// Threading: any thread.
bool allocator_figures(heap_figures& out);

/// Hands every free page the allocator keeps back to the kernel now.
/// @returns false when the process does not run jemalloc (nothing done).
/// Threading: any thread.
bool release_free_heap();

/// Hands the allocator's free heap back to the kernel when it is large
/// (more than 32 MiB) and settled: at most 4 MiB more than `last_free_bytes`,
/// what the previous look found. A burst (the start of a tree of 100,000 executions
/// queues its records for the store writer faster than it commits them; a
/// stopped tree frees its state) leaves most of its peak free but resident;
/// while it is still freeing, a release would only cost it the madvise calls
/// and the page faults of memory it takes again
/// (measured: runtime/docs/benchmarks.md#design-measurements).
/// jemalloc keeps what it releases as address space and maps it again on
/// demand. Only with jemalloc; glibc's `malloc_trim` walks every arena
/// under its lock, so it is left to the process.
/// @returns the bytes handed back (0: none); `last_free_bytes` becomes the
/// free heap found. Threading: any thread.
size_t release_free_heap_if_settled(size_t& last_free_bytes);

/// How often the memory keeper looks.
constexpr int memory_keeper_interval_ms = 1000;

/// Spawns the memory keeper: every `memory_keeper_interval_ms` it calls
/// `sweep` (what the process keeps of ended work: the runtime passes the
/// execution directory's `sweep_if_settled`), then `release_free_heap_if_settled`.
/// Stopped with an exit message.
caf::actor spawn_memory_keeper(caf::actor_system& sys, std::function<void()> sweep);

} // namespace canopy::core
