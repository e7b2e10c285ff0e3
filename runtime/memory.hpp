#pragma once

// Process-wide memory settings the runtime applies once, when it opens.

namespace canopy {

/// Fixes glibc's mmap threshold at its default (128 KiB), which turns off its
/// dynamic adjustment. Left dynamic, the threshold rises to the size of the
/// largest block freed so far (up to 32 MiB): after the first large commit,
/// the store writer's large transient buffers (a commit's batch vectors, the
/// event list handed to subscribers) come from the heap instead of their own
/// mappings, and the pages they leave behind stay resident, spread between
/// the executions' long-lived state. Fixed, every block above 128 KiB is
/// mapped on its own and returned to the kernel when freed (bench_stop,
/// 11,111 live executions, 6 paired runs: 0.7 KiB less VmRSS per execution
/// on average, from 11.9 KiB; the run-to-run spread is larger).
/// Does nothing when the process set the threshold itself
/// (`MALLOC_MMAP_THRESHOLD_`, or `mmap_threshold` in `GLIBC_TUNABLES`).
/// Threading: any thread; the first call decides, later calls do nothing.
void fix_malloc_thresholds();

} // namespace canopy
