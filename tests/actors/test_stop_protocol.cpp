// Tests of the stop protocol (actors/stop_protocol.hpp) against a real store
// in a temp home, the real store writer and a small actor standing in for a
// live execution: sent a request (by an actor, or by a thread with its
// ticket), it commits it and answers; sent the stop message, it takes note;
// then it settles (commits itself `stopped`, so the store answers the
// request, and quits), or it never settles, or it never answers at all.

#include "actors/stop_protocol.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/error.hpp"
#include "actors/messages.hpp"
#include "actors/store_writer.hpp"
#include "actors/tree_context.hpp"
#include "tests/actors/system_fixture.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace std::chrono_literals;
using canopy::core::store_test::commit_ok;
using canopy::core::store_test::get;
using canopy::core::store_test::make_exec;
using canopy::core::test::system_fixture;
using canopy::core::test::temp_dir;

namespace {

using clock_type = std::chrono::steady_clock;

// -- the stand-in for a live execution -------------------------------------------

/// How the stand-in behaves once it is asked to stop.
enum class stand_in_mode {
  settles,       ///< commits itself `stopped` and quits
  never_settles, ///< stays `running` and alive
  never_answers, ///< holds a request without answering it
};

/// What the stand-in saw (written on its thread, read by the test).
struct stand_in_seen {
  std::atomic<int> requests{0};
  std::atomic<int> stops{0};
  std::atomic<bool> failed{false}; ///< a commit of its own failed
  std::mutex mtx;
  std::string reason; ///< of the last stop message
};

struct stand_in_state {
  std::vector<caf::response_promise> held;
  std::vector<commit_ticket> held_tickets;
};

/// Commits `rec` as `stopped`: the store answers its pending requests.
void settle(store& db, execution_record rec, stand_in_seen& seen) {
  rec.status = execution_status::stopped;
  rec.reason = step_reason::requested;
  rec.ended_at = now_ms();
  write_batch b;
  b.executions.push_back(std::move(rec));
  if (db.commit(b))
    seen.failed = true;
}

caf::behavior stand_in(caf::stateful_actor<stand_in_state>* self, std::shared_ptr<store> db,
                       execution_record rec, stand_in_mode mode,
                       std::shared_ptr<stand_in_seen> seen) {
  auto halt = [=] {
    if (mode == stand_in_mode::settles)
      self->send(self, caf::ok_atom::value);
  };
  return {
    [=](request_atom, const stop_record&, write_batch& batch) -> caf::result<bool> {
      ++seen->requests;
      if (mode == stand_in_mode::never_answers) {
        self->state.held.push_back(self->make_response_promise());
        return caf::delegated<bool>{};
      }
      if (auto err = db->commit(batch))
        return err;
      halt();
      return true;
    },
    // From a thread: the same, answered through its ticket.
    [=](request_atom, const stop_record&, write_batch& batch, commit_ticket& ticket) {
      ++seen->requests;
      if (mode == stand_in_mode::never_answers) {
        self->state.held_tickets.push_back(std::move(ticket));
        return;
      }
      auto err = db->commit(batch);
      ticket->set_value(err);
      if (!err)
        halt();
    },
    [=](stop_atom, const std::string& reason, bool) {
      {
        std::lock_guard<std::mutex> guard{seen->mtx};
        seen->reason = reason;
      }
      ++seen->stops;
      halt();
    },
    [=](caf::ok_atom) {
      settle(*db, rec, *seen);
      self->quit();
    },
  };
}

// -- the fixture -------------------------------------------------------------------

/// A store in a temp home, its writer, a directory of live executions and
/// the stand-ins registered in it. Members in this order: the actor system
/// ends (awaiting every actor) before the home is removed.
struct protocol_fixture {
  temp_dir home;
  system_fixture f;
  std::shared_ptr<store> db;
  stop_context ctx;
  std::vector<caf::actor> stand_ins;

  protocol_fixture() : db(store_test::open_store(home.path)) {
    ctx.db = db;
    ctx.writer = spawn_store_writer(*f.sys, db);
    ctx.directory = std::make_shared<execution_directory>();
  }

  ~protocol_fixture() {
    for (auto& a : stand_ins)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(ctx.writer, caf::exit_reason::user_shutdown);
  }

  caf::actor_system& sys() { return *f.sys; }

  /// Commits execution `id` with `status`. @returns its record.
  execution_record stored(const std::string& id,
                          execution_status status = execution_status::running) {
    auto rec = make_exec(id, "g", status);
    write_batch b;
    b.executions.push_back(rec);
    commit_ok(*db, b);
    return rec;
  }

  /// Spawns a stand-in for `rec` and registers it with a halt token.
  std::shared_ptr<halt_token> live(const execution_record& rec, stand_in_mode mode,
                                   std::shared_ptr<stand_in_seen> seen) {
    auto token = std::make_shared<halt_token>();
    auto a = f.sys->spawn(stand_in, db, rec, mode, std::move(seen));
    ctx.directory->add(rec.id, a, token);
    stand_ins.push_back(a);
    return token;
  }

  /// The types of the events of `id`'s tree, in seq order.
  std::vector<std::string> event_types(const std::string& id) {
    std::vector<std::string> out;
    for (auto& e : get(db->tree_events(id)))
      out.push_back(to_string(e.type));
    return out;
  }
};

bool has(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

millis since(clock_type::time_point t) {
  return std::chrono::duration_cast<millis>(clock_type::now() - t);
}

} // namespace

// -- one stop ------------------------------------------------------------------------

TEST_CASE("a stop of a live target is delivered to it, stored with its extra records and "
          "answered stopped once it settles",
          "[actors][stop]") {
  protocol_fixture fx;
  auto rec = fx.stored("e1");
  auto seen = std::make_shared<stand_in_seen>();
  auto token = fx.live(rec, stand_in_mode::settles, seen);
  write_batch extra;
  extra.events.push_back(store_test::make_event("e1", "e1", event_type::agent_cancelled));
  auto t = get(request_stop(fx.ctx, "e1", stop_mode::force, "test", extra));
  CHECK(t.request.target == "e1");
  CHECK_FALSE(t.request.id.empty());
  CHECK(t.request.force);
  CHECK(seen->requests == 1);
  CHECK(token->any());
  CHECK(await_stop(fx.ctx, t, 10s) == stop_result::stopped);
  CHECK_FALSE(seen->failed);
  auto stored = get(fx.db->stop(t.request.id));
  CHECK(stored.handled);
  CHECK(stored.result == stop_result::stopped);
  CHECK(stored.who == "test");
  auto types = fx.event_types("e1");
  CHECK(has(types, "stop.requested"));
  CHECK(has(types, "agent.cancelled"));
  CHECK(has(types, "stop.handled"));
}

TEST_CASE("a stop of a settled target answers no_execution without storing a request",
          "[actors][stop]") {
  protocol_fixture fx;
  fx.stored("e1", execution_status::completed);
  auto t = get(request_stop(fx.ctx, "e1", stop_mode::graceful, "test"));
  CHECK(t.result == stop_result::no_execution);
  CHECK(t.request.id.empty());
  CHECK(get(fx.db->pending_stops()).empty());
  CHECK_FALSE(has(fx.event_types("e1"), "stop.requested"));
  CHECK(await_stop(fx.ctx, t, 10s) == stop_result::no_execution);
}

TEST_CASE("a stop of an unknown execution is not_found", "[actors][stop]") {
  protocol_fixture fx;
  auto t = request_stop(fx.ctx, "nobody", stop_mode::graceful, "test");
  REQUIRE_FALSE(t);
  CHECK(store_test::is_errc(t.error(), persistence_errc::not_found));
}

TEST_CASE("a stop of a target not live here is stored through the writer and answered "
          "once the store sees it stopped",
          "[actors][stop]") {
  protocol_fixture fx;
  auto rec = fx.stored("e1");
  auto t = get(request_stop(fx.ctx, "e1", stop_mode::graceful, "test"));
  CHECK(t.result == stop_result::stopping);
  auto pending = get(fx.db->pending_stops());
  REQUIRE(pending.size() == 1);
  CHECK(pending.front().id == t.request.id);
  CHECK(await_stop(fx.ctx, t, 50ms) == stop_result::stopping);
  // Its owner (another process) settles it.
  stand_in_seen seen;
  settle(*fx.db, rec, seen);
  CHECK(await_stop(fx.ctx, t, 10s) == stop_result::stopped);
  CHECK(get(await_stop(*fx.db, t, 10s)) == stop_result::stopped);
}

TEST_CASE("a live target that never acknowledges gets its request stored through the writer "
          "after a bound",
          "[actors][stop]") {
  protocol_fixture fx;
  auto rec = fx.stored("e1");
  auto seen = std::make_shared<stand_in_seen>();
  fx.live(rec, stand_in_mode::never_answers, seen);
  auto start = clock_type::now();
  auto t = get(request_stop(fx.ctx, "e1", stop_mode::graceful, "test"));
  CHECK(since(start) < 10s);
  CHECK(seen->requests == 1);
  auto stored = get(fx.db->stop(t.request.id));
  CHECK_FALSE(stored.handled);
  CHECK(t.result == stop_result::stopping);
}

TEST_CASE("the bound of a wait is honoured when the target never settles", "[actors][stop]") {
  protocol_fixture fx;
  auto rec = fx.stored("e1");
  auto seen = std::make_shared<stand_in_seen>();
  fx.live(rec, stand_in_mode::never_settles, seen);
  auto t = get(request_stop(fx.ctx, "e1", stop_mode::graceful, "test"));
  CHECK(seen->requests == 1);
  auto start = clock_type::now();
  CHECK(await_stop(fx.ctx, t, 300ms) == stop_result::stopping);
  auto took = since(start);
  CHECK(took >= 300ms);
  CHECK(took < 1300ms);
  start = clock_type::now();
  CHECK(get(await_stop(*fx.db, t, 200ms)) == stop_result::stopping);
  took = since(start);
  CHECK(took >= 200ms);
  CHECK(took < 1200ms);
}

// -- delivery and the asynchronous request -------------------------------------------

TEST_CASE("a stored request is delivered to its live target as the stop message, with its "
          "halt token set",
          "[actors][stop]") {
  protocol_fixture fx;
  auto rec = fx.stored("e1");
  auto seen = std::make_shared<stand_in_seen>();
  auto token = fx.live(rec, stand_in_mode::settles, seen);
  // Stored by another process.
  auto [req, batch] = make_stop_request(rec, stop_mode::force, "cli");
  commit_ok(*fx.db, batch);
  CHECK_FALSE(deliver_stop(*fx.ctx.directory, make_stop_request(fx.stored("e2"),
                                                                stop_mode::graceful, "cli")
                                                .first));
  CHECK(deliver_stop(*fx.ctx.directory, req));
  CHECK(token->any());
  stop_ticket t;
  t.request = req;
  CHECK(get(await_stop(*fx.db, t, 10s)) == stop_result::stopped);
  CHECK(seen->stops == 1);
  std::lock_guard<std::mutex> guard{seen->mtx};
  CHECK(seen->reason == "requested");
}

TEST_CASE("an actor's asynchronous stop request is stored and reported to it once committed",
          "[actors][stop]") {
  protocol_fixture fx;
  auto rec = fx.stored("e1");
  auto done = std::make_shared<std::promise<std::pair<stop_ticket, caf::error>>>();
  auto answer = done->get_future();
  auto ctx = fx.ctx;
  fx.sys().spawn([=](caf::event_based_actor* self) {
    auto t = std::make_shared<stop_ticket>();
    *t = request_stop_async(self, ctx, rec, stop_mode::graceful, "agent:a", {},
                            [=](const caf::error& err) {
                              done->set_value({*t, err});
                              self->quit();
                            });
  });
  REQUIRE(answer.wait_for(10s) == std::future_status::ready);
  auto [t, err] = answer.get();
  CHECK_FALSE(err);
  auto stored = get(fx.db->stop(t.request.id));
  CHECK(stored.target == "e1");
  CHECK(stored.who == "agent:a");
  CHECK_FALSE(stored.handled);
}

// -- many stops within one deadline ------------------------------------------------

TEST_CASE("a stop of many within one deadline answers per id, in order", "[actors][stop]") {
  protocol_fixture fx;
  auto settles = std::make_shared<stand_in_seen>();
  auto stays = std::make_shared<stand_in_seen>();
  fx.live(fx.stored("e1"), stand_in_mode::settles, settles);
  fx.stored("e2", execution_status::completed);
  fx.live(fx.stored("e3"), stand_in_mode::never_settles, stays);
  std::vector<stop_order> orders{{"e1", {}}, {"e2", {}}, {"e3", {}}, {"nobody", {}}};
  auto start = clock_type::now();
  auto out = stop_all(fx.ctx, orders, stop_mode::graceful, "test", 500ms);
  auto took = since(start);
  REQUIRE(out.size() == 4);
  CHECK(out[0].id == "e1");
  CHECK_FALSE(out[0].error);
  CHECK(out[0].result == stop_result::stopped);
  CHECK(out[1].id == "e2");
  CHECK_FALSE(out[1].error);
  CHECK(out[1].ticket.request.id.empty());
  CHECK(out[1].result == stop_result::no_execution);
  CHECK(out[2].id == "e3");
  CHECK(out[2].result == stop_result::stopping);
  CHECK(out[3].id == "nobody");
  CHECK(store_test::is_errc(out[3].error, persistence_errc::not_found));
  CHECK(took >= 490ms); // what is left is counted in whole milliseconds
  CHECK(took < 5s);
  CHECK(settles->requests == 1);
  CHECK(stays->requests == 1);
}

TEST_CASE("a stop of many with no wait reports every stored request stopping",
          "[actors][stop]") {
  protocol_fixture fx;
  auto seen = std::make_shared<stand_in_seen>();
  fx.live(fx.stored("e1"), stand_in_mode::settles, seen);
  auto out = stop_all(fx.ctx, {{"e1", {}}}, stop_mode::graceful, "test", 0ms);
  REQUIRE(out.size() == 1);
  CHECK_FALSE(out[0].ticket.request.id.empty());
  CHECK(out[0].result == stop_result::stopping);
}

TEST_CASE("a stop of many that gives up on an error requests nothing after it",
          "[actors][stop]") {
  protocol_fixture fx;
  auto seen = std::make_shared<stand_in_seen>();
  auto token = fx.live(fx.stored("e1"), stand_in_mode::settles, seen);
  auto out = stop_all(fx.ctx, {{"nobody", {}}, {"e1", {}}}, stop_mode::graceful,
                      "test", 10s, true);
  REQUIRE(out.size() == 1);
  CHECK(store_test::is_errc(out[0].error, persistence_errc::not_found));
  CHECK(seen->requests == 0);
  CHECK_FALSE(token->any());
}

TEST_CASE("a stop's reason is read from its text, and a reason this version does not know "
          "reads as requested",
          "[actors][stop]") {
  CHECK(stop_reason_of("parent_stopped") == stop_reason::parent_stopped);
  CHECK(stop_reason_of("a reason of a newer version") == stop_reason::requested);
  auto reason = stop_reason::none;
  auto mode = stop_mode::graceful;
  REQUIRE(is_stop(make_stop(stop_reason::shutdown, stop_mode::force), reason, mode));
  CHECK(reason == stop_reason::shutdown);
  CHECK(mode == stop_mode::force);
  REQUIRE(is_stop(make_error(actors_errc::stop, "a reason of a newer version"), reason, mode));
  CHECK(reason == stop_reason::requested);
  CHECK(mode == stop_mode::graceful);
  CHECK_FALSE(is_stop(caf::error{}, reason, mode));
}
