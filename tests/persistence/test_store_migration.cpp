// Tests of the migration of a schema-1 home (JSON text records, written by
// the release before the binary records) to schema 2. The home is a fixture
// made by that release's binary: tests/fixtures/make_store_fixture.sh.

#include "persistence/store.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;

namespace fs = std::filesystem;

namespace {

// -- helpers -------------------------------------------------------------------

const std::string fixture = std::string{CANOPY_SOURCE_DIR} + "/tests/fixtures/store_v1";

/// Every stored record: database name → key → value bytes.
using raw_store = std::map<std::string, std::map<std::string, std::string>>;

const char* record_dbs[] = {"executions", "steps",    "graphs", "events", "stops",
                            "counters",   "registry", "agents", "history"};

/// A copy of the fixture home in `dir`.
void copy_fixture(const std::string& dir) {
  fs::copy_file(fixture + "/data.mdb", dir + "/data.mdb");
}

/// Runs `f(txn, dbi of name)` in one LMDB transaction on `home`, with no
/// `store` open on it in this process (LMDB allows one environment per file
/// per process).
template <class F>
void with_lmdb(const std::string& home, bool write, F f) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == 0);
  mdb_env_set_maxdbs(env, 32);
  REQUIRE(mdb_env_open(env, home.c_str(), MDB_NOTLS | (write ? 0 : MDB_RDONLY), 0644) == 0);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, write ? 0 : MDB_RDONLY, &txn) == 0);
  auto dbi_of = [&](const char* name) {
    MDB_dbi dbi;
    REQUIRE(mdb_dbi_open(txn, name, 0, &dbi) == 0);
    return dbi;
  };
  f(txn, dbi_of);
  if (write)
    REQUIRE(mdb_txn_commit(txn) == 0);
  else
    mdb_txn_abort(txn);
  mdb_env_close(env);
}

std::string as_string(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

raw_store dump(const std::string& home) {
  raw_store out;
  with_lmdb(home, false, [&](MDB_txn* txn, auto dbi_of) {
    for (auto name : record_dbs) {
      MDB_cursor* cur;
      REQUIRE(mdb_cursor_open(txn, dbi_of(name), &cur) == 0);
      MDB_val k, v;
      for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
           rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        out[name][as_string(k)] = as_string(v);
      mdb_cursor_close(cur);
    }
  });
  return out;
}

std::string raw_schema(const std::string& home) {
  std::string out;
  with_lmdb(home, false, [&](MDB_txn* txn, auto dbi_of) {
    std::string key = "schema";
    MDB_val k{key.size(), key.data()}, v;
    REQUIRE(mdb_get(txn, dbi_of("meta"), &k, &v) == 0);
    out = as_string(v);
  });
  return out;
}

template <class T>
T get(caf::expected<T> x) {
  INFO("error: " << (x ? std::string{} : message_of(x.error())));
  REQUIRE(x);
  return std::move(*x);
}

/// Everything a record of database `db` holds, as JSON, whatever its encoding.
json canonical(const std::string& db, const std::string& bytes) {
  if (db == "executions") {
    auto x = get(decode_execution(bytes));
    auto j = to_json(x);
    j["pstart"] = x.owner_start;
    return j;
  }
  if (db == "steps") {
    auto x = get(decode_step(bytes));
    auto j = to_json(x);
    j["pstart"] = x.pid_start;
    return j;
  }
  if (db == "graphs")
    return to_json(get(decode_graph(bytes)));
  if (db == "events")
    return to_json(get(decode_event(bytes)));
  if (db == "stops")
    return stop_document(get(decode_stop(bytes)));
  if (db == "counters") {
    auto x = get(decode_counters(bytes));
    return {x.steps, x.spent, x.run_ms, x.budget};
  }
  if (db == "registry")
    return to_json(get(decode_registered_graph(bytes)));
  if (db == "agents") {
    auto x = get(decode_agent(bytes));
    return {agent_document(x), x.owner, to_json(x.graph)};
  }
  auto x = get(decode_history(bytes));
  return {history_document(x), x.owner, x.agent, x.seq};
}

std::map<std::string, std::map<std::string, json>> canonical(const raw_store& raw) {
  std::map<std::string, std::map<std::string, json>> out;
  for (auto& [db, records] : raw)
    for (auto& [key, bytes] : records) {
      INFO(db << " record " << json(key).dump(-1, ' ', false, json::error_handler_t::replace));
      out[db][key] = canonical(db, bytes);
    }
  return out;
}

size_t text_records(const raw_store& raw) {
  size_t n = 0;
  for (auto& [db, records] : raw)
    for (auto& [key, bytes] : records)
      n += is_text_record(bytes) ? 1 : 0;
  return n;
}

size_t all_records(const raw_store& raw) {
  size_t n = 0;
  for (auto& [db, records] : raw)
    n += records.size();
  return n;
}

std::shared_ptr<store> open_store(const std::string& home) {
  store_options opts;
  opts.home = home;
  auto db = store::open(opts);
  INFO("open " << home << ": " << (db ? std::string{} : message_of(db.error())));
  REQUIRE(db);
  return std::move(*db);
}

execution_record by_graph(const std::vector<execution_record>& xs, const std::string& graph,
                          bool root = true) {
  for (auto& x : xs)
    if (x.graph == graph && x.parent_id.empty() == root)
      return x;
  FAIL("no execution of graph " << graph);
  return {};
}

/// Checks what the fixture's runs left, read through the store.
void check_fixture_facts(store& db) {
  execution_filter all;
  all.roots_only = false;
  std::vector<execution_record> xs;
  for (auto& x : get(db.list(all)))
    if (x.graph != "after-migration") // written by the test after migrating
      xs.push_back(x);
  REQUIRE(xs.size() == 6); // nested + its child, failing, slow, two agent runs

  auto nested = by_graph(xs, "nested");
  CHECK(nested.status == execution_status::completed);
  CHECK(nested.inputs == json{{"topic", "héllo wörld"}});
  CHECK(nested.outputs.at("verdict") == json{{"ok", true}, {"n", {1, 2.5, -3}}});
  CHECK(nested.outputs.at("said") == "héllo wörld\n");
  auto children = get(db.children(nested.id));
  REQUIRE(children.size() == 1);
  auto child = get(db.execution(children[0]));
  CHECK(child.status == execution_status::completed);
  CHECK(child.root_id == nested.id);
  CHECK(child.parent_step == "review");
  auto child_steps = get(db.steps(child.id));
  REQUIRE(child_steps.size() == 1);
  CHECK(child_steps[0].result.at("json") == json{{"ok", true}, {"n", {1, 2.5, -3}}});
  auto nested_events = get(db.tree_events(nested.id));
  bool child_event = false;
  for (auto& e : nested_events)
    child_event = child_event || e.execution_id == child.id;
  CHECK(child_event);
  CHECK(nested_events.back().type == event_type::execution_completed);
  CHECK(get(db.graph(nested.id)).document.at("name") == "nested");

  auto failing = by_graph(xs, "failing");
  CHECK(failing.status == execution_status::failed);
  CHECK_FALSE(failing.error.empty());
  auto failing_steps = get(db.steps(failing.id));
  REQUIRE(failing_steps.size() == 2);
  CHECK(failing_steps[0].step == "bad");
  CHECK(failing_steps[0].status == step_status::failed);
  CHECK(failing_steps[1].step == "ok");
  CHECK(failing_steps[1].status == step_status::completed);
  CHECK(failing_steps[1].result == json{{"v", 1}});

  auto slow = by_graph(xs, "slow");
  CHECK(slow.status == execution_status::stopped);
  CHECK_FALSE(slow.reason == step_reason::none);
  // The step that was running is pending again (its successor never
  // started, so it has no record).
  auto slow_steps = get(db.steps(slow.id));
  REQUIRE(slow_steps.size() == 1);
  CHECK(slow_steps[0].step == "nap");
  CHECK(slow_steps[0].status == step_status::pending);
  CHECK(slow_steps[0].reason == step_reason::requested);
  CHECK(slow_steps[0].attempt == 1);
  auto slow_events = get(db.tree_events(slow.id));
  REQUIRE_FALSE(slow_events.empty());
  for (size_t i = 1; i < slow_events.size(); ++i)
    CHECK(slow_events[i].seq > slow_events[i - 1].seq);
  bool stopped_event = false;
  for (auto& e : slow_events)
    stopped_event = stopped_event || e.type == event_type::execution_stopped;
  CHECK(stopped_event);
  CHECK(get(db.pending_stops()).empty());
  for (auto& x : get(db.live()))
    CHECK(x.graph == "after-migration");

  auto agent = get(db.agent("", "echoer"));
  CHECK(agent.graph.document.at("name") == "echoer");
  auto history = get(db.history("", "echoer"));
  REQUIRE(history.size() == 4);
  CHECK(history[0].role == "user");
  CHECK(history[0].content == "hello");
  CHECK(history[1].role == "agent");
  CHECK(history[1].content == "got: hello\n");
  CHECK(history[3].content == "got: again\n");
  CHECK(history[3].seq == 4);
  CHECK(get(db.execution(history[3].execution_id)).agent == "echoer");
}

/// What `canopy ARGS...` prints on `home`.
std::string cli(const std::string& home, std::vector<std::string> args) {
  auto r = test::run_canopy(home, args);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  return r.out;
}

std::string read_text(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Takes out of a document (and its children's) the step fields that came
/// after the fixture's release: each step's `kind` and `needs`,
/// which must be there.
void drop_later_fields(json& root) {
  test::for_each_execution(root, [](json& doc) {
    CHECK(doc["iteration"].is_null()); // none of the fixture's executions is an iteration
    doc.erase("iteration");
    for (auto& kv : doc["steps"].items()) {
      INFO(kv.key());
      CHECK(kv.value()["kind"].is_string());
      CHECK(kv.value()["needs"].is_array());
      kv.value().erase("kind");
      kv.value().erase("needs");
    }
  });
}

/// `show ID --json` as the fixture's release printed it: the same text once
/// the fields added since are taken out.
std::string shown_as_released(const std::string& home, const std::string& id) {
  auto doc = json::parse(cli(home, {"show", id, "--json"}));
  drop_later_fields(doc);
  return doc.dump() + "\n";
}

/// The CLI shows the home exactly as the release that wrote it did (besides
/// the fields added since).
void check_cli_documents(const std::string& home) {
  std::istringstream ids{read_text(fixture + "/ids.txt")};
  std::string id;
  int roots = 0;
  for (; std::getline(ids, id); ++roots) {
    INFO(id);
    CHECK(shown_as_released(home, id) == read_text(fixture + "/show-" + id + ".json"));
    CHECK(cli(home, {"events", id, "--json"}) == read_text(fixture + "/events-" + id + ".json"));
  }
  CHECK(roots == 5);
  auto listed = json::parse(cli(home, {"ls", "--all", "--json"}));
  for (auto& e : listed) {
    CHECK(e["iteration"].is_null());
    e.erase("iteration"); // added since
  }
  CHECK(listed.dump() + "\n" == read_text(fixture + "/ls.json"));
  CHECK(cli(home, {"agent", "history", "echoer", "--json"})
        == read_text(fixture + "/history.json"));
}

} // namespace

// -- tests ------------------------------------------------------------------------

TEST_CASE("a home written by the JSON-record release reads as it is and migrates on its "
          "first write",
          "[persistence][store][migration]") {
  test::temp_dir dir;
  copy_fixture(dir.path);
  REQUIRE(raw_schema(dir.path) == "1");
  auto before = dump(dir.path);
  REQUIRE(all_records(before) > 50);
  REQUIRE(text_records(before) == all_records(before));
  for (auto name : record_dbs)
    if (std::string{name} != "registry" && std::string{name} != "counters") {
      INFO(name);
      CHECK_FALSE(before[name].empty());
    }
  auto expected = canonical(before);

  {
    // Opening only reads: the decoders read the text records.
    auto db = open_store(dir.path);
    CHECK(get(db->schema()) == "1");
    CHECK(db->needs_migration());
    check_fixture_facts(*db);
    // The stop registry: the one request, handled.
    REQUIRE(before["stops"].size() == 1);
    auto stop = get(db->stop(before["stops"].begin()->first));
    execution_filter f;
    f.graph = "slow";
    CHECK(stop.target == get(db->list(f)).at(0).id);
    CHECK(stop.handled);
    CHECK(stop.result == stop_result::stopped);
    CHECK_FALSE(stop.force);
    CHECK(stop.who.rfind("cli:", 0) == 0);
  }
  REQUIRE(raw_schema(dir.path) == "1");
  REQUIRE(text_records(dump(dir.path)) == all_records(before));

  uint64_t last_seq = 0;
  std::string slow_id;
  {
    auto db = open_store(dir.path);
    last_seq = get(db->last_seq());
    execution_filter f;
    f.graph = "slow";
    slow_id = get(db->list(f)).at(0).id;
    // The first write migrates, then writes binary records.
    write_batch b;
    execution_record x;
    x.id = make_execution_id();
    x.graph = "after-migration";
    x.root_id = x.id;
    x.created_at = now_ms();
    b.executions.push_back(x);
    event_record e;
    e.time = now_ms();
    e.type = event_type::execution_queued;
    e.execution_id = x.id;
    e.root_id = x.id;
    b.events.push_back(e);
    event_record on_old;
    on_old.time = now_ms();
    on_old.type = event_type::step_output;
    on_old.execution_id = slow_id;
    on_old.root_id = slow_id;
    on_old.data = {{"after", "migration"}};
    b.events.push_back(on_old);
    REQUIRE_FALSE(db->commit(b));
    CHECK(b.events[0].seq == last_seq + 1);
    CHECK(b.events[1].seq == last_seq + 2);
    CHECK(get(db->schema()) == "4");
    CHECK_FALSE(db->needs_migration());
    check_fixture_facts(*db);
    CHECK(get(db->execution(x.id)).graph == "after-migration");
    auto slow_events = get(db->tree_events(slow_id));
    CHECK(slow_events.back().type == event_type::step_output);
    CHECK(slow_events.back().data == json{{"after", "migration"}});
  }

  // Every record is binary now and holds what the text held.
  CHECK(raw_schema(dir.path) == "4");
  auto after = dump(dir.path);
  CHECK(text_records(after) == 0);
  CHECK(all_records(after) == all_records(before) + 3);
  auto migrated = canonical(after);
  for (auto& [db, records] : expected)
    for (auto& [key, record] : records) {
      INFO(db << " record " << json(key).dump(-1, ' ', false, json::error_handler_t::replace));
      REQUIRE(migrated[db].count(key) == 1);
      CHECK(migrated[db][key] == record);
    }
  // Another open finds nothing left to migrate.
  auto db = open_store(dir.path);
  CHECK_FALSE(db->needs_migration());
}

TEST_CASE("a migration interrupted midway runs again on the next write and leaves every "
          "record binary",
          "[persistence][store][migration]") {
  test::temp_dir dir;
  copy_fixture(dir.path);
  auto expected = canonical(dump(dir.path));
  // What a crash after the first chunks leaves: the marker, and some
  // databases (here executions and half the events) already binary.
  with_lmdb(dir.path, true, [&](MDB_txn* txn, auto dbi_of) {
    std::string key = "schema", marker = "1>2";
    MDB_val k{key.size(), key.data()}, v{marker.size(), marker.data()};
    REQUIRE(mdb_put(txn, dbi_of("meta"), &k, &v, 0) == 0);
    for (auto name : {"executions", "events"}) {
      auto dbi = dbi_of(name);
      MDB_cursor* cur;
      REQUIRE(mdb_cursor_open(txn, dbi, &cur) == 0);
      std::vector<std::pair<std::string, std::string>> rewritten;
      MDB_val ck, cv;
      size_t n = 0;
      for (int rc = mdb_cursor_get(cur, &ck, &cv, MDB_FIRST); rc == 0;
           rc = mdb_cursor_get(cur, &ck, &cv, MDB_NEXT), ++n) {
        auto text = as_string(cv);
        if (std::string{name} == "events" && n % 2 == 1)
          continue;
        rewritten.emplace_back(as_string(ck), std::string{name} == "events"
                                                ? encode(get(decode_event(text)))
                                                : encode(get(decode_execution(text))));
      }
      mdb_cursor_close(cur);
      for (auto& [rk, rv] : rewritten) {
        MDB_val kk{rk.size(), rk.data()}, vv{rv.size(), rv.data()};
        REQUIRE(mdb_put(txn, dbi, &kk, &vv, 0) == 0);
      }
    }
  });
  auto mixed = dump(dir.path);
  REQUIRE(text_records(mixed) > 0);
  REQUIRE(text_records(mixed) < all_records(mixed));
  {
    auto db = open_store(dir.path);
    CHECK(get(db->schema()) == "1>2");
    REQUIRE(db->needs_migration());
    check_fixture_facts(*db);
    REQUIRE_FALSE(db->migrate());
    CHECK(get(db->schema()) == "4");
    check_fixture_facts(*db);
  }
  auto after = dump(dir.path);
  CHECK(text_records(after) == 0);
  CHECK(canonical(after) == expected);
}

TEST_CASE("the CLI shows a migrated home exactly as the release that wrote it did",
          "[persistence][store][migration]") {
  test::temp_dir dir;
  copy_fixture(dir.path);
  // Before any write (read commands do not migrate) ...
  check_cli_documents(dir.path);
  CHECK(raw_schema(dir.path) == "1");
  // ... and after the migration.
  {
    auto db = open_store(dir.path);
    REQUIRE_FALSE(db->migrate());
  }
  CHECK(raw_schema(dir.path) == "4");
  check_cli_documents(dir.path);
}
