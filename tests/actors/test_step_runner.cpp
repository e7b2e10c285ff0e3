// Tests of the step runner (actors/step_runner.hpp) with a real actor system
// and a real subprocess.

#include "actors/step_runner.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <future>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "tests/actors/system_fixture.hpp"

using namespace canopy::core;
using canopy::core::test::system_fixture;
using namespace std::chrono_literals;

namespace {

/// What the parent saw, in order.
struct seen {
  bool result = false;
  bool down_before_ack = false; ///< the runner went down while its result waited
  bool down_after_ack = false;
};

} // namespace

TEST_CASE("a step runner quits only once its parent has taken its result", "[actors][runner]") {
  system_fixture f;
  auto out = std::make_shared<std::promise<seen>>();
  auto got = out->get_future();
  // The parent holds the result's acknowledgement back for 300 ms and
  // watches for the runner's down meanwhile: a runner that quit right after
  // sending its result would be down by then (its down could overtake the
  // result on a remote parent; the step ran twice).
  f.sys->spawn([out](caf::event_based_actor* self) -> caf::behavior {
    auto s = std::make_shared<seen>();
    auto acked = std::make_shared<bool>(false);
    auto pending = std::make_shared<caf::response_promise>();
    runner_spec spec;
    spec.process.argv = {"sh", "-c", "echo hi"};
    auto runner = spawn_step_runner(self, spec);
    self->set_down_handler([=](caf::down_msg& msg) {
      if (msg.source != runner.address())
        return;
      (*acked ? s->down_after_ack : s->down_before_ack) = true;
      out->set_value(*s);
      self->quit();
    });
    self->set_exit_handler([](caf::exit_msg&) {}); // the linked runner's normal exit
    return {
      [](started_atom, uint64_t, int, int64_t, uint64_t) {},
      [](output_atom, uint64_t, int, json&) {},
      [=](done_atom, uint64_t, int, step_outcome& o) {
        s->result = o.error.empty() && o.result.value("stdout", "") == "hi\n";
        *pending = self->make_response_promise();
        self->delayed_send(self, 300ms, tick_atom::value);
        return caf::delegated<void>{};
      },
      [=](tick_atom) {
        if (s->down_before_ack)
          return;
        *acked = true;
        pending->deliver(caf::unit);
      },
    };
  });
  REQUIRE(got.wait_for(10s) == std::future_status::ready);
  auto s = got.get();
  CHECK(s.result);
  CHECK_FALSE(s.down_before_ack);
  CHECK(s.down_after_ack);
}
