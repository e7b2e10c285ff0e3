// Tests of canopy::core::store's agent records, their conversation history and
// their runs, each in its own temporary home.

#include "persistence/store.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/persistence/store_test_helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::store_test;

namespace fs = std::filesystem;

// -- agents ----------------------------------------------------------------------

namespace {

agent_record make_agent(const std::string& owner, const std::string& name,
                        busy_policy on_busy = busy_policy::cancel_previous) {
  agent_record a;
  a.owner = owner;
  a.name = name;
  a.graph.document = json{{"name", "chat-" + name}, {"steps", {{"reply", {{"fn", "echo"}}}}}};
  a.graph.base_dir = "/agents/" + name;
  a.graph.files = json{{"/agents/" + name + "/sub.json", {{"steps", json::object()}}}};
  a.on_busy = on_busy;
  a.created_at = 1700000000100;
  a.updated_at = 1700000000200;
  return a;
}

history_entry make_entry(const std::string& owner, const std::string& agent,
                         const std::string& role, json content,
                         const std::string& execution_id = "x") {
  history_entry h;
  h.owner = owner;
  h.agent = agent;
  h.role = role;
  h.content = std::move(content);
  h.execution_id = execution_id;
  h.time = now_ms();
  return h;
}

execution_record make_agent_run(const std::string& id, const std::string& owner,
                                const std::string& agent,
                                execution_status status = execution_status::running,
                                const std::string& parent = {}, const std::string& root = {}) {
  auto r = make_exec(id, "chat", status, parent, root);
  r.owner = owner;
  r.agent = agent;
  return r;
}

std::vector<uint64_t> seqs_of(const std::vector<history_entry>& xs) {
  std::vector<uint64_t> out;
  for (auto& x : xs)
    out.push_back(x.seq);
  return out;
}

std::vector<std::string> names_of(const std::vector<agent_record>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.owner + "/" + x.name);
  return out;
}

using run_list = std::vector<std::pair<std::string, std::string>>;

} // namespace

TEST_CASE("busy policy names round-trip and an unknown name is rejected",
          "[persistence][store]") {
  for (auto p : {busy_policy::cancel_previous, busy_policy::queue, busy_policy::reject}) {
    busy_policy back = p == busy_policy::reject ? busy_policy::queue : busy_policy::reject;
    REQUIRE(from_string(to_string(p), back));
    CHECK(back == p);
  }
  CHECK(std::string{to_string(busy_policy::cancel_previous)} == "cancel_previous");
  CHECK(std::string{to_string(busy_policy::queue)} == "queue");
  CHECK(std::string{to_string(busy_policy::reject)} == "reject");
  busy_policy x = busy_policy::queue;
  CHECK_FALSE(from_string("cancel", x));
  CHECK_FALSE(from_string("", x));
  CHECK_FALSE(from_string("Queue", x));
  CHECK(x == busy_policy::queue);
}

TEST_CASE("an execution's agent survives encoding and decoding", "[persistence][store]") {
  auto r = make_agent_run("e1", "alice", "helper");
  auto back = execution_from_json(json::parse(encode_json(r)));
  REQUIRE(back);
  CHECK(back->agent == "helper");
  CHECK(back->owner == "alice");
  CHECK(to_json(*back) == to_json(r));
  CHECK(to_json(r).at("agent") == "helper");
  auto decoded = execution_from_json(to_json(r));
  REQUIRE(decoded);
  CHECK(decoded->agent == "helper");
  // Omitted when empty, and absent means empty.
  auto plain = make_exec("e2");
  CHECK(json::parse(encode_json(plain)).count("agent") == 0);
  CHECK(to_json(plain).count("agent") == 0);
  auto plain_back = execution_from_json(json::parse(encode_json(plain)));
  REQUIRE(plain_back);
  CHECK(plain_back->agent.empty());
  // Through the store too.
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(r);
  commit_ok(*db, b);
  CHECK(get(db->execution("e1")).agent == "helper");
}

TEST_CASE("an agent record round-trips through the store", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  auto a = make_agent("alice", "helper", busy_policy::queue);
  a.node = "gpu-1";
  write_batch b;
  b.agents.push_back(a);
  commit_ok(*db, b);
  auto back = get(db->agent("alice", "helper"));
  CHECK(back.node == "gpu-1");
  CHECK(back.owner == "alice");
  CHECK(back.name == "helper");
  CHECK(back.graph.document == a.graph.document);
  CHECK(back.graph.base_dir == a.graph.base_dir);
  CHECK(back.graph.files == a.graph.files);
  CHECK(back.on_busy == busy_policy::queue);
  CHECK(back.created_at == a.created_at);
  CHECK(back.updated_at == a.updated_at);
  SECTION("an unknown agent is not_found, naming it") {
    for (auto [owner, name] : {std::pair<std::string, std::string>{"alice", "other"},
                               {"bob", "helper"}, {"alice", "help"}, {"", "helper"}}) {
      auto missing = db->agent(owner, name);
      REQUIRE_FALSE(missing);
      CHECK(is_errc(missing.error(), persistence_errc::not_found));
      CHECK(message_of(missing.error()).find("'" + name + "'") != std::string::npos);
    }
  }
  SECTION("replacing it keeps created_at as given") {
    auto b2 = make_agent("alice", "helper", busy_policy::reject);
    b2.graph.document["name"] = "chat-v2";
    b2.created_at = a.created_at;
    b2.updated_at = 1700000009999;
    write_batch w;
    w.agents.push_back(b2);
    commit_ok(*db, w);
    auto x = get(db->agent("alice", "helper"));
    CHECK(x.on_busy == busy_policy::reject);
    CHECK(x.graph.document["name"] == "chat-v2");
    CHECK(x.created_at == 1700000000100);
    CHECK(x.updated_at == 1700000009999);
    CHECK(get(db->agents("alice")).size() == 1);
  }
  SECTION("it survives reopening the store") {
    db.reset();
    db = open_store(dir.path);
    CHECK(get(db->agent("alice", "helper")).on_busy == busy_policy::queue);
  }
  SECTION("an agent of the CLI has an empty owner") {
    write_batch w;
    w.agents.push_back(make_agent("", "helper"));
    commit_ok(*db, w);
    CHECK(get(db->agent("", "helper")).owner.empty());
    CHECK(get(db->agent("alice", "helper")).on_busy == busy_policy::queue);
  }
}

TEST_CASE("agents() lists one owner's agents or every owner's, by owner and name",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  CHECK(get(db->agents()).empty());
  CHECK(get(db->agents("alice")).empty());
  write_batch b;
  // Written out of order: the store sorts. "al" and "alice" are different owners.
  for (auto [owner, name] : {std::pair<std::string, std::string>{"bob", "z"},
                             {"alice", "b"}, {"al", "x"}, {"alice", "a"}, {"", "cli"},
                             {"alice", "ab"}})
    b.agents.push_back(make_agent(owner, name));
  commit_ok(*db, b);
  CHECK(names_of(get(db->agents("alice")))
        == std::vector<std::string>{"alice/a", "alice/ab", "alice/b"});
  CHECK(names_of(get(db->agents("al"))) == std::vector<std::string>{"al/x"});
  CHECK(names_of(get(db->agents("bob"))) == std::vector<std::string>{"bob/z"});
  CHECK(names_of(get(db->agents(std::string{}))) == std::vector<std::string>{"/cli"});
  CHECK(get(db->agents("carol")).empty());
  CHECK(names_of(get(db->agents()))
        == std::vector<std::string>{"/cli", "al/x", "alice/a", "alice/ab", "alice/b", "bob/z"});
}

TEST_CASE("history entries get seqs from 1 per agent in commit order",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  CHECK(get(db->history("alice", "helper")).empty());
  write_batch b1;
  b1.history.push_back(make_entry("alice", "helper", "user", "hello", "r1"));
  commit_ok(*db, b1);
  CHECK(b1.history[0].seq == 1);
  // Several in one batch, mixed with other agents and owners.
  write_batch b2;
  b2.history.push_back(make_entry("alice", "helper", "agent", json{{"text", "hi"}}, "r1"));
  b2.history.push_back(make_entry("alice", "other", "user", "q", "r2"));
  b2.history.push_back(make_entry("alice", "helper", "user", "again", "r3"));
  b2.history.push_back(make_entry("bob", "helper", "user", "bob's", "r4"));
  b2.history.push_back(make_entry("alice", "helpe", "user", "prefix", "r5"));
  b2.history.push_back(make_entry("alice", "helperx", "user", "extended", "r6"));
  commit_ok(*db, b2);
  CHECK(b2.history[0].seq == 2);
  CHECK(b2.history[1].seq == 1);
  CHECK(b2.history[2].seq == 3);
  CHECK(b2.history[3].seq == 1);
  CHECK(b2.history[4].seq == 1);
  CHECK(b2.history[5].seq == 1);
  // A nested batch continues the count.
  write_batch b3, inner;
  b3.history.push_back(make_entry("alice", "helper", "agent", nullptr, "r3"));
  inner.history.push_back(make_entry("alice", "helper", "user", json::array({1, 2}), "r7"));
  b3.append(std::move(inner));
  commit_ok(*db, b3);
  CHECK(b3.history[0].seq == 4);
  REQUIRE(b3.nested.size() == 1);
  CHECK(b3.nested[0].history[0].seq == 5);

  auto h = get(db->history("alice", "helper"));
  CHECK(seqs_of(h) == std::vector<uint64_t>{1, 2, 3, 4, 5});
  REQUIRE(h.size() == 5);
  CHECK(h[0].role == "user");
  CHECK(h[0].content == "hello");
  CHECK(h[0].execution_id == "r1");
  CHECK(h[0].owner == "alice");
  CHECK(h[0].agent == "helper");
  CHECK(h[0].time == b1.history[0].time);
  CHECK(h[1].role == "agent");
  CHECK(h[1].content == json{{"text", "hi"}});
  CHECK(h[3].content.is_null());
  CHECK(h[4].content == json::array({1, 2}));
  CHECK(seqs_of(get(db->history("alice", "other"))) == std::vector<uint64_t>{1});
  CHECK(get(db->history("bob", "helper")).at(0).content == "bob's");
  CHECK(get(db->history("alice", "helpe")).at(0).content == "prefix");
  CHECK(get(db->history("alice", "helperx")).at(0).content == "extended");
  CHECK(get(db->history("carol", "helper")).empty());
  CHECK(get(db->history("alice", "")).empty());

  SECTION("after and limit select a window") {
    CHECK(seqs_of(get(db->history("alice", "helper", 2))) == std::vector<uint64_t>{3, 4, 5});
    CHECK(seqs_of(get(db->history("alice", "helper", 0, 2))) == std::vector<uint64_t>{1, 2});
    CHECK(seqs_of(get(db->history("alice", "helper", 1, 3)))
          == std::vector<uint64_t>{2, 3, 4});
    CHECK(get(db->history("alice", "helper", 5)).empty());
    CHECK(get(db->history("alice", "helper", 99)).empty());
    CHECK(get(db->history("alice", "helper", ~uint64_t{0})).empty());
  }
  SECTION("they survive reopening the store and the count goes on") {
    db.reset();
    db = open_store(dir.path);
    CHECK(seqs_of(get(db->history("alice", "helper"))) == std::vector<uint64_t>{1, 2, 3, 4, 5});
    write_batch b4;
    b4.history.push_back(make_entry("alice", "helper", "user", "later"));
    b4.history.push_back(make_entry("alice", "other", "user", "later"));
    commit_ok(*db, b4);
    CHECK(b4.history[0].seq == 6);
    CHECK(b4.history[1].seq == 2);
    CHECK(get(db->history("alice", "helper", 5)).at(0).content == "later");
  }
}

TEST_CASE("history seqs keep counting past 255 entries", "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  for (int i = 0; i < 30; ++i) {
    write_batch b;
    for (int j = 0; j < 10; ++j)
      b.history.push_back(make_entry("o", "a", "user", json{{"i", i * 10 + j}}));
    commit_ok(*db, b);
    for (int j = 0; j < 10; ++j)
      CHECK(b.history[static_cast<size_t>(j)].seq == static_cast<uint64_t>(i * 10 + j + 1));
  }
  auto h = get(db->history("o", "a"));
  REQUIRE(h.size() == 300);
  for (size_t i = 0; i < h.size(); ++i) {
    CHECK(h[i].seq == i + 1);
    CHECK(h[i].content["i"] == static_cast<int>(i));
  }
  CHECK(seqs_of(get(db->history("o", "a", 254, 3))) == std::vector<uint64_t>{255, 256, 257});
}

TEST_CASE("agent_runs indexes the agent's executions that are not terminal",
          "[persistence][store]") {
  test::temp_dir dir;
  auto db = open_store(dir.path);
  write_batch b;
  b.executions.push_back(make_agent_run("r1", "alice", "helper", execution_status::queued));
  // A run started by an `agent` step: a child, with its tree's root id.
  b.executions.push_back(
    make_agent_run("r2", "alice", "helper", execution_status::running, "p", "root0"));
  b.executions.push_back(make_agent_run("r3", "alice", "other"));
  b.executions.push_back(make_agent_run("r4", "bob", "helper"));
  b.executions.push_back(make_agent_run("r5", "alice", "helperx"));
  b.executions.push_back(make_agent_run("r6", "alice", "helper", execution_status::completed));
  // Executions without an agent never appear.
  auto plain = make_exec("r7", "chat", execution_status::running);
  plain.owner = "alice";
  b.executions.push_back(plain);
  commit_ok(*db, b);
  CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r1", "r1"}, {"r2", "root0"}});
  CHECK(get(db->agent_runs("alice", "other")) == run_list{{"r3", "r3"}});
  CHECK(get(db->agent_runs("bob", "helper")) == run_list{{"r4", "r4"}});
  CHECK(get(db->agent_runs("alice", "helperx")) == run_list{{"r5", "r5"}});
  CHECK(get(db->agent_runs("alice", "help")).empty());
  CHECK(get(db->agent_runs("alice", "")).empty());
  CHECK(get(db->agent_runs("", "helper")).empty());

  SECTION("a run disappears once it is written terminal") {
    for (auto status : {execution_status::stopping, execution_status::running}) {
      write_batch w;
      w.executions.push_back(make_agent_run("r1", "alice", "helper", status));
      commit_ok(*db, w);
      CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r1", "r1"}, {"r2", "root0"}});
    }
    write_batch w;
    w.executions.push_back(make_agent_run("r1", "alice", "helper", execution_status::stopped));
    w.executions.push_back(
      make_agent_run("r2", "alice", "helper", execution_status::failed, "p", "root0"));
    w.executions.push_back(make_agent_run("r3", "alice", "other", execution_status::completed));
    commit_ok(*db, w);
    CHECK(get(db->agent_runs("alice", "helper")).empty());
    CHECK(get(db->agent_runs("alice", "other")).empty());
    CHECK(get(db->agent_runs("bob", "helper")) == run_list{{"r4", "r4"}});
    // Writing a terminal record again is harmless; a resumed run is back.
    write_batch again;
    again.executions.push_back(
      make_agent_run("r1", "alice", "helper", execution_status::stopped));
    again.executions.push_back(
      make_agent_run("r3", "alice", "other", execution_status::running));
    commit_ok(*db, again);
    CHECK(get(db->agent_runs("alice", "helper")).empty());
    CHECK(get(db->agent_runs("alice", "other")) == run_list{{"r3", "r3"}});
  }
  SECTION("the last write of a batch decides") {
    write_batch w;
    w.executions.push_back(make_agent_run("r8", "alice", "helper", execution_status::queued));
    w.executions.push_back(make_agent_run("r8", "alice", "helper", execution_status::completed));
    w.executions.push_back(make_agent_run("r9", "alice", "helper", execution_status::completed));
    w.executions.push_back(make_agent_run("r9", "alice", "helper", execution_status::running));
    commit_ok(*db, w);
    CHECK(get(db->agent_runs("alice", "helper"))
          == run_list{{"r1", "r1"}, {"r2", "root0"}, {"r9", "r9"}});
  }
  SECTION("deleted_executions removes the index entry") {
    write_batch w;
    w.deleted_executions.push_back("r1");
    w.deleted_executions.push_back("r4");
    w.deleted_executions.push_back("r7");
    commit_ok(*db, w);
    CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r2", "root0"}});
    CHECK(get(db->agent_runs("bob", "helper")).empty());
    CHECK(get(db->agent_runs("alice", "other")) == run_list{{"r3", "r3"}});
  }
  SECTION("the index survives reopening the store") {
    db.reset();
    db = open_store(dir.path);
    CHECK(get(db->agent_runs("alice", "helper")) == run_list{{"r1", "r1"}, {"r2", "root0"}});
  }
}

TEST_CASE("agent and history records decode or are corrupt_record",
          "[persistence][store]") {
  auto a = make_agent("alice", "helper", busy_policy::reject);
  auto back = agent_from_json(json::parse(encode_json(a)));
  REQUIRE(back);
  CHECK(back->name == "helper");
  CHECK(back->on_busy == busy_policy::reject);
  CHECK(back->graph.files == a.graph.files);
  auto h = make_entry("alice", "helper", "agent", json{{"answer", 42}}, "r1");
  h.seq = 7;
  auto hb = history_from_json(json::parse(encode_json(h)));
  REQUIRE(hb);
  CHECK(hb->seq == 7);
  CHECK(hb->content == json{{"answer", 42}});
  CHECK(hb->execution_id == "r1");
  CHECK(hb->time == h.time);
  // Invalid UTF-8 never throws while encoding, and still decodes.
  h.content = std::string{"bad \xff byte"};
  h.role = std::string{"r\xfe"};
  auto text = encode_json(h);
  CHECK(history_from_json(json::parse(text)));
  a.name = std::string{"n\xc3"};
  CHECK(agent_from_json(json::parse(encode_json(a))));

  auto good = json::parse(encode_json(make_agent("alice", "helper")));
  for (auto mutate : std::vector<std::function<void(json&)>>{
         [](json& j) { j.erase("name"); }, [](json& j) { j["name"] = 7; },
         [](json& j) { j.erase("graph"); }, [](json& j) { j["graph"] = "g"; },
         [](json& j) { j["on_busy"] = "sometimes"; }, [](json& j) { j.erase("on_busy"); },
         [](json& j) { j["created"] = "yesterday"; }, [](json& j) { j = json::array(); }}) {
    auto j = good;
    mutate(j);
    INFO(j.dump());
    auto bad = agent_from_json(j);
    REQUIRE_FALSE(bad);
    CHECK(is_errc(bad.error(), persistence_errc::corrupt_record));
  }
  auto good_h = json::parse(encode_json(make_entry("o", "a", "user", "m")));
  for (auto mutate : std::vector<std::function<void(json&)>>{
         [](json& j) { j.erase("agent"); }, [](json& j) { j.erase("seq"); },
         [](json& j) { j["seq"] = "one"; }, [](json& j) { j.erase("role"); },
         [](json& j) { j.erase("content"); }, [](json& j) { j.erase("time"); }}) {
    auto j = good_h;
    mutate(j);
    INFO(j.dump());
    auto bad = history_from_json(j);
    REQUIRE_FALSE(bad);
    CHECK(is_errc(bad.error(), persistence_errc::corrupt_record));
  }
  auto discarded = history_from_json(json::parse("{not json", nullptr, false));
  REQUIRE_FALSE(discarded);
  CHECK(is_errc(discarded.error(), persistence_errc::corrupt_record));
}

TEST_CASE("history and agent documents render as SPEC section 9 describes",
          "[persistence][store]") {
  auto h = make_entry("alice", "helper", "agent", json{{"text", "hi"}}, "r1");
  h.seq = 3;
  h.time = 1700000000042;
  auto doc = history_document(h);
  CHECK(doc == json{{"role", "agent"},
                    {"content", {{"text", "hi"}}},
                    {"execution_id", "r1"},
                    {"time", to_rfc3339(1700000000042)}});
  CHECK(doc["time"].get<std::string>().find(".042Z") != std::string::npos);
  auto a = make_agent("alice", "helper", busy_policy::queue);
  auto ad = agent_document(a);
  CHECK(ad == json{{"name", "helper"},
                   {"graph", "chat-helper"},
                   {"on_busy", "queue"},
                   {"node", nullptr},
                   {"created_at", to_rfc3339(a.created_at)},
                   {"updated_at", to_rfc3339(a.updated_at)}});
  a.node = "gpu-1";
  CHECK(agent_document(a)["node"] == "gpu-1");
  a.node.clear();
  // A document without a name (or not even an object) renders a null graph.
  a.graph.document.erase("name");
  CHECK(agent_document(a)["graph"].is_null());
  a.graph.document = json::array();
  CHECK(agent_document(a)["graph"].is_null());
  // Invalid UTF-8 in a name does not throw when the document is dumped.
  a.name = std::string{"bad\xff"};
  CHECK_FALSE(dump_json(agent_document(a)).empty());
}
