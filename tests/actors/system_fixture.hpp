#pragma once

// An actor system for tests of single actors, with the console logger off.

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

namespace canopy::core::test {

/// An actor system with the console logger off.
struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

} // namespace canopy::core::test
