// Tests of the waits of threads that are not actors (actors/blocking.hpp)
// that need no actor of their own: a write committed through the real store
// writer (its ticket), and the end of an actor (a signal attached to it).

#include "actors/blocking.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/store_writer.hpp"
#include "persistence/error.hpp"
#include "tests/actors/system_fixture.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace std::chrono_literals;
using canopy::core::store_test::make_exec;
using canopy::core::test::system_fixture;
using canopy::core::test::temp_dir;

namespace {

/// A store in a temp home and its real writer. Members in this order: the
/// actor system ends (awaiting the writer) before the home is removed.
struct writer_fixture {
  temp_dir home;
  system_fixture f;
  std::shared_ptr<store> db = store_test::open_store(home.path);
  store_writer_actor writer = spawn_store_writer(*f.sys, db);
  ~writer_fixture() { caf::anon_send_exit(writer, caf::exit_reason::user_shutdown); }
};

/// A write of one new execution record.
write_batch one_execution(const std::string& id) {
  write_batch b;
  b.executions.push_back(make_exec(id, "g", execution_status::running));
  return b;
}

} // namespace

TEST_CASE("a thread's write through the store writer returns once it is committed",
          "[actors][blocking]") {
  writer_fixture fx;
  CHECK_FALSE(commit_and_wait(fx.writer, 30000ms, one_execution("e1")));
  auto rec = fx.db->execution("e1");
  REQUIRE(rec);
  CHECK(rec->status == execution_status::running);
}

TEST_CASE("a thread's write to a store writer that is gone is answered at once, not at its bound",
          "[actors][blocking]") {
  writer_fixture fx;
  caf::anon_send_exit(fx.writer, caf::exit_reason::user_shutdown);
  REQUIRE(await_down(caf::actor_cast<caf::actor>(fx.writer), 30000ms));
  // The dropped message breaks the ticket: a bound of a minute is not waited for.
  auto began = std::chrono::steady_clock::now();
  auto err = commit_and_wait(fx.writer, 60000ms, one_execution("e1"));
  CHECK(err == caf::sec::request_receiver_down);
  CHECK(std::chrono::steady_clock::now() - began < 30000ms);
  CHECK(is(fx.db->execution("e1").error(), persistence_errc::not_found));
}

TEST_CASE("a wait for an actor's end gives up at its bound while it lives, and returns its "
          "reason once it is down, also when it was down before the wait began",
          "[actors][blocking]") {
  system_fixture f;
  auto a = f.sys->spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[=](caf::ok_atom) { self->quit(caf::exit_reason::user_shutdown); }};
  });
  CHECK_FALSE(await_down(a, 20ms));
  caf::anon_send(a, caf::ok_atom::value);
  caf::error reason;
  REQUIRE(await_down(a, std::nullopt, &reason));
  CHECK(reason == caf::exit_reason::user_shutdown);
  caf::error again;
  CHECK(await_down(a, 0ms, &again));
  CHECK(again == caf::exit_reason::user_shutdown);
}
