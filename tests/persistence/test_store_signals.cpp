// Signals in the store: stored per tree before they are answered, stored
// again when a wait takes them, read back oldest first, and deleted with
// their tree. The `waiting` step status and a wait's deadline round-trip.
// Real LMDB in a temp home.

#include <catch2/catch.hpp>

#include "persistence/records.hpp"
#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::store_test;

namespace {

signal_record make_signal(const std::string& id, const std::string& root,
                          const std::string& name, json value) {
  signal_record s;
  s.id = id;
  s.root_id = root;
  s.target = root;
  s.name = name;
  s.value = std::move(value);
  s.who = "user:alice";
  s.key = "k-" + id;
  s.fingerprint = "fp";
  s.received_at = 1'700'000'000'000;
  return s;
}

} // namespace

TEST_CASE("a signal record round-trips through its stored encoding", "[persistence][signals]") {
  auto s = make_signal("s1", "r", "approval", {{"approved", true}, {"note", "ok"}});
  s.step = "review/approve";
  s.state = signal_state::consumed;
  s.wait_execution = "c1";
  s.wait_step = "approve";
  s.consumed_at = 1'700'000'000'500;
  auto back = decode_signal(encode(s));
  REQUIRE(back);
  CHECK(back->id == "s1");
  CHECK(back->root_id == "r");
  CHECK(back->target == "r");
  CHECK(back->name == "approval");
  CHECK(back->value == s.value);
  CHECK_FALSE(back->failure);
  CHECK(back->step == "review/approve");
  CHECK(back->who == "user:alice");
  CHECK(back->key == "k-s1");
  CHECK(back->fingerprint == "fp");
  CHECK(back->received_at == s.received_at);
  CHECK(back->state == signal_state::consumed);
  CHECK(back->wait_execution == "c1");
  CHECK(back->wait_step == "approve");
  CHECK(back->consumed_at == s.consumed_at);

  auto f = make_signal("s2", "r", "approval", nullptr);
  f.failure = true;
  f.message = "not this one";
  auto fb = decode_signal(encode(f));
  REQUIRE(fb);
  CHECK(fb->failure);
  CHECK(fb->message == "not this one");
  CHECK(fb->value.is_null());
  CHECK(fb->state == signal_state::buffered);
}

TEST_CASE("a signal record without its name is corrupt", "[persistence][signals]") {
  auto s = make_signal("s1", "r", "", nullptr);
  auto bytes = encode(s);
  // The name is written even when empty: replace the record with one that
  // lacks it by encoding an unrelated record type.
  CHECK_FALSE(decode_signal(encode(tree_counters{})));
  CHECK(decode_signal(bytes));
}

TEST_CASE("a waiting step with its deadline and prompt round-trips in its encodings",
          "[persistence][signals]") {
  auto s = make_step("x", "approve", step_status::waiting);
  s.deadline = 1'700'000'086'400'000;
  s.prompt = "Publish \"Q3\"?";
  auto back = decode_step(encode(s));
  REQUIRE(back);
  CHECK(back->status == step_status::waiting);
  CHECK(back->deadline == s.deadline);
  CHECK(back->prompt == s.prompt);
  auto doc = step_from_json(to_json(s));
  REQUIRE(doc);
  CHECK(doc->status == step_status::waiting);
  CHECK(doc->deadline == s.deadline);
  CHECK(doc->prompt == s.prompt);
  CHECK(std::string{to_string(step_status::waiting)} == "waiting");
  step_status parsed = step_status::pending;
  CHECK(from_string("waiting", parsed));
  CHECK(parsed == step_status::waiting);
  CHECK(is_active(step_status::waiting));
}

TEST_CASE("signals are kept per tree, oldest first, and stored again when consumed",
          "[persistence][signals]") {
  test::temp_dir home;
  auto db = open_store(home.path);
  write_batch b;
  b.executions.push_back(make_exec("r1", "g", execution_status::running));
  b.executions.push_back(make_exec("r2", "g", execution_status::running));
  b.signals.push_back(make_signal("02", "r1", "approval", true));
  b.signals.push_back(make_signal("01", "r1", "approval", false));
  b.signals.push_back(make_signal("03", "r2", "approval", 3));
  commit_ok(*db, b);

  auto r1 = get(db->signals("r1"));
  REQUIRE(r1.size() == 2);
  CHECK(r1[0].id == "01");
  CHECK(r1[1].id == "02");
  CHECK(get(db->signals("r2")).size() == 1);
  CHECK(get(db->signals("nothing")).empty());

  auto taken = r1[0];
  taken.state = signal_state::consumed;
  taken.wait_execution = "r1";
  taken.wait_step = "approve";
  taken.consumed_at = 9;
  write_batch c;
  c.signals.push_back(taken);
  commit_ok(*db, c);
  r1 = get(db->signals("r1"));
  REQUIRE(r1.size() == 2);
  CHECK(r1[0].state == signal_state::consumed);
  CHECK(r1[0].wait_step == "approve");
  CHECK(r1[1].state == signal_state::buffered);
}

TEST_CASE("a tree's signals are deleted with the tree, and other trees keep theirs",
          "[persistence][signals]") {
  test::temp_dir home;
  auto db = open_store(home.path);
  write_batch b;
  b.executions.push_back(make_exec("r1", "g", execution_status::completed));
  b.executions.push_back(make_exec("r2", "g", execution_status::running));
  b.signals.push_back(make_signal("01", "r1", "approval", true));
  b.signals.push_back(make_signal("02", "r2", "approval", true));
  commit_ok(*db, b);
  write_batch d;
  d.deleted_trees.push_back("r1");
  commit_ok(*db, d);
  CHECK(get(db->signals("r1")).empty());
  CHECK(get(db->signals("r2")).size() == 1);
}

TEST_CASE("a compact snapshot sets a waiting step back to pending like a running one",
          "[persistence][signals]") {
  test::temp_dir home;
  auto db = open_store(home.path);
  write_batch b;
  b.executions.push_back(make_exec("r", "g", execution_status::running));
  b.executions.push_back(make_exec("c", "g", execution_status::running, "r"));
  auto w = make_step("c", "approve", step_status::waiting);
  w.deadline = 1'700'000'086'400'000;
  b.steps.push_back(w);
  commit_ok(*db, b);

  write_batch stop;
  auto root = make_exec("r", "g", execution_status::stopped);
  root.ended_at = 5;
  stop.executions.push_back(root);
  subtree_stop s;
  s.target = "r";
  s.root_id = "r";
  s.child_reason = step_reason::parent_stopped;
  s.time = 5;
  s.events = 2;
  stop.subtree_stops.push_back(s);
  commit_ok(*db, stop);

  auto steps = get(db->steps("c"));
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].status == step_status::pending);
  CHECK(steps[0].reason == step_reason::parent_stopped);
  CHECK(steps[0].deadline == w.deadline);
}
