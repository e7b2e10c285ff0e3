// The graveyard (actors/graveyard.hpp): deferred destruction, plain C++.

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "actors/graveyard.hpp"

using namespace canopy::core;

namespace {

/// Counts its destructions, and the thread each ran in.
struct tracked {
  explicit tracked(std::atomic<int>& dead) : dead_(dead) {
  }
  ~tracked() {
    ++dead_;
    last_thread = std::this_thread::get_id();
  }
  std::atomic<int>& dead_;
  static inline std::thread::id last_thread;
};

} // namespace

TEST_CASE("a buried object lives until the graveyard is reaped", "[actors][graveyard]") {
  std::atomic<int> dead{0};
  graveyard<tracked> g;
  g.bury(std::make_unique<tracked>(dead));
  g.bury(std::make_unique<tracked>(dead));
  g.bury(nullptr); // nothing
  CHECK(dead == 0);
  CHECK(g.held() == 2);
  CHECK(g.reap() == 2);
  CHECK(dead == 2);
  CHECK(g.held() == 0);
  CHECK(g.reap() == 0);
}

TEST_CASE("reaping waits until a look finds no burial since the previous one",
          "[actors][graveyard]") {
  std::atomic<int> dead{0};
  graveyard<tracked> g;
  g.bury(std::make_unique<tracked>(dead));
  // The first look sees a burial it had not seen: a burst may go on.
  CHECK(g.reap_if_settled() == 0);
  CHECK(dead == 0);
  // Nothing since: settled.
  CHECK(g.reap_if_settled() == 1);
  CHECK(dead == 1);
  // Nothing held: nothing to do, however often it looks.
  CHECK(g.reap_if_settled() == 0);
}

TEST_CASE("burials going on through two looks in a row are reaped all the same",
          "[actors][graveyard]") {
  std::atomic<int> dead{0};
  graveyard<tracked> g;
  g.bury(std::make_unique<tracked>(dead));
  CHECK(g.reap_if_settled() == 0); // busy
  g.bury(std::make_unique<tracked>(dead));
  CHECK(g.reap_if_settled() == 2); // busy again: a steady churn, not one burst
  CHECK(dead == 2);
  g.bury(std::make_unique<tracked>(dead));
  CHECK(g.reap_if_settled() == 0); // a new burst after a reap waits again
  CHECK(g.reap_if_settled() == 1);
}

TEST_CASE("a full shard destroys what is buried at once", "[actors][graveyard]") {
  std::atomic<int> dead{0};
  graveyard<tracked> g{2};
  for (int i = 0; i < 5; ++i)
    g.bury(std::make_unique<tracked>(dead));
  CHECK(g.held() == 2);
  CHECK(dead == 3);
}

TEST_CASE("objects are destroyed in the thread that reaps, and with the graveyard",
          "[actors][graveyard]") {
  std::atomic<int> dead{0};
  {
    graveyard<tracked> g;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 1000; ++i)
          g.bury(std::make_unique<tracked>(dead));
      });
    for (auto& t : threads)
      t.join();
    CHECK(dead == 0);
    CHECK(g.held() == 4000);
    std::thread reaper{[&] { CHECK(g.reap() == 4000); }};
    auto reaper_id = reaper.get_id();
    reaper.join();
    CHECK(tracked::last_thread == reaper_id);
    CHECK(dead == 4000);
    g.bury(std::make_unique<tracked>(dead));
  }
  CHECK(dead == 4001); // the graveyard's own end reaps
}
