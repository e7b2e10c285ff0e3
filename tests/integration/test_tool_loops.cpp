// Tool-calling loops through the real binary against the model provider
// double (tests/fake_llm): an `llm` step with `tools` runs the model, runs
// the tools it asks for as durable steps of the turn's child execution,
// feeds their output back and repeats until the model answers without
// tools. A loop stopped (or killed) at turn 3 of 5 resumes at turn 3: the
// double's log shows turns 1 and 2 were not asked again, a tally file shows
// that no completed tool call ran twice, and the answer is the one an
// uninterrupted run gives.

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <sstream>

#include "actors/process/subprocess.hpp"
#include "persistence/store.hpp"
#include "tests/fake_llm/fake_llm.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// A tool call `lookup(topic)` as the double sends it.
json lookup(const std::string& id, const std::string& topic) {
  return {{"id", id}, {"name", "lookup"}, {"arguments", {{"topic", topic}}}};
}

/// The five turns of the script: lookups a; b and c at once; d; e; then the answer.
std::vector<json> five_turns() {
  return {{{"tool_calls", {lookup("c1", "a")}}},
          {{"tool_calls", {lookup("c2", "b"), lookup("c3", "c")}}},
          {{"tool_calls", {lookup("c4", "d")}}},
          {{"tool_calls", {lookup("c5", "e")}}},
          {{"content", "a, b, c, d and e are known"},
           {"usage", {{"prompt_tokens", 50}, {"completion_tokens", 6}}}}};
}

/// A node config: provider `default` is `llm`; the tool `lookup` appends its
/// topic to `tally` and prints a fact.
std::string config_for(const temp_dir& dir, const fake_llm& llm, const std::string& tally) {
  json tools = {{"lookup",
                 {{"description", "Looks a topic up."},
                  {"parameters",
                   {{"type", "object"},
                    {"required", {"topic"}},
                    {"properties", {{"topic", {{"type", "string"}}}}}}},
                  {"argv",
                   {"/bin/sh", "-c", "echo \"$1\" >> '" + tally + "'; echo \"fact about $1\"",
                    "lookup", "${with.topic}"}}}}};
  return dir.write("node.json",
                   json{{"providers", {{"default", {{"base_url", llm.base_url()}}}}},
                        {"tools", tools}}
                     .dump());
}

std::string graph_file(const temp_dir& dir) {
  return dir.write("research.json", R"({
    "name": "research",
    "steps": {
      "research": {"llm": {"model": "fake-7b", "tools": ["lookup"], "max_turns": 5,
                           "messages": [{"role": "user", "content": "Find a to e."}]}},
      "publish": {"needs": ["research"], "fn": "echo",
                  "with": {"text": "${steps.research.content}"}}
    },
    "outputs": {"answer": "${steps.publish.text}", "turns": "${steps.research.turns}"}
  })");
}

std::string file_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

json show_doc(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

/// The last message of request `r`'s body.
json last_message(const json& r) {
  return r["body"]["messages"].back();
}

/// A script whose third reply streams slowly (the stop lands in it), then the five turns.
json interrupted_script() {
  auto turns = five_turns();
  json script = json::array();
  for (size_t i = 0; i < turns.size(); ++i) {
    if (i == 2)
      script.push_back({{"content", "let me think"}, {"chunks", 4}, {"chunk_delay_ms", 10000}});
    script.push_back(turns[i]);
  }
  return script;
}

/// Runs the research graph detached and stops it while turn 3's answer
/// streams (request 3). @returns the execution's id.
std::string run_and_stop_at_turn_3(const temp_dir& home, const fake_llm& llm,
                                   const std::string& config) {
  auto r = run_canopy(home.path, {"run", graph_file(home), "--config", config, "--detach",
                                  "--json"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  REQUIRE(eventually([&] { return llm.events("request").size() == 3; }, 30s, 20ms));
  REQUIRE(run_canopy(home.path, {"stop", id}).exit_code == 0);
  return id;
}

/// The research graph over the interrupted script, stopped at turn 3
/// (members in the order they are made).
struct stopped_at_turn_3 {
  temp_dir home;
  std::string tally = home.path + "/tally";
  fake_llm llm{interrupted_script()};
  std::string config = config_for(home, llm, tally);
  std::string id = run_and_stop_at_turn_3(home, llm, config);
};

/// Resumes `id`, which was interrupted during turn 3's model call (request
/// 3), and checks the run: the answer an uninterrupted run gives, turns 3 to
/// 5 asked once more each, nothing else.
void resume_and_check(const std::string& home, const std::string& id, const std::string& config,
                      const fake_llm& llm, const std::string& tally) {
  auto resumed = run_canopy(home, {"resume", id, "--config", config, "--json"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  auto doc = show_doc(home, id);
  CHECK(doc["status"] == "completed");
  CHECK(doc["outputs"]["answer"] == "a, b, c, d and e are known");
  CHECK(doc["outputs"]["turns"] == 5);
  auto requests = llm.events("request");
  REQUIRE(requests.size() == 6);
  // Request 4 is turn 3 again: it carries the answers of turns 1 and 2, and
  // turns 1 and 2 were never asked again.
  CHECK(requests[3]["body"]["messages"] == requests[2]["body"]["messages"]);
  CHECK(last_message(requests[3])["content"] == "fact about c\n");
  CHECK(last_message(requests[4])["content"] == "fact about d\n");
  // Each tool call ran once: a; b and c (in either order); d; e.
  auto lines = file_text(tally);
  CHECK((lines == "a\nb\nc\nd\ne\n" || lines == "a\nc\nb\nd\ne\n"));
}

} // namespace

TEST_CASE("an llm step with tools runs the tools the model asks for and feeds their output "
          "back until it answers, each turn a child execution",
          "[integration][cli][llm][loops]") {
  temp_dir home;
  fake_llm llm{five_turns()};
  auto tally = home.path + "/tally";
  auto r = run_canopy(home.path, {"run", graph_file(home), "--config",
                                  config_for(home, llm, tally), "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto out = r.out_json();
  CHECK(out["outputs"]["answer"] == "a, b, c, d and e are known");
  CHECK(out["outputs"]["turns"] == 5);
  CHECK(file_text(tally).size() == 10);

  auto requests = llm.events("request");
  REQUIRE(requests.size() == 5);
  // The tools are offered with their description and parameters.
  auto& offered = requests[0]["body"]["tools"];
  REQUIRE(offered.size() == 1);
  CHECK(offered[0]["function"]["name"] == "lookup");
  CHECK(offered[0]["function"]["description"] == "Looks a topic up.");
  CHECK(offered[0]["function"]["parameters"]["required"] == json{"topic"});
  // Turn 2 sees the assistant's call and the tool's answer to it.
  auto& second = requests[1]["body"]["messages"];
  REQUIRE(second.size() == 3);
  CHECK(second[1]["role"] == "assistant");
  CHECK(second[1]["tool_calls"][0]["id"] == "c1");
  CHECK(second[2] == json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "fact about a\n"}});
  // Turn 3 sees both parallel answers.
  auto& third = requests[2]["body"]["messages"];
  CHECK(third[third.size() - 2]["tool_call_id"] == "c2");
  CHECK(third.back()["tool_call_id"] == "c3");

  // The tree: the step's five turns, each a child with its own steps.
  auto id = out["id"].get<std::string>();
  auto doc = show_doc(home.path, id);
  auto& result = doc["steps"]["research"]["result"];
  CHECK(result["turns"] == 5);
  CHECK(result["messages"].size() == 11);
  int turns = 0;
  for (auto& c : doc["children"]) {
    CHECK(c["parent_step"] == "research");
    CHECK(c["status"] == "completed");
    ++turns;
    if (c["iteration"] == 3) { // turn 2's calls, b and c
      CHECK(c["steps"].contains("lookup_1"));
      CHECK(c["steps"].contains("lookup_2"));
    }
  }
  CHECK(turns == 5);
  auto show = run_canopy(home.path, {"show", id});
  CHECK_THAT(show.out, Catch::Contains("research#5"));
}

TEST_CASE("a tool-calling loop stopped at turn 3 of 5 resumes at turn 3: no completed turn is "
          "asked again and no completed tool runs again",
          "[integration][cli][llm][loops]") {
  stopped_at_turn_3 s;
  auto stopped = show_doc(s.home.path, s.id);
  CHECK(stopped["status"] == "stopped");
  CHECK(stopped["steps"]["research"]["status"] == "pending");
  REQUIRE(eventually([&] { return !s.llm.events("disconnected").empty(); }, 10s));
  resume_and_check(s.home.path, s.id, s.config, s.llm, s.tally);
}

TEST_CASE("a tool-calling loop whose current turn's stored graph is unreadable fails on resume "
          "and never starts over at turn 1",
          "[integration][cli][llm][loops]") {
  stopped_at_turn_3 s;
  auto& home = s.home;
  auto& id = s.id;
  std::string turn3;
  json stopped;
  REQUIRE(eventually([&] {
    stopped = show_doc(home.path, id);
    for (auto& c : stopped["children"])
      if (c["iteration"] == 3 && c["status"] == "stopped")
        turn3 = c["id"].get<std::string>();
    return stopped["status"] == "stopped" && !turn3.empty();
  }));
  INFO(stopped.dump());
  {
    // Damage turn 3's stored graph (the conversation so far lives in it).
    auto db = canopy::core::store::open({home.path});
    REQUIRE(db);
    canopy::core::write_batch b;
    b.graphs.emplace_back(turn3, canopy::core::stored_graph{json{{"steps", 5}}, home.path, json::object()});
    REQUIRE(!(*db)->commit(b));
  }
  auto resumed = run_canopy(home.path, {"resume", id, "--config", s.config, "--json"});
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 1);
  auto doc = resumed.out_json();
  CHECK(doc["steps"]["research"]["status"] == "failed");
  CHECK_THAT(doc["steps"]["research"]["error"].get<std::string>(),
             Catch::Contains("(" + turn3 + ") cannot be loaded"));
  CHECK(s.llm.events("request").size() == 3); // no turn asked again, turn 1 least of all
}

TEST_CASE("a tool-calling loop whose process is killed at turn 3 of 5 resumes at turn 3",
          "[integration][cli][llm][loops][crash]") {
  temp_dir home;
  auto tally = home.path + "/tally";
  fake_llm llm{interrupted_script()};
  auto config = config_for(home, llm, tally);
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home.path, "run", graph_file(home), "--config", config};
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  REQUIRE(eventually([&] { return llm.events("request").size() == 3; }, 30s, 20ms));
  p->signal_group(SIGKILL);
  REQUIRE(wait_exit(*p));
  CHECK(p->term_signal() == SIGKILL);

  auto ls = run_canopy(home.path, {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  auto id = ls.out_json()[0]["id"].get<std::string>();
  resume_and_check(home.path, id, config, llm, tally);
}

TEST_CASE("a model's call with arguments that do not fit the tool's parameters runs nothing, "
          "and the model is told why",
          "[integration][cli][llm][loops][validation]") {
  temp_dir home;
  auto tally = home.path + "/tally";
  fake_llm llm{json::array(
    {{{"tool_calls",
       {{{"id", "c1"}, {"name", "lookup"}, {"arguments", {{"topic", 7}}}},
        {{"id", "c2"}, {"name", "rm_rf"}, {"arguments", json::object()}}}}},
     {{"content", "sorry"}}})};
  auto r = run_canopy(home.path, {"run", graph_file(home), "--config",
                                  config_for(home, llm, tally), "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(file_text(tally).empty());
  auto requests = llm.events("request");
  REQUIRE(requests.size() == 2);
  auto& msgs = requests[1]["body"]["messages"];
  auto bad_args = msgs[msgs.size() - 2]["content"].get<std::string>();
  CHECK_THAT(bad_args, Catch::StartsWith("error: the arguments of 'lookup' do not fit"));
  CHECK_THAT(bad_args, Catch::Contains("/topic"));
  CHECK_THAT(msgs.back()["content"].get<std::string>(),
             Catch::Contains("there is no tool 'rm_rf' (the tools are lookup)"));
}

TEST_CASE("a tool call that fails fails its turn, and the step's retry resumes that turn, "
          "not the turns before it",
          "[integration][cli][llm][loops]") {
  temp_dir home;
  auto tally = home.path + "/tally";
  auto once = home.path + "/once";
  fake_llm llm{json::array(
    {{{"tool_calls", {lookup("c1", "a")}}},
     {{"tool_calls", {{{"id", "c2"}, {"name", "flaky"}, {"arguments", json::object()}}}}},
     {{"content", "done"}}})};
  auto base = json::parse(file_text(config_for(home, llm, tally)));
  base["tools"]["flaky"] = {
    {"argv",
     {"/bin/sh", "-c", "if [ -e '" + once + "' ]; then echo fine; else touch '" + once
                         + "'; exit 3; fi"}}};
  auto config = home.write("flaky.json", base.dump());
  auto graph = home.write("flaky_graph.json", R"({"name": "flaky", "steps": {"ask": {
      "retries": 1, "retry_delay": "10ms",
      "llm": {"model": "m", "tools": ["flaky", "lookup"],
              "messages": [{"role": "user", "content": "go"}]}}}})");
  auto r = run_canopy(home.path, {"run", graph, "--config", config, "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto doc = show_doc(home.path, r.out_json()["id"].get<std::string>());
  CHECK(doc["steps"]["ask"]["attempt"] == 2);
  CHECK(doc["steps"]["ask"]["result"]["content"] == "done");
  CHECK(file_text(tally) == "a\n"); // turn 2's call ran once
  CHECK(llm.events("request").size() == 3);
  for (auto& c : doc["children"]) {
    if (c["iteration"] == 2)
      CHECK(c["steps"]["lookup_1"]["attempt"] == 1);
    if (c["iteration"] == 3)
      CHECK(c["steps"]["flaky_1"]["attempt"] == 2);
  }
}

TEST_CASE("the research_agent example runs offline against the provider double with one "
          "command",
          "[integration][cli][llm][examples]") {
  temp_dir home;
  auto r = run_command({"sh", source_dir() + "/examples/research_agent/run.sh",
                        canopy_binary(), home.path + "/home"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"title\": \"Durable, supervised agents\""));
  CHECK_THAT(r.out, Catch::Contains("\"check_turns\": 3"));
  // The fact check's tools ran on the real sources.
  auto ls = run_canopy(home.path + "/home", {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  auto id = ls.out_json()[0]["id"].get<std::string>();
  auto logs = run_canopy(home.path + "/home", {"logs", id, "fact_check#3/read_1"});
  CHECK_THAT(logs.out, Catch::Contains("Erlang/OTP supervisors restart children"));
}
