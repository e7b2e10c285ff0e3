// The compact snapshot: a `subtree_stop` in a batch stands
// for the per-node records and events of a stopped subtree, and every read of
// the store resolves it. The strongest check: the same tree stored twice in
// real LMDB homes, stopped once the old way (a record and events per node,
// built here by hand) and once compactly; every read must be identical.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <lmdb.h>

#include "actors/messages.hpp"
#include "actors/store_writer.hpp"
#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;

namespace {

constexpr int64_t stop_time = 5000;

/// The events below x of the tree `build` writes: xa 4 steps + itself, xaa
/// 2 + 1, xaaa 1, xb 2 + 1.
constexpr uint64_t walked = 12;

execution_record exec(const std::string& id, const std::string& parent,
                      const std::string& parent_step, execution_status status) {
  execution_record r;
  r.id = id;
  r.graph = "g";
  r.root_id = "x";
  r.parent_id = parent;
  r.parent_step = parent_step;
  r.depth = parent.empty() ? 0 : static_cast<int>(id.size()) - 1;
  r.status = status;
  r.inputs = {{"in", id}};
  r.created_at = 100;
  r.started_at = 110;
  r.owner_pid = 4242;
  r.owner_start = 77;
  return r;
}

step_record step(const std::string& ex, const std::string& id, step_status status,
                 const std::string& child = {}) {
  step_record s;
  s.execution_id = ex;
  s.step = id;
  s.status = status;
  s.attempt = status == step_status::pending ? 0 : 1;
  s.child_id = child;
  if (status != step_status::pending && status != step_status::queued)
    s.started_at = 120;
  if (status == step_status::completed) {
    s.result = {{"v", id}};
    s.ended_at = 130;
  }
  if (status == step_status::running) {
    s.pid = 900;
    s.pid_start = 901;
  }
  return s;
}

/// The stored tree, as the test wrote it (the truth the old snapshot is
/// built from, independently of the store's expansion).
struct tree {
  std::map<std::string, execution_record> executions;
  std::map<std::string, std::vector<step_record>> steps; ///< in key order
};

/// x (root, running) ─ xa (running) ─ xaa (running) ─ xaaa (queued)
///                    │             └ xat (completed) ─ xata (running)
///                    ├ xb (stopping, an agent's run)
///                    └ xc (failed)
/// with running, queued, pending and completed steps; written by ordinary
/// commits (with events), plus a pending stop request on xaa.
tree build(store& db) {
  tree t;
  auto add = [&](execution_record r) { t.executions[r.id] = r; };
  add(exec("x", "", "", execution_status::running));
  add(exec("xa", "x", "g", execution_status::running));
  add(exec("xaa", "xa", "a_g", execution_status::running));
  add(exec("xaaa", "xaa", "b_g", execution_status::queued));
  add(exec("xat", "xa", "a_t", execution_status::running));
  add(exec("xata", "xat", "t_g", execution_status::running));
  add(exec("xb", "x", "g2", execution_status::running));
  add(exec("xc", "x", "g3", execution_status::running));
  t.executions["xb"].agent = "helper";
  t.executions["xaaa"].started_at = 0;
  t.steps["x"] = {step("x", "done", step_status::completed),
                  step("x", "g", step_status::running, "xa"),
                  step("x", "g2", step_status::running, "xb"),
                  step("x", "g3", step_status::completed, "xc"),
                  step("x", "pend", step_status::pending)};
  t.steps["xa"] = {step("xa", "a_done", step_status::completed),
                   step("xa", "a_g", step_status::running, "xaa"),
                   step("xa", "a_pend", step_status::pending),
                   step("xa", "a_q", step_status::queued),
                   step("xa", "a_run", step_status::running),
                   step("xa", "a_t", step_status::running, "xat")};
  t.steps["xaa"] = {step("xaa", "b1", step_status::running),
                    step("xaa", "b_g", step_status::running, "xaaa")};
  t.steps["xat"] = {step("xat", "t_g", step_status::running, "xata")};
  t.steps["xata"] = {step("xata", "u", step_status::running)};
  t.steps["xb"] = {step("xb", "c1", step_status::running), step("xb", "c2", step_status::queued)};
  t.steps["xc"] = {step("xc", "d1", step_status::failed)};
  // Everything starts, with events.
  write_batch b;
  for (auto& [id, r] : t.executions) {
    b.executions.push_back(r);
    b.events.push_back(make_execution_event(r, event_type::execution_started, 110, execution_status::running));
  }
  for (auto& [id, ss] : t.steps)
    for (auto& s : ss) {
      b.steps.push_back(s);
      b.events.push_back(make_step_event(t.executions[id], event_type::step_started, 120, s.step,
                                         s.status));
    }
  REQUIRE(!db.commit(b));
  // Then xat completes (its child xata stays stored running), xc fails and
  // xb is stopping; a stop request for xaa waits.
  auto& xat = t.executions["xat"];
  xat.status = execution_status::completed;
  xat.outputs = {{"o", 1}};
  xat.ended_at = 300;
  auto& xc = t.executions["xc"];
  xc.status = execution_status::failed;
  xc.error = "boom";
  xc.ended_at = 310;
  auto& xb = t.executions["xb"];
  xb.status = execution_status::stopping;
  xb.reason = step_reason::requested;
  xb.error = "half";
  write_batch b2;
  for (auto* r : {&xat, &xc, &xb}) {
    b2.executions.push_back(*r);
    b2.events.push_back(make_execution_event(*r, event_type::execution_started, 320, r->status));
  }
  stop_record req;
  req.id = "s1";
  req.target = "xaa";
  req.requested_at = 330;
  req.who = "test";
  b2.stops.push_back(req);
  REQUIRE(!db.commit(b2));
  return t;
}

bool covered_status(execution_status s) {
  return !is_terminal(s);
}

/// The covered executions below `target` in walk order (pre-order, children
/// by id, not below a terminal one), from the test's own tree.
void walk(const tree& t, const std::string& target, std::vector<std::string>& out) {
  for (auto& [id, r] : t.executions)
    if (r.parent_id == target && covered_status(r.status)) {
      out.push_back(id);
      walk(t, id, out);
    }
}

/// X's own stop records (written as usual in both variants).
void own_stop(const tree& t, write_batch& b) {
  auto x = t.executions.at("x");
  x.status = execution_status::stopped;
  x.reason = step_reason::requested;
  x.ended_at = stop_time;
  for (auto s : t.steps.at("x"))
    if (s.status == step_status::running || s.status == step_status::queued) {
      s.status = step_status::pending;
      s.reason = step_reason::requested;
      s.ended_at = stop_time;
      b.steps.push_back(s);
      b.events.push_back(make_step_event(x, event_type::step_pending, stop_time, s.step, step_status::pending,
                                         step_reason::requested));
    }
  b.executions.push_back(x);
  b.events.push_back(make_execution_event(x, event_type::execution_stopped, stop_time,
                                          execution_status::stopped, step_reason::requested));
}

/// The per-node snapshot the way the execution actors wrote it before the
/// compact snapshot: a record and events per covered execution and step.
write_batch per_node_stop(const tree& t,
                          step_reason child_reason = step_reason::parent_stopped) {
  write_batch b;
  own_stop(t, b);
  std::vector<std::string> ids;
  walk(t, "x", ids);
  for (auto& id : ids) {
    auto d = t.executions.at(id);
    auto reason = d.parent_id == "x" ? child_reason : step_reason::parent_stopped;
    d.status = execution_status::stopped;
    d.reason = reason;
    d.ended_at = stop_time;
    d.outputs = nullptr;
    for (auto s : t.steps.count(id) ? t.steps.at(id) : std::vector<step_record>{})
      if (s.status == step_status::running || s.status == step_status::queued) {
        s.status = step_status::pending;
        s.reason = reason;
        s.ended_at = stop_time;
        b.steps.push_back(s);
        b.events.push_back(make_step_event(d, event_type::step_pending, stop_time, s.step,
                                           step_status::pending, reason));
      }
    b.events.push_back(make_execution_event(d, event_type::execution_stopped, stop_time,
                                            execution_status::stopped, reason,
                                  d.error.empty() ? json(nullptr) : json{{"error", d.error}}));
    b.executions.push_back(d);
  }
  return b;
}

/// How many events the per-node snapshot writes below x.
uint64_t subtree_event_count(const tree& t) {
  auto b = per_node_stop(t);
  write_batch own;
  own_stop(t, own);
  return b.events.size() - own.events.size();
}

write_batch compact_stop(const tree& t, uint64_t events,
                         step_reason child_reason = step_reason::parent_stopped) {
  write_batch b;
  own_stop(t, b);
  subtree_stop s;
  s.target = "x";
  s.root_id = "x";
  s.child_reason = child_reason;
  s.time = stop_time;
  s.events = events;
  b.subtree_stops.push_back(s);
  return b;
}

std::shared_ptr<store> open_store(const test::temp_dir& home) {
  auto db = store::open({home.path});
  REQUIRE(db);
  return *db;
}

const std::vector<std::string> all_ids = {"x",   "xa",   "xaa", "xaaa", "xat",
                                          "xata", "xb", "xc",  "nope"};

/// An event as a reader compares it: a `stop.handled` carries the time it
/// was handled, which differs between two homes.
json doc(const event_record& e) {
  auto j = to_json(e);
  if (e.type == event_type::stop_handled)
    j["time"] = 0;
  return j;
}

json docs(const caf::expected<std::vector<event_record>>& evs) {
  REQUIRE(evs);
  json out = json::array();
  for (auto& e : *evs)
    out.push_back(doc(e));
  return out;
}

json docs(const caf::expected<std::vector<execution_record>>& recs) {
  REQUIRE(recs);
  json out = json::array();
  for (auto& r : *recs) {
    out.push_back(to_json(r));
    out.back()["bytes"] = encode(r); // every field, pid_start included
  }
  return out;
}

/// Every read of `a` equals the same read of `b`.
void same_reads(store& a, store& b) {
  for (auto& id : all_ids) {
    INFO("execution " << id);
    auto ea = a.execution(id), eb = b.execution(id);
    REQUIRE(static_cast<bool>(ea) == static_cast<bool>(eb));
    if (ea) {
      CHECK(to_json(*ea) == to_json(*eb));
      CHECK(encode(*ea) == encode(*eb));
    }
    auto sa = a.steps(id), sb = b.steps(id);
    REQUIRE(sa);
    REQUIRE(sb);
    REQUIRE(sa->size() == sb->size());
    for (size_t i = 0; i < sa->size(); ++i) {
      CHECK(to_json((*sa)[i]) == to_json((*sb)[i]));
      CHECK(encode((*sa)[i]) == encode((*sb)[i]));
    }
    CHECK(*a.children(id) == *b.children(id));
  }
  execution_filter all;
  all.roots_only = false;
  CHECK(docs(a.list(all)) == docs(b.list(all)));
  for (auto st : {execution_status::queued, execution_status::running, execution_status::stopping,
                  execution_status::stopped, execution_status::completed,
                  execution_status::failed}) {
    INFO("status " << to_string(st));
    execution_filter f;
    f.roots_only = false;
    f.status = st;
    CHECK(docs(a.list(f)) == docs(b.list(f)));
    f.roots_only = true;
    CHECK(docs(a.list(f)) == docs(b.list(f)));
  }
  execution_filter limited;
  limited.roots_only = false;
  limited.status = execution_status::stopped;
  limited.limit = 2;
  CHECK(docs(a.list(limited)) == docs(b.list(limited)));
  CHECK(docs(a.live()) == docs(b.live()));
  CHECK(*a.agent_runs("", "helper") == *b.agent_runs("", "helper"));
  CHECK(*a.last_seq() == *b.last_seq());
  // The log, whole and in every window.
  auto full = docs(b.tree_events("x"));
  CHECK(docs(a.tree_events("x")) == full);
  auto last = *b.last_seq();
  for (uint64_t after = 0; after <= last; ++after)
    for (size_t limit : {size_t{0}, size_t{1}, size_t{3}, size_t{7}}) {
      INFO("after " << after << " limit " << limit);
      CHECK(docs(a.tree_events("x", after, limit)) == docs(b.tree_events("x", after, limit)));
    }
  auto pa = a.pending_stops(), pb = b.pending_stops();
  REQUIRE(pa);
  REQUIRE(pb);
  CHECK(pa->size() == pb->size());
  auto ra = a.stop("s1"), rb = b.stop("s1");
  REQUIRE(ra);
  REQUIRE(rb);
  CHECK(ra->handled == rb->handled);
  CHECK(ra->result == rb->result);
}

/// Two homes holding the same tree: `old` stopped per node, `compact` with
/// one subtree_stop.
struct two_homes {
  test::temp_dir old_home, compact_home;
  std::shared_ptr<store> old_db = open_store(old_home);
  std::shared_ptr<store> compact_db = open_store(compact_home);
  tree t;

  explicit two_homes(bool stop = true,
                     step_reason child_reason = step_reason::parent_stopped) {
    t = build(*old_db);
    build(*compact_db);
    if (stop) {
      auto a = per_node_stop(t, child_reason);
      REQUIRE(!old_db->commit(a));
      auto b = compact_stop(t, subtree_event_count(t), child_reason);
      REQUIRE(!compact_db->commit(b));
    }
  }
};

} // namespace

TEST_CASE("a compact snapshot reads exactly like the per-node snapshot it stands for",
          "[persistence]") {
  two_homes h;
  // The sanity of the fixture: the old way stops 4 executions with 12 events.
  REQUIRE(subtree_event_count(h.t) == walked);
  auto stops = h.compact_db->subtree_stops("x");
  REQUIRE(stops);
  REQUIRE(stops->size() == 1);
  same_reads(*h.compact_db, *h.old_db);
  // Spot checks on what "identical" means here.
  auto xaa = h.compact_db->execution("xaa");
  REQUIRE(xaa);
  CHECK(xaa->status == execution_status::stopped);
  CHECK(xaa->reason == step_reason::parent_stopped);
  CHECK(xaa->ended_at == stop_time);
  auto xa_steps = h.compact_db->steps("xa");
  REQUIRE(xa_steps);
  CHECK((*xa_steps)[4].step == "a_run");
  CHECK((*xa_steps)[4].status == step_status::pending);
  CHECK((*xa_steps)[4].pid == 900); // kept, as the per-node snapshot kept it
  CHECK((*xa_steps)[2].status == step_status::pending);
  CHECK((*xa_steps)[2].reason == step_reason::none); // pending before: untouched
  auto live = h.compact_db->live();
  REQUIRE(live);
  REQUIRE(live->size() == 1);
  CHECK(live->front().id == "xata");
}

TEST_CASE("the target's children get the child reason and deeper executions parent_stopped",
          "[persistence]") {
  two_homes h(true, step_reason::sibling_failed);
  same_reads(*h.compact_db, *h.old_db);
  CHECK(h.compact_db->execution("xa")->reason == step_reason::sibling_failed);
  CHECK(h.compact_db->steps("xa")->at(3).reason == step_reason::sibling_failed);
  CHECK(h.compact_db->execution("xaa")->reason == step_reason::parent_stopped);
  CHECK(h.compact_db->steps("xaa")->at(0).reason == step_reason::parent_stopped);
  REQUIRE(h.compact_db->materialize("x") == materialize_outcome::done);
  same_reads(*h.compact_db, *h.old_db);
}

TEST_CASE("a compact snapshot does not descend below a terminal execution", "[persistence]") {
  two_homes h;
  auto xata = h.compact_db->execution("xata");
  REQUIRE(xata);
  CHECK(xata->status == execution_status::running);
  auto steps = h.compact_db->steps("xata");
  REQUIRE(steps);
  CHECK(steps->front().status == step_status::running);
  auto xat = h.compact_db->execution("xat");
  REQUIRE(xat);
  CHECK(xat->status == execution_status::completed);
  CHECK(xat->outputs == json{{"o", 1}});
  auto xc = h.compact_db->execution("xc");
  REQUIRE(xc);
  CHECK(xc->status == execution_status::failed);
  CHECK(xc->reason == step_reason::none);
}

TEST_CASE("a pending stop request on a covered execution is handled by the compact snapshot",
          "[persistence]") {
  two_homes h(false);
  auto before = h.compact_db->stop("s1");
  REQUIRE(before);
  CHECK(!before->handled);
  auto b = compact_stop(h.t, subtree_event_count(h.t));
  REQUIRE(!h.compact_db->commit(b));
  auto after = h.compact_db->stop("s1");
  REQUIRE(after);
  CHECK(after->handled);
  CHECK(after->result == stop_result::stopped);
  auto pending = h.compact_db->pending_stops();
  REQUIRE(pending);
  CHECK(pending->empty());
  // Its `stop.handled` event comes after the compact range, with the
  // resolved status, and the batch carries it.
  auto evs = h.compact_db->tree_events("x");
  REQUIRE(evs);
  REQUIRE(!evs->empty());
  CHECK(evs->back().type == event_type::stop_handled);
  CHECK(evs->back().execution_id == "xaa");
  CHECK(to_string(evs->back().status) == std::string{"stopped"});
  CHECK(evs->back().reason == step_reason::parent_stopped);
  CHECK(evs->back().seq == b.subtree_stops.front().first_seq + walked);
  std::vector<event_record> taken;
  b.take_events(taken);
  CHECK(taken.back().type == event_type::stop_handled);
}

TEST_CASE("a stop request arriving after a compact snapshot is answered at once",
          "[persistence]") {
  two_homes h;
  write_batch b;
  stop_record req;
  req.id = "s2";
  req.target = "xb";
  req.requested_at = 6000;
  b.stops.push_back(req);
  REQUIRE(!h.compact_db->commit(b));
  auto r = h.compact_db->stop("s2");
  REQUIRE(r);
  CHECK(r->handled);
  CHECK(r->result == stop_result::stopped);
}

TEST_CASE("materialising a compact snapshot keeps every read and removes the compact entry",
          "[persistence]") {
  two_homes h;
  REQUIRE(h.compact_db->materialize("x") == materialize_outcome::done);
  auto stops = h.compact_db->subtree_stops("x");
  REQUIRE(stops);
  CHECK(stops->empty());
  same_reads(*h.compact_db, *h.old_db);
  // The log holds real events only now: a second materialisation is a no-op.
  REQUIRE(h.compact_db->materialize("x") == materialize_outcome::done);
  same_reads(*h.compact_db, *h.old_db);
}

TEST_CASE("a materialisation that gives way changes nothing, wherever it gives way",
          "[persistence]") {
  // A whole materialisation asks once before each covered execution it
  // writes (4 here): counted on a second pair of homes.
  size_t asks = 0;
  {
    two_homes counted;
    auto done = counted.compact_db->materialize("x", [&] {
      ++asks;
      return false;
    });
    REQUIRE(done == materialize_outcome::done);
    same_reads(*counted.compact_db, *counted.old_db);
  }
  std::vector<std::string> covered;
  walk(two_homes{false}.t, "x", covered);
  REQUIRE(covered.size() == 4);
  REQUIRE(asks == covered.size());
  // Giving way before the first execution, and after one, two and three
  // were written: each time the transaction is rolled back.
  two_homes h;
  for (size_t k = 1; k <= asks; ++k) {
    size_t asked = 0;
    auto done = h.compact_db->materialize("x", [&] { return ++asked == k; });
    REQUIRE(done == materialize_outcome::gave_way);
    CHECK(asked == k);
    auto stops = h.compact_db->subtree_stops("x");
    REQUIRE(stops);
    CHECK(stops->size() == 1);
  }
  same_reads(*h.compact_db, *h.old_db);
  REQUIRE(h.compact_db->materialize("x") == materialize_outcome::done);
  auto stops = h.compact_db->subtree_stops("x");
  REQUIRE(stops);
  CHECK(stops->empty());
  same_reads(*h.compact_db, *h.old_db);
}

TEST_CASE("writing a record of a covered execution materialises its compact snapshot first",
          "[persistence]") {
  two_homes h;
  // A resume writes xaa back to running, with an event: the same on both.
  auto xaa = *h.old_db->execution("xaa");
  xaa.status = execution_status::running;
  xaa.reason = step_reason::none;
  xaa.ended_at = 0;
  auto resumed = [&] {
    write_batch b;
    b.executions.push_back(xaa);
    b.events.push_back(make_execution_event(xaa, event_type::execution_resumed, 7000, execution_status::running));
    return b;
  };
  auto b1 = resumed(), b2 = resumed();
  REQUIRE(!h.old_db->commit(b1));
  REQUIRE(!h.compact_db->commit(b2));
  auto stops = h.compact_db->subtree_stops("x");
  REQUIRE(stops);
  CHECK(stops->empty());
  same_reads(*h.compact_db, *h.old_db);
  CHECK(h.compact_db->execution("xaa")->status == execution_status::running);
}

TEST_CASE("writing a step of a covered execution materialises its compact snapshot first",
          "[persistence]") {
  two_homes h;
  auto s = h.old_db->steps("xb")->front();
  s.status = step_status::running;
  s.reason = step_reason::none;
  write_batch b1, b2;
  b1.steps.push_back(s);
  b2.steps.push_back(s);
  REQUIRE(!h.old_db->commit(b1));
  REQUIRE(!h.compact_db->commit(b2));
  CHECK(h.compact_db->subtree_stops("x")->empty());
  same_reads(*h.compact_db, *h.old_db);
}

TEST_CASE("writing the target's record again materialises its compact snapshot",
          "[persistence]") {
  two_homes h;
  auto x = *h.old_db->execution("x");
  x.status = execution_status::running;
  write_batch b1, b2;
  b1.executions.push_back(x);
  b2.executions.push_back(x);
  REQUIRE(!h.old_db->commit(b1));
  REQUIRE(!h.compact_db->commit(b2));
  CHECK(h.compact_db->subtree_stops("x")->empty());
  same_reads(*h.compact_db, *h.old_db);
}

TEST_CASE("deleting a covered execution materialises first and leaves nothing of it",
          "[persistence]") {
  two_homes h;
  write_batch b1, b2;
  b1.deleted_executions.push_back("xaaa");
  b2.deleted_executions.push_back("xaaa");
  REQUIRE(!h.old_db->commit(b1));
  REQUIRE(!h.compact_db->commit(b2));
  same_reads(*h.compact_db, *h.old_db);
  auto evs = h.compact_db->tree_events("x");
  REQUIRE(evs);
  for (auto& e : *evs)
    CHECK(e.execution_id != "xaaa");
}

TEST_CASE("a write elsewhere in the tree leaves the compact snapshot in place",
          "[persistence]") {
  two_homes h;
  // xata is below a terminal execution: not covered.
  auto xata = *h.old_db->execution("xata");
  xata.status = execution_status::completed;
  write_batch b1, b2;
  b1.executions.push_back(xata);
  b2.executions.push_back(xata);
  REQUIRE(!h.old_db->commit(b1));
  REQUIRE(!h.compact_db->commit(b2));
  CHECK(h.compact_db->subtree_stops("x")->size() == 1);
  same_reads(*h.compact_db, *h.old_db);
}

TEST_CASE("a compact snapshot whose count is short keeps its events within the reserved range",
          "[persistence]") {
  // The writer counted 7, the walk yields 12: the first 7 are in the log,
  // the records all resolve, and the next event (s1's stop.handled) follows
  // the range.
  two_homes h(false);
  auto b = compact_stop(h.t, 7);
  REQUIRE(!h.compact_db->commit(b));
  auto first = b.subtree_stops.front().first_seq;
  CHECK(*h.compact_db->last_seq() == first + 7);
  CHECK(h.compact_db->tree_events("x", first + 6)->front().type == event_type::stop_handled);
  auto per_node = per_node_stop(h.t);
  REQUIRE(!h.old_db->commit(per_node));
  auto full = h.old_db->tree_events("x");
  auto evs = h.compact_db->tree_events("x");
  REQUIRE(evs);
  REQUIRE(full);
  std::vector<json> want, got;
  for (auto& e : *full)
    if (e.seq < first + 7 && e.type != event_type::stop_handled)
      want.push_back(doc(e));
  for (auto& e : *evs)
    if (e.type != event_type::stop_handled)
      got.push_back(doc(e));
  CHECK(got == want);
  for (size_t i = 1; i < evs->size(); ++i)
    CHECK((*evs)[i - 1].seq < (*evs)[i].seq);
  CHECK(h.compact_db->execution("xb")->status == execution_status::stopped);
  auto sub = h.compact_db->subtree_events(b.subtree_stops.front());
  REQUIRE(sub);
  CHECK(sub->size() == 7);
  // Materialised, the same 7 events stay.
  REQUIRE(h.compact_db->materialize("x") == materialize_outcome::done);
  auto after = h.compact_db->tree_events("x");
  REQUIRE(after);
  CHECK(docs(after) == docs(evs));
}

TEST_CASE("a compact snapshot whose count is long leaves the extra seqs unused",
          "[persistence]") {
  two_homes h(false);
  auto b = compact_stop(h.t, walked + 3);
  REQUIRE(!h.compact_db->commit(b));
  auto first = b.subtree_stops.front().first_seq;
  // The stop.handled event of s1 comes after the whole reserved range.
  CHECK(*h.compact_db->last_seq() == first + walked + 3);
  auto evs = h.compact_db->tree_events("x");
  REQUIRE(evs);
  std::set<uint64_t> seqs;
  size_t in_range = 0;
  for (auto& e : *evs) {
    CHECK(seqs.insert(e.seq).second);
    if (e.seq >= first && e.seq < first + walked + 3) {
      ++in_range;
      CHECK(e.seq < first + walked); // the walk's 12, then a gap of 3
    }
  }
  CHECK(in_range == walked);
  CHECK(evs->back().seq == first + walked + 3);
  // A window from the range's last event on sees nothing of the gap.
  auto gap = h.compact_db->tree_events("x", first + walked - 1, 1);
  REQUIRE(gap);
  REQUIRE(gap->size() == 1);
  CHECK(gap->front().seq == first + walked + 3);
  REQUIRE(h.compact_db->materialize("x") == materialize_outcome::done);
  CHECK(docs(h.compact_db->tree_events("x")) == docs(evs));
}

TEST_CASE("a compact snapshot of zero events still resolves the records", "[persistence]") {
  two_homes h(false);
  auto last = *h.compact_db->last_seq();
  auto b = compact_stop(h.t, 0);
  REQUIRE(!h.compact_db->commit(b));
  CHECK(h.compact_db->execution("xa")->status == execution_status::stopped);
  auto sub = h.compact_db->subtree_events(b.subtree_stops.front());
  REQUIRE(sub);
  CHECK(sub->empty());
  // X's own 3 events and s1's stop.handled.
  CHECK(*h.compact_db->last_seq() == last + 4);
}

TEST_CASE("the store writer sends a compact snapshot's events to subscribers in seq order",
          "[persistence]") {
  two_homes h(false);
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto writer = spawn_store_writer(sys, h.compact_db);
  caf::scoped_actor self{sys};
  uint64_t subscribed_at = 0;
  self->request(writer, caf::infinite, subscribe_atom::value,
                caf::actor_cast<caf::actor>(self))
    .receive([&](uint64_t seq) { subscribed_at = seq; },
             [&](caf::error& err) { FAIL(sys.render(err)); });
  auto b = compact_stop(h.t, subtree_event_count(h.t));
  self->request(writer, caf::infinite, write_atom::value, std::move(b))
    .receive([](bool ok) { CHECK(ok); }, [&](caf::error& err) { FAIL(sys.render(err)); });
  std::vector<event_record> got;
  bool received = false;
  self->receive([&](events_atom, const event_list& evs) {
                  received = true;
                  got = *evs;
                },
                caf::after(std::chrono::seconds(10)) >> [] {});
  REQUIRE(received);
  // Exactly what the log holds after the subscription's seq.
  auto logged = h.compact_db->tree_events("x", subscribed_at);
  REQUIRE(logged);
  json want = json::array(), have = json::array();
  for (auto& e : *logged)
    want.push_back(to_json(e));
  for (auto& e : got)
    have.push_back(to_json(e));
  CHECK(have == want);
  CHECK(got.size() == 3 + walked + 1); // x's own, the subtree's, s1's stop.handled
  for (size_t i = 1; i < got.size(); ++i)
    CHECK(got[i - 1].seq + 1 == got[i].seq);
  self->send_exit(writer, caf::exit_reason::user_shutdown);
}

namespace {

/// Writes small batches of an unrelated execution back to back through
/// `writer` (each answered after its fsync, so no quiet of `idle_delay`
/// ever comes) until `done()` or `limit` passed. @returns how long it wrote.
template <class Done>
std::chrono::milliseconds write_without_pause(caf::scoped_actor& self, const store_writer_actor& writer,
                                              std::chrono::milliseconds limit, Done done) {
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - t0);
  };
  for (int i = 0; !done() && elapsed() < limit; ++i) {
    write_batch b;
    b.executions.push_back(exec("w", "", "", execution_status::running));
    b.executions.back().root_id = "w";
    b.executions.back().inputs = {{"i", i}};
    self->request(writer, caf::infinite, write_atom::value, std::move(b))
      .receive([](bool ok) { REQUIRE(ok); }, [](caf::error& err) { FAIL(to_string(err)); });
  }
  return elapsed();
}

} // namespace

TEST_CASE("under writes that never pause, the store writer materialises a compact snapshot "
          "once it is overdue, and not before",
          "[persistence][writer]") {
  two_homes h(false);
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  store_writer_options opts;
  // Writes come every millisecond or two: a quiet of 250 ms never comes.
  opts.idle_delay = std::chrono::milliseconds{250 * test::slow_build};
  opts.overdue_after = std::chrono::milliseconds{2000 * test::slow_build};
  auto writer = spawn_store_writer(sys, h.compact_db, opts);
  caf::scoped_actor self{sys};
  auto compact_left = [&] {
    auto left = h.compact_db->subtree_stops("x");
    REQUIRE(left);
    return left->size();
  };
  self->request(writer, caf::infinite, write_atom::value,
                compact_stop(h.t, subtree_event_count(h.t)))
    .receive([](bool ok) { CHECK(ok); }, [&](caf::error& err) { FAIL(sys.render(err)); });
  REQUIRE(compact_left() == 1);
  // Before it is overdue, writes without a quiet keep it compact.
  write_without_pause(self, writer, std::chrono::milliseconds{500 * test::slow_build},
                      [] { return false; });
  CHECK(compact_left() == 1);
  // Once overdue, the writer's next look materialises it between writes.
  auto took = write_without_pause(self, writer, std::chrono::seconds{20},
                                  [&] { return compact_left() == 0; });
  INFO("materialised after " << took.count() << " ms more of writes");
  CHECK(compact_left() == 0);
  // The tree reads as the per-node snapshot would (the writes of "w" are
  // the only other records).
  auto a = per_node_stop(h.t);
  REQUIRE(!h.old_db->commit(a));
  for (auto& id : all_ids) {
    INFO("execution " << id);
    auto ea = h.compact_db->execution(id), eb = h.old_db->execution(id);
    REQUIRE(static_cast<bool>(ea) == static_cast<bool>(eb));
    if (ea)
      CHECK(to_json(*ea) == to_json(*eb));
    auto sa = h.compact_db->steps(id), sb = h.old_db->steps(id);
    REQUIRE(sa);
    REQUIRE(sb);
    REQUIRE(sa->size() == sb->size());
    for (size_t i = 0; i < sa->size(); ++i)
      CHECK(to_json((*sa)[i]) == to_json((*sb)[i]));
  }
  CHECK(docs(h.compact_db->tree_events("x")) == docs(h.old_db->tree_events("x")));
  self->send_exit(writer, caf::exit_reason::user_shutdown);
}

TEST_CASE("a compact snapshot round-trips through its binary codec", "[persistence]") {
  subtree_stop s;
  s.target = "t";
  s.root_id = "r";
  s.child_reason = step_reason::sibling_failed;
  s.time = 12345;
  s.events = 99;
  s.first_seq = 7;
  auto back = decode_subtree_stop(encode(s));
  REQUIRE(back);
  CHECK(back->target == "t");
  CHECK(back->root_id == "r");
  CHECK(back->child_reason == step_reason::sibling_failed);
  CHECK(back->time == 12345);
  CHECK(back->events == 99);
  CHECK(back->first_seq == 7);
  CHECK(!decode_subtree_stop("\x81\xa1x\x01"));
}

TEST_CASE("a home without the subtrees database reads as before and its first write creates it",
          "[persistence]") {
  test::temp_dir old_home, home;
  tree t;
  {
    auto db = open_store(home);
    t = build(*db);
    auto old_db = open_store(old_home);
    build(*old_db);
    auto a = per_node_stop(t);
    REQUIRE(!old_db->commit(a));
  }
  // As a home written before the compact snapshot: no `subtrees`.
  {
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 32);
    REQUIRE(mdb_env_open(env, home.path.c_str(), 0, 0644) == 0);
    MDB_txn* txn = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
    MDB_dbi dbi;
    REQUIRE(mdb_dbi_open(txn, "subtrees", 0, &dbi) == 0);
    REQUIRE(mdb_drop(txn, dbi, 1) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
  }
  // A reader opened now (another process, say) and a writer.
  auto reader = open_store(home);
  auto writer = open_store(home);
  CHECK(reader->execution("xa")->status == execution_status::running);
  auto none = reader->subtree_stops("x");
  REQUIRE(none);
  CHECK(none->empty());
  auto b = compact_stop(t, walked);
  REQUIRE(!writer->commit(b));
  auto old_db = open_store(old_home);
  same_reads(*writer, *old_db);
  // The reader finds the database the writer created.
  same_reads(*reader, *old_db);
}
