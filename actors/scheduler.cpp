#include "actors/scheduler.hpp"

#include <chrono>
#include <cstddef>

#include <caf/timestamp.hpp>

namespace canopy::core {

void configure_scheduler(caf::actor_system_config& cfg) {
  // CAF's work-stealing workers look for work in three phases: spinning
  // (aggressive), then polling every 50 µs (moderate, 500 attempts by
  // default: ~30 ms after every job), then sleeping on a condition variable
  // that an enqueue from outside the scheduler wakes at once, with a timeout
  // after which the worker tries to steal (relaxed). With CAF's defaults and
  // any periodic message (one a second is enough to restart the moderate
  // phase), an idle node wakes its workers thousands of times a second.
  // 20 moderate attempts (~1 ms) and a 50 ms relaxed timeout leave an idle
  // node at far fewer wake-ups. Under load the workers never reach the
  // relaxed phase, so hops between actors keep their latency
  // (measured: runtime/docs/benchmarks.md#design-measurements); the relaxed timeout only bounds
  // how soon an idle worker steals from one busy with a long handler.
  cfg.set("work-stealing.moderate-poll-attempts", size_t{20});
  cfg.set("work-stealing.relaxed-sleep-duration",
          caf::timespan{std::chrono::milliseconds{50}});
}

} // namespace canopy::core
