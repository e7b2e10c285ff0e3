// `llm` steps through the real binary against the model provider double
// (tests/fake_llm): `canopy run --config` reads the providers, the answer
// streams into the event log as it comes and completes the step with its
// content, parsed JSON and usage; a stop during the stream closes the
// connection to the provider within 100 ms of the halt and a resume calls
// the model again for that step only; provider errors and configuration
// errors are named; the API key appears in nothing a user can read.

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "tests/fake_llm/fake_llm.hpp"
#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/server_test_helpers.hpp"

using namespace canopy::core::test;
using namespace canopy::core::test::server_test;
using namespace std::chrono_literals;

namespace {

const std::string key = "sk-canopy-test-5f2b9e";

/// A config file whose provider `default` is `llm` (its key from the environment).
std::string config_for(const temp_dir& dir, const fake_llm& llm) {
  return dir.write("node.json", json{{"providers",
                                      {{"default",
                                        {{"base_url", llm.base_url()},
                                         {"api_key_env", "CANOPY_TEST_KEY"},
                                         {"max_retries", 1}}}}}}
                                  .dump());
}

/// intro → draft (an llm step asking for JSON) → publish.
std::string graph_file(const temp_dir& dir) {
  return dir.write("brief.json", R"({
    "name": "brief", "inputs": ["topic"],
    "steps": {
      "intro": {"fn": "echo", "with": {"topic": "${inputs.topic}"}},
      "draft": {"needs": ["intro"], "llm": {
        "model": "fake-7b",
        "messages": [{"role": "system", "content": "You write briefs as JSON."},
                     {"role": "user", "content": "Topic: ${steps.intro.topic}"}],
        "temperature": 0.2, "max_tokens": 200,
        "response_format": {"type": "json_object"}}},
      "publish": {"needs": ["draft"], "fn": "echo", "with": {"title": "${steps.draft.json.title}"}}
    },
    "outputs": {"title": "${steps.publish.title}"}
  })");
}

proc_result run_with_key(const std::string& home, const std::vector<std::string>& args) {
  return run_canopy_env(home, args, {{"CANOPY_TEST_KEY", key}});
}

json show_doc(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

/// The event log of `id` (checked by the helper).
std::vector<json> events_of(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"events", id, "--json"});
  REQUIRE(r.exit_code == 0);
  return parse_event_lines(r.out);
}

std::string file_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

} // namespace

TEST_CASE("an llm step streams its answer into the event log and completes with its content, "
          "JSON and usage",
          "[integration][cli][llm]") {
  temp_dir home;
  fake_llm llm{json::array({{{"content", R"({"title": "Q3 in brief"})"},
                             {"chunks", 3},
                             {"usage", {{"prompt_tokens", 21}, {"completion_tokens", 7}}}}})};
  auto r = run_with_key(home.path, {"run", graph_file(home), "--config", config_for(home, llm),
                              "--input", "topic=Q3", "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  CHECK(r.out_json()["outputs"]["title"] == "Q3 in brief");
  auto doc = show_doc(home.path, id);
  auto& result = doc["steps"]["draft"]["result"];
  CHECK(result["content"] == R"({"title": "Q3 in brief"})");
  CHECK(result["json"] == json{{"title", "Q3 in brief"}});
  CHECK(result["usage"] == json{{"prompt_tokens", 21}, {"completion_tokens", 7}});
  CHECK(result["finish_reason"] == "stop");
  CHECK(result["tool_calls"] == json::array());

  // What the provider got: the messages resolved, the settings, the key.
  auto requests = llm.events("request");
  REQUIRE(requests.size() == 1);
  auto& body = requests[0]["body"];
  CHECK(body["model"] == "fake-7b");
  CHECK(body["messages"][1]["content"] == "Topic: Q3");
  CHECK(body["temperature"] == 0.2);
  CHECK(body["max_tokens"] == 200);
  CHECK(body["response_format"] == json{{"type", "json_object"}});
  CHECK(body["stream"] == true);
  CHECK(requests[0]["authorization"] == "Bearer " + key);

  // The text as it streamed: step.output events of stream "model".
  std::string streamed;
  for (auto& e : events_of(home.path, id))
    if (e["type"] == "step.output" && e["step"] == "draft") {
      CHECK(e["data"]["stream"] == "model");
      streamed += e["data"]["text"].get<std::string>();
    }
  CHECK(streamed == R"({"title": "Q3 in brief"})");
  auto logs = run_canopy(home.path, {"logs", id, "draft"});
  CHECK_THAT(logs.out, Catch::Contains("Q3 in brief"));

  // The key is in nothing a user reads: records, events, show, logs, the store's file.
  CHECK(r.out.find(key) == std::string::npos);
  CHECK(r.err.find(key) == std::string::npos);
  CHECK(show_doc(home.path, id).dump().find(key) == std::string::npos);
  CHECK(run_canopy(home.path, {"events", id, "--json"}).out.find(key) == std::string::npos);
  CHECK(file_text(home.path + "/data.mdb").find(key) == std::string::npos);
}

TEST_CASE("a stop during the stream closes the model's connection within 100 ms, and resume "
          "calls the model again for that step only",
          "[integration][cli][llm]") {
  temp_dir home;
  fake_llm llm{json::array(
    {{{"content", R"({"title": "slow one"})"}, {"chunks", 4}, {"chunk_delay_ms", 10000}},
     {{"content", R"({"title": "second try"})"}}})};
  auto config = config_for(home, llm);
  auto r = run_with_key(home.path, {"run", graph_file(home), "--config", config, "--input", "topic=Q4",
                              "--detach", "--json"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  // The first piece of the answer is in the event log: the call streams.
  REQUIRE(eventually(
    [&] {
      for (auto& e : events_of(home.path, id))
        if (e["type"] == "step.output" && e["step"] == "draft")
          return true;
      return false;
    },
    30s, 20ms));
  auto stop = run_canopy(home.path, {"stop", id});
  REQUIRE(stop.exit_code == 0);
  auto stopped = show_doc(home.path, id);
  CHECK(stopped["status"] == "stopped");
  CHECK(stopped["steps"]["draft"]["status"] == "pending");
  CHECK(stopped["steps"]["intro"]["status"] == "completed");
  int64_t halted = 0;
  for (auto& e : events_of(home.path, id))
    if (e["type"] == "execution.stopping")
      halted = ms_of(e["time"]);
  REQUIRE(halted > 0);
  REQUIRE(eventually([&] { return !llm.events("disconnected").empty(); }, 10s));
  auto gone = llm.events("disconnected")[0]["at_ms"].get<int64_t>();
  CHECK(gone - halted < 100);
  CHECK(llm.events("answered").empty());

  auto resumed = run_with_key(home.path, {"resume", id, "--config", config, "--json"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto doc = show_doc(home.path, id);
  CHECK(doc["status"] == "completed");
  CHECK(doc["outputs"]["title"] == "second try");
  CHECK(doc["steps"]["intro"]["attempt"] == 1); // not run again
  CHECK(llm.events("request").size() == 2);     // one call per start of the step
}

TEST_CASE("a provider's 400 fails the step with its message, and an unknown provider is named",
          "[integration][cli][llm][validation]") {
  temp_dir home;
  fake_llm llm{json::array({{{"status", 400}, {"error", "model 'fake-7b' is not loaded"}}})};
  auto r = run_with_key(home.path, {"run", graph_file(home), "--config", config_for(home, llm),
                              "--input", "topic=x", "--json"});
  CHECK(r.exit_code == 1);
  auto id = r.out_json()["id"].get<std::string>();
  auto doc = show_doc(home.path, id);
  CHECK(doc["steps"]["draft"]["error"]
        == "the model provider answered 400: model 'fake-7b' is not loaded");
  CHECK(llm.events("request").size() == 1); // a 400 is not tried again

  auto none = run_with_key(home.path, {"run", graph_file(home), "--input", "topic=x", "--json"});
  CHECK(none.exit_code == 1);
  auto no_provider = show_doc(home.path, none.out_json()["id"].get<std::string>());
  CHECK_THAT(no_provider["steps"]["draft"]["error"].get<std::string>(),
             Catch::Contains("provider 'default' is not configured on this node"));
}

TEST_CASE("run --config refuses a server's keys, a provider without a base URL and a key sent in "
          "clear off this host, naming each path and never the key",
          "[integration][cli][llm][validation]") {
  temp_dir home;
  auto graph = graph_file(home);
  auto bad = home.write("bad.json", json{{"listen", "127.0.0.1:1"},
                                         {"providers",
                                          {{"default", {{"api_key_env", "CANOPY_TEST_KEY"}}},
                                           {"far",
                                            {{"base_url", "http://10.1.2.3:8080/v1"},
                                             {"api_key_env", "CANOPY_TEST_KEY"}}},
                                           {"nokey", {{"base_url", "http://127.0.0.1:9/v1"},
                                                      {"api_key_env", "CANOPY_NO_SUCH_VAR"}}},
                                           {"priced", {{"base_url", "http://127.0.0.1:9/v1"},
                                                       {"price", {{"input", -1}}}}}}}}
                                      .dump());
  auto r = run_with_key(home.path, {"run", graph, "--config", bad, "--input", "topic=x"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/listen: unknown key 'listen'"));
  CHECK_THAT(r.err, Catch::Contains("/providers/default: missing 'base_url'"));
  CHECK_THAT(r.err, Catch::Contains("/providers/far/base_url: an API key never travels in clear"));
  CHECK_THAT(r.err, Catch::Contains("/providers/nokey/api_key_env:"));
  CHECK_THAT(r.err, Catch::Contains("/providers/priced/price: expected {\"input\": N"));
  CHECK(r.err.find(key) == std::string::npos);
  CHECK_FALSE(has_store(home.path)); // nothing was stored
}

TEST_CASE("a provider's max_parallel bounds its calls at once: the others wait queued and are "
          "made one after another",
          "[integration][cli][llm]") {
  temp_dir home;
  json reply = {{"content", "ok"}, {"delay_ms", 150}};
  fake_llm llm{json::array({reply, reply, reply})};
  auto config = home.write("one.json", json{{"providers",
                                            {{"default",
                                              {{"base_url", llm.base_url()},
                                               {"max_parallel", 1}}}}}}
                                         .dump());
  auto graph = home.write("fan.json", R"({"name": "fan", "steps": {
    "a": {"llm": {"model": "m", "messages": [{"role": "user", "content": "a"}]}},
    "b": {"llm": {"model": "m", "messages": [{"role": "user", "content": "b"}]}},
    "c": {"llm": {"model": "m", "messages": [{"role": "user", "content": "c"}]}}}})");
  auto r = run_canopy(home.path, {"run", graph, "--config", config, "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // A call is made once the one before it was answered, which took 150 ms.
  std::vector<int64_t> at;
  for (auto& e : llm.events("request"))
    at.push_back(e["at_ms"].get<int64_t>());
  REQUIRE(at.size() == 3);
  std::sort(at.begin(), at.end());
  CHECK(at[1] - at[0] >= 150);
  CHECK(at[2] - at[1] >= 150);
  size_t queued = 0;
  for (auto& e : events_of(home.path, r.out_json()["id"].get<std::string>()))
    queued += e["type"] == "step.queued" ? 1 : 0;
  CHECK(queued == 3);

  auto bad = home.write("bad.json", json{{"providers",
                                         {{"default",
                                           {{"base_url", llm.base_url()},
                                            {"max_parallel", 0}}}}}}
                                      .dump());
  auto refused = run_canopy(home.path, {"run", graph, "--config", bad});
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("/providers/default/max_parallel"));
}

TEST_CASE("agent send --config gives a local agent's run the providers of the file",
          "[integration][cli][llm][agents]") {
  temp_dir home;
  fake_llm llm{json::array({{{"content", "A paragraph on actors."}}})};
  auto config = config_for(home, llm);
  auto writer = source_dir() + "/examples/writer_critic/writer.json";
  REQUIRE(run_canopy(home.path, {"agent", "create", "writer", "--graph", writer}).exit_code == 0);
  auto r = run_with_key(home.path, {"agent", "send", "writer", "Write about actors.", "--config",
                                    config, "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out_json()["reply"] == "A paragraph on actors.");
  auto sent = llm.events("request");
  REQUIRE(sent.size() == 1);
  CHECK(sent[0]["body"]["messages"][1]["content"] == "Write about actors.");

  auto bad = run_canopy(home.path, {"agent", "send", "writer", "x", "--config",
                                    home.write("bad.json", R"({"listen": "x"})")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("listen"));
}

TEST_CASE("the llm_brief example runs offline against the provider double with one command",
          "[integration][cli][llm][examples]") {
  temp_dir home;
  auto r = run_command({"sh", source_dir() + "/examples/llm_brief/run.sh", canopy_binary(),
                        home.path + "/home"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"title\": \"Durable agent graphs\""));
  CHECK_THAT(r.out, Catch::Contains("\"completion_tokens\": 41"));
}

TEST_CASE("a priced provider's tokens are charged to the budget: a call that could pass it "
          "stops the tree budget_exceeded before it is made, and resume --budget continues",
          "[integration][cli][llm][budget]") {
  temp_dir home;
  fake_llm llm{json::array({{{"content", "first"},
                             {"usage", {{"prompt_tokens", 30}, {"completion_tokens", 20}}}},
                            {{"content", "second"},
                             {"usage", {{"prompt_tokens", 40}, {"completion_tokens", 10}}}}})};
  // 100 per million tokens: a call of at most 50 tokens out over a short
  // prompt reserves about 0.007; the first settles to 50 tokens, 0.005.
  auto config = home.write("priced.json",
                           json{{"providers",
                                 {{"default",
                                   {{"base_url", llm.base_url()},
                                    {"price", {{"input", 100}, {"output", 100}}}}}}}}
                             .dump());
  auto graph = home.write("two.json", R"({"name": "two", "limits": {"budget": 0.01},
    "steps": {
      "one": {"llm": {"model": "m", "max_tokens": 50,
                      "messages": [{"role": "user", "content": "one"}]}},
      "two": {"needs": ["one"], "llm": {"model": "m", "max_tokens": 50,
                                        "messages": [{"role": "user", "content": "two"}]}}}})");
  auto r = run_canopy(home.path, {"run", graph, "--config", config, "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  auto doc = r.out_json();
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "budget_exceeded");
  CHECK(doc["steps"]["one"]["result"]["spend"] == Approx(0.005));
  CHECK(doc["steps"]["two"]["status"] == "pending");
  CHECK(llm.events("request").size() == 1); // the second call was never made

  auto resumed = run_canopy(home.path, {"resume", doc["id"].get<std::string>(), "--budget",
                                        "0.05", "--config", config, "--json"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto done = resumed.out_json();
  CHECK(done["status"] == "completed");
  CHECK(done["steps"]["two"]["result"]["content"] == "second");
  CHECK(done["steps"]["two"]["result"]["spend"] == Approx(0.005));
  CHECK(llm.events("request").size() == 2);
  auto show = run_canopy(home.path, {"show", doc["id"].get<std::string>()});
  CHECK_THAT(show.out, Catch::Contains("50 tokens · spent 0.005"));
  // The tree's totals: both calls.
  CHECK_THAT(show.out, Catch::Contains("model: 2 calls · 100 tokens (70 in, 30 out) · spent 0.01"));
  auto tree = show_doc(home.path, doc["id"].get<std::string>());
  CHECK(tree["model"]["calls"] == 2);
  CHECK(tree["model"]["spend"] == Approx(0.01));

  // Without max_tokens a priced call cannot know what it may spend.
  auto unbounded = home.write("unbounded.json", R"({"steps": {"x": {"llm": {"model": "m",
    "messages": [{"role": "user", "content": "x"}]}}}})");
  auto u = run_canopy(home.path, {"run", unbounded, "--config", config, "--json"});
  CHECK(u.exit_code == 1);
  CHECK_THAT(u.out_json()["steps"]["x"]["error"].get<std::string>(),
             Catch::Contains("has a price: the step needs 'max_tokens'"));
}

TEST_CASE("on a server the key appears in no answer, metric, log line or page, even when the "
          "provider quotes it in an error",
          "[integration][server][llm][secrets]") {
  fake_llm llm{json::array({{{"content", "fine"}},
                            {{"status", 401}, {"error", "Incorrect API key provided: " + key}}})};
  server_process::options o;
  o.config = {{"providers",
               {{"default", {{"base_url", llm.base_url()}, {"api_key_env", "CANOPY_TEST_KEY"}}}}}};
  o.env = {{"CANOPY_TEST_KEY", key}};
  server_process srv{o};
  auto c = srv.client(alice_token);
  register_graph(c, {{"name", "ask"},
                     {"steps",
                      {{"ask",
                        {{"llm",
                          {{"model", "m"},
                           {"messages", {{{"role", "user"}, {"content", "hi"}}}}}}}}}}});
  auto ok = start(c, "ask")["id"].get<std::string>();
  CHECK(wait_status(c, ok, "completed")["status"] == "completed");
  auto bad = start(c, "ask")["id"].get<std::string>();
  auto failed = wait_status(c, bad, "failed");
  REQUIRE(failed["status"] == "failed");
  CHECK(failed["steps"]["ask"]["error"]
        == "the model provider answered 401: Incorrect API key provided: [redacted]");
  REQUIRE(llm.events("request").size() == 2);
  CHECK(llm.events("request")[0]["authorization"] == "Bearer " + key);

  std::string seen;
  for (auto path : {std::string{"/v1/executions"}, "/v1/executions/" + ok, "/v1/executions/" + bad,
                    "/v1/executions/" + ok + "/events", "/v1/executions/" + bad + "/events",
                    std::string{"/v1/graphs"}, std::string{"/v1/waits"}})
    seen += request(c, "GET", path).text;
  auto anon = srv.client();
  seen += request(anon, "GET", "/metrics").text;
  seen += request(anon, "GET", "/ui/").text;
  seen += srv.out() + srv.log();
  CHECK(seen.find("Incorrect API key provided") != std::string::npos); // read what we searched
  CHECK(seen.find(key) == std::string::npos);
  CHECK(file_text(srv.home() + "/data.mdb").find(key) == std::string::npos);
}
