// Tests of the stored record encoding (records.hpp): the binary codec of
// every record type, its schema evolution rules, and that the decoders still
// read the schema-1 JSON text.

#include "persistence/records.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "persistence/error.hpp"

using namespace canopy::core;

namespace {

// -- helpers -------------------------------------------------------------------

/// A string with bytes that are not UTF-8: a lone continuation byte, a
/// truncated sequence, an overlong and a surrogate.
const std::string bad_utf8 = std::string{"a\x80"} + "b\xc3" + "c\xc0\xaf" + "d\xed\xa0\x80";

execution_record full_execution() {
  execution_record x;
  x.id = "01jexec";
  x.graph = "g";
  x.status = execution_status::stopped;
  x.reason = step_reason::requested;
  x.error = "boom";
  x.parent_id = "01jparent";
  x.root_id = "01jroot";
  x.depth = 2;
  x.parent_step = "review";
  x.inputs = {{"topic", "héllo"}, {"n", -42}, {"list", {1, 2.5, true, nullptr}}};
  x.outputs = {{"verdict", {{"ok", true}}}};
  x.created_at = 1700000000000;
  x.started_at = 1700000000001;
  x.ended_at = 1700000000002;
  x.owner_pid = 4242;
  x.owner_start = 0xfedcba9876543210ull;
  x.owner = "alice";
  x.graph_version = 3;
  x.agent = "helper";
  x.node = "worker-1";
  return x;
}

step_record full_step() {
  step_record x;
  x.execution_id = "01jexec";
  x.step = "s1";
  x.status = step_status::failed;
  x.attempt = 3;
  x.result = {{"stdout", "out\n"}, {"exit_code", 3}};
  x.error = "exit code 3";
  x.reason = step_reason::node_lost;
  x.node = "worker-2";
  x.child_id = "01jchild";
  x.pid = 777;
  x.pid_start = 123456789;
  x.started_at = 5;
  x.ended_at = 6;
  return x;
}

event_record full_event() {
  event_record x;
  x.seq = 1ull << 40;
  x.time = 1700000000123;
  x.type = event_type::step_completed;
  x.execution_id = "01jexec";
  x.root_id = "01jroot";
  x.parent_id = "01jparent";
  x.step = "s1";
  x.status = step_status::completed;
  x.reason = step_reason::retry;
  x.data = {{"result", {{"v", 1}}}};
  return x;
}

stored_graph graph_of(json doc) {
  stored_graph g;
  g.document = std::move(doc);
  g.base_dir = "/srv/graphs";
  g.files = {{"/srv/graphs/sub.json", {{"steps", json::object()}}}};
  return g;
}

agent_record full_agent() {
  agent_record x;
  x.owner = "alice";
  x.name = "helper";
  x.graph = graph_of({{"name", "echoer"}, {"steps", {{"x", {{"fn", "noop"}}}}}});
  x.on_busy = busy_policy::reject;
  x.node = "worker-1";
  x.created_at = 10;
  x.updated_at = 11;
  return x;
}

history_entry full_history() {
  history_entry x;
  x.owner = "alice";
  x.agent = "helper";
  x.seq = 7;
  x.role = "agent";
  x.content = {{"answer", 42}};
  x.execution_id = "01jexec";
  x.time = 12;
  return x;
}

template <class T>
T ok(caf::expected<T> x) {
  INFO((x ? std::string{} : message_of(x.error())));
  REQUIRE(x);
  return std::move(*x);
}

bool is_errc(const caf::error& err, persistence_errc code) {
  return err && err.category() == persistence_category
         && err.code() == static_cast<uint8_t>(code);
}

template <class T>
void check_corrupt(const caf::expected<T>& x) {
  REQUIRE_FALSE(x);
  CHECK(is_errc(x.error(), persistence_errc::corrupt_record));
}

/// The record as a standard MessagePack document.
json as_document(const std::string& bytes) {
  return json::from_msgpack(bytes);
}

} // namespace

// -- round trips -----------------------------------------------------------------

TEST_CASE("every field of an execution survives the binary codec", "[persistence][codec]") {
  auto x = full_execution();
  auto bytes = encode(x);
  CHECK_FALSE(is_text_record(bytes));
  auto back = ok(decode_execution(bytes));
  CHECK(to_json(back) == to_json(x));
  CHECK(back.owner_start == x.owner_start);
  CHECK(back.status == execution_status::stopped);
}

TEST_CASE("an execution with only its required fields decodes with defaults",
          "[persistence][codec]") {
  execution_record x;
  x.id = "e";
  x.graph = "g";
  auto back = ok(decode_execution(encode(x)));
  CHECK(back.id == "e");
  CHECK(back.status == execution_status::queued);
  CHECK(back.inputs == json::object());
  CHECK(back.outputs.is_null());
  CHECK(back.parent_id.empty());
  CHECK(back.owner_start == 0);
  CHECK(back.node.empty());
  // Empty fields are not written at all.
  auto doc = as_document(encode(x));
  CHECK(doc.count("parent") == 0);
  CHECK(doc.count("outputs") == 0);
  CHECK(doc.count("agent") == 0);
}

TEST_CASE("every field of a step survives the binary codec", "[persistence][codec]") {
  auto x = full_step();
  auto back = ok(decode_step(encode(x)));
  CHECK(to_json(back) == to_json(x));
  CHECK(back.pid_start == x.pid_start);
  step_record minimal;
  minimal.execution_id = "e";
  minimal.step = "s";
  auto m = ok(decode_step(encode(minimal)));
  CHECK(m.node == "local");
  CHECK(m.result.is_null());
  CHECK(m.error.is_null());
  CHECK(m.attempt == 0);
}

TEST_CASE("every field of an event survives the binary codec", "[persistence][codec]") {
  auto x = full_event();
  auto back = ok(decode_event(encode(x)));
  CHECK(to_json(back) == to_json(x));
  CHECK(ok(decode_event_execution(encode(x))) == "01jexec");
  event_record minimal;
  minimal.seq = 1;
  minimal.type = event_type::execution_queued;
  minimal.execution_id = "e";
  auto m = ok(decode_event(encode(minimal)));
  CHECK(m.data.is_null());
  CHECK(m.parent_id.empty());
  CHECK(m.time == 0);
}

TEST_CASE("stop requests, counters, graphs, registered graphs, agents and history entries "
          "survive the binary codec",
          "[persistence][codec]") {
  stop_record s{"s1", "e1", true, true, stop_result::stopped, 100, 200, "user:alice"};
  auto sb = ok(decode_stop(encode(s)));
  CHECK(stop_document(sb) == stop_document(s));

  tree_counters c{12345678901ull, 0.125, 987, 2.5};
  auto cb = ok(decode_counters(encode(c)));
  CHECK(cb.steps == c.steps);
  CHECK(cb.spent == c.spent);
  CHECK(cb.run_ms == c.run_ms);
  CHECK(cb.budget == c.budget);

  auto g = graph_of({{"steps", {{"a", {{"fn", "echo"}}}}}});
  CHECK(to_json(ok(decode_graph(encode(g)))) == to_json(g));
  std::map<std::string, json> files{{"/srv/graphs/sub.json", {{"steps", json::object()}}}};
  CHECK(encode_graph(g.document, g.base_dir, files) == encode(g));

  registered_graph r{"alice", "review", 4, {{"name", "review"}, {"steps", json::object()}}, 99};
  CHECK(to_json(ok(decode_registered_graph(encode(r)))) == to_json(r));

  auto a = full_agent();
  auto ab = ok(decode_agent(encode(a)));
  CHECK(agent_document(ab) == agent_document(a));
  CHECK(to_json(ab.graph) == to_json(a.graph));
  CHECK(ab.owner == "alice");

  auto h = full_history();
  auto hb = ok(decode_history(encode(h)));
  CHECK(history_document(hb) == history_document(h));
  CHECK(hb.seq == 7);
  CHECK(hb.owner == "alice");
  h.content = nullptr; // a null message is still a message
  CHECK(ok(decode_history(encode(h))).content.is_null());
}

// -- payloads ---------------------------------------------------------------------

TEST_CASE("nested JSON payloads keep their structure and number types",
          "[persistence][codec]") {
  json deep = "bottom";
  for (int i = 0; i < 200; ++i)
    deep = json{{"level", i}, {"inner", json::array({deep, i % 2 == 0})}};
  auto x = full_event();
  x.data = {{"deep", deep},
            {"numbers", {0, 127, 128, 255, 256, 65535, 65536, 4294967295u, 4294967296u,
                         18446744073709551615ull, -1, -32, -33, -128, -129, -32768, -32769,
                         -2147483648ll, -2147483649ll, INT64_MIN, 0.1, -2.5e300, 1e-300}},
            {"empty", {{"object", json::object()}, {"array", json::array()}, {"string", ""}}},
            {"unicode", "żółw 🐢 \t\n\"quoted\""}};
  auto back = ok(decode_event(encode(x)));
  CHECK(back.data == x.data);
  CHECK(back.data.dump() == x.data.dump());
}

TEST_CASE("large payloads round-trip through the binary codec", "[persistence][codec]") {
  auto x = full_step();
  json big = json::array();
  for (int i = 0; i < 100000; ++i)
    big.push_back({{"i", i}, {"s", "item " + std::to_string(i)}});
  x.result = {{"stdout", std::string(3u << 20, 'x')}, {"items", big}};
  auto bytes = encode(x);
  CHECK(bytes.size() > (3u << 20));
  auto back = ok(decode_step(bytes));
  CHECK(back.result == x.result);
}

TEST_CASE("invalid UTF-8 anywhere becomes U+FFFD and every record still decodes and dumps",
          "[persistence][codec]") {
  auto x = full_execution();
  x.id = "e" + bad_utf8;
  x.error = bad_utf8;
  x.inputs = {{"text", bad_utf8}, {bad_utf8, {bad_utf8, 1}}};
  auto back = ok(decode_execution(encode(x)));
  CHECK_NOTHROW(to_json(back).dump());
  CHECK(back.error == "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd"
                       "d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(back.inputs.at("text") == back.error);

  auto e = full_event();
  e.step = bad_utf8;
  e.data = {{"line", bad_utf8}};
  CHECK_NOTHROW(event_document(ok(decode_event(encode(e)))).dump());

  auto h = full_history();
  h.role = bad_utf8;
  h.content = bad_utf8;
  CHECK_NOTHROW(history_document(ok(decode_history(encode(h)))).dump());

  auto a = full_agent();
  a.name = bad_utf8;
  a.graph.files = {{bad_utf8, bad_utf8}};
  auto ab = ok(decode_agent(encode(a)));
  CHECK_NOTHROW(to_json(ab.graph).dump());
  CHECK_NOTHROW(agent_document(ab).dump());

  // Valid multi-byte text is kept as it is.
  x.error = "żółw 🐢";
  CHECK(ok(decode_execution(encode(x))).error == "żółw 🐢");
}

// -- schema evolution --------------------------------------------------------------

TEST_CASE("a binary record is a MessagePack map whose unknown keys are ignored",
          "[persistence][codec]") {
  auto x = full_execution();
  auto doc = as_document(encode(x));
  REQUIRE(doc.is_object());
  CHECK(doc.at("id") == "01jexec");
  CHECK(doc.at("status") == static_cast<int>(execution_status::stopped));
  // A field added by a later version, of any type, is skipped.
  doc["future"] = {{"nested", {1, 2, {{"deeper", "x"}}}}, {"bin", json::binary({1, 2, 3})}};
  doc["zz"] = 1.5;
  auto bytes = json::to_msgpack(doc);
  auto back = ok(decode_execution(std::string{bytes.begin(), bytes.end()}));
  CHECK(to_json(back) == to_json(x));
}

TEST_CASE("a binary record missing a required field, truncated or out of range is corrupt",
          "[persistence][codec]") {
  auto exec_doc = as_document(encode(full_execution()));
  for (auto key : {"id", "graph", "status"}) {
    auto doc = exec_doc;
    doc.erase(key);
    auto bytes = json::to_msgpack(doc);
    INFO(key);
    check_corrupt(decode_execution(std::string{bytes.begin(), bytes.end()}));
  }
  auto doc = exec_doc;
  doc["status"] = 6; // past the last status
  auto out_of_range = json::to_msgpack(doc);
  check_corrupt(decode_execution(std::string{out_of_range.begin(), out_of_range.end()}));
  doc["status"] = "running"; // a name is not an index
  auto wrong_type = json::to_msgpack(doc);
  check_corrupt(decode_execution(std::string{wrong_type.begin(), wrong_type.end()}));

  auto step = encode(full_step());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{3}, step.size() / 2, step.size() - 1})
    check_corrupt(decode_step(step.substr(0, cut)));
  check_corrupt(decode_event(std::string{"\xc1"}));
  check_corrupt(decode_event_execution(std::string{"\x80"}));
  auto agent_doc = as_document(encode(full_agent()));
  agent_doc["on_busy"] = 3;
  auto bad_agent = json::to_msgpack(agent_doc);
  check_corrupt(decode_agent(std::string{bad_agent.begin(), bad_agent.end()}));
  // Nesting deeper than the decoder's bound is refused, not a stack overflow.
  std::string rec = std::string{"\x81\xa4"} + "data" + std::string(2000, '\x91') + "\xc0";
  check_corrupt(decode_event(rec));
}

// -- the schema-1 text ---------------------------------------------------------------

TEST_CASE("the decoders read the schema-1 JSON text of every record type",
          "[persistence][codec]") {
  auto x = full_execution();
  CHECK(is_text_record(encode_json(x)));
  CHECK(to_json(ok(decode_execution(encode_json(x)))) == to_json(x));
  CHECK(to_json(ok(decode_step(encode_json(full_step())))) == to_json(full_step()));
  CHECK(to_json(ok(decode_event(encode_json(full_event())))) == to_json(full_event()));
  CHECK(ok(decode_event_execution(encode_json(full_event()))) == "01jexec");
  auto g = graph_of({{"steps", json::object()}});
  CHECK(to_json(ok(decode_graph(encode_json(g)))) == to_json(g));
  stop_record s{"s1", "e1", false, true, stop_result::no_execution, 1, 2, "cli"};
  CHECK(stop_document(ok(decode_stop(encode_json(s)))) == stop_document(s));
  tree_counters c{3, 1.5, 7, 0};
  CHECK(ok(decode_counters(encode_json(c))).run_ms == 7);
  registered_graph r{"o", "n", 2, {{"steps", json::object()}}, 5};
  CHECK(to_json(ok(decode_registered_graph(encode_json(r)))) == to_json(r));
  CHECK(agent_document(ok(decode_agent(encode_json(full_agent()))))
        == agent_document(full_agent()));
  CHECK(history_document(ok(decode_history(encode_json(full_history()))))
        == history_document(full_history()));
  // Broken text is corrupt, as before.
  check_corrupt(decode_execution(std::string{"{not json"}));
  check_corrupt(decode_event_execution(std::string{"{\"seq\":1}"}));
}

// -- robustness --------------------------------------------------------------------

TEST_CASE("damaged binary records decode or fail as corrupt, never crash or throw",
          "[persistence][codec]") {
  auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng{seed};
  auto e = full_event();
  e.data = {{"list", {1, -2, 3.5, "s", nullptr, true}}, {"o", {{"k", "v"}}}};
  const std::string samples[] = {encode(full_execution()), encode(full_step()), encode(e),
                                 encode(full_agent()), encode(full_history())};
  int decoded = 0, corrupt = 0;
  for (int i = 0; i < 20000; ++i) {
    auto bytes = samples[static_cast<size_t>(i) % 5];
    // Flip, overwrite, cut or duplicate a few bytes.
    for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n) {
      auto at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8))); break;
        case 1: bytes[at] = static_cast<char>(rng()); break;
        case 2: bytes.resize(at + 1); break;
        default: bytes.insert(at, bytes.substr(at, rng() % 8)); break;
      }
    }
    auto check = [&](auto x, auto render) {
      if (x) {
        ++decoded;
        CHECK_NOTHROW(render(*x).dump());
      } else {
        ++corrupt;
        CHECK(is_errc(x.error(), persistence_errc::corrupt_record));
      }
    };
    check(decode_execution(bytes), [](auto& x) { return to_json(x); });
    check(decode_step(bytes), [](auto& x) { return to_json(x); });
    check(decode_event(bytes), [](auto& x) { return event_document(x); });
    check(decode_agent(bytes), [](auto& x) { return to_json(x.graph); });
    check(decode_history(bytes), [](auto& x) { return history_document(x); });
  }
  CHECK(decoded > 0);
  CHECK(corrupt > 0);
}
