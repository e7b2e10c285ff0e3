// Acceptance tests through the library: agents, their history,
// cancel, the `on_busy` policies, `agent` steps that carry a stop across
// agents, and recursion through agents. A real store in a temp home and real
// subprocess steps; the writer/critic example runs whole through its run.sh
// against the provider double. Waits are on events (a pid file that appears,
// a run that ends), never on sleeps.

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "runtime/node/error.hpp"
#include "runtime/node/runtime.hpp"
#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core;
using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<runtime> open_rt(const std::string& home) {
  runtime_options opts;
  opts.home = home;
  auto rt = runtime::open(opts);
  REQUIRE(rt);
  return std::move(*rt);
}

/// Creates agent `name` running graph document `doc`.
void create(runtime& rt, const std::string& name, const json& doc,
            busy_policy on_busy = busy_policy::cancel_previous) {
  auto parsed = parse_graph(doc, "/tmp", rt.graph_options());
  REQUIRE(parsed);
  REQUIRE(check_agent_graph(*parsed.value).empty());
  REQUIRE(rt.create_agent("", name, *parsed.value, on_busy));
}

/// Waits until `path` exists (a step wrote it); @returns its first line.
std::string wait_file(const std::string& path, std::chrono::seconds timeout = 60s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in{path};
    std::string line;
    if (in && std::getline(in, line) && !line.empty())
      return line;
    std::this_thread::sleep_for(5ms);
  }
  FAIL("no file " << path);
  return {};
}

/// Counts the lines of `path` (0 when it does not exist).
size_t lines_of(const std::string& path) {
  std::ifstream in{path};
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

/// A graph answering `re: MESSAGE (N earlier)`; the message `slow` first
/// writes the shell's pid to DIR/pid-slow and blocks until DIR/go exists.
json echo_graph(const std::string& dir) {
  std::string script = "if [ \"$M\" = slow ]; then echo $$ > " + dir
                       + "/pid-slow; while [ ! -f " + dir
                       + "/go ]; do sleep 0.02; done; fi; "
                         "printf 're: %s (%s)' \"$M\" \"$H\"";
  return {{"name", "echo"},
          {"inputs", {"message", "history"}},
          {"steps", {{"say", {{"run", {"sh", "-c", script}},
                              {"env", {{"M", "${inputs.message}"}, {"H", "${inputs.history}"}}}}}}},
          {"outputs", {{"reply", "${steps.say.stdout}"}}}};
}

/// Sends `text` on a thread of its own.
std::future<caf::expected<agent_reply>> send_async(runtime& rt, const std::string& name,
                                                   const std::string& text) {
  return std::async(std::launch::async,
                    [&rt, name, text] { return rt.send_to_agent("", name, text); });
}

std::vector<std::string> event_types(runtime& rt, const std::string& root) {
  std::vector<std::string> out;
  for (auto& e : checked_tree_events(*rt.db(), root))
    out.push_back(to_string(e.type));
  return out;
}

bool has(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

} // namespace

TEST_CASE("an agent answers messages and its history survives a restart",
          "[integration][agents]") {
  temp_dir dir;
  std::string first_run;
  {
    auto rt = open_rt(dir.path + "/home");
    create(*rt, "echo", echo_graph(dir.path));
    auto r1 = rt->send_to_agent("", "echo", "hello");
    REQUIRE(r1);
    CHECK(to_string(r1->status) == std::string{"completed"});
    CHECK(r1->reply == "re: hello ([])");
    first_run = r1->execution_id;
    auto rec = rt->db()->execution(first_run);
    REQUIRE(rec);
    CHECK(rec->graph == "echo"); // a user's run is named after the agent
    CHECK(rec->agent == "echo");
    CHECK(rec->parent_id.empty());
    auto types = event_types(*rt, first_run);
    CHECK(has(types, "agent.message"));
    CHECK(has(types, "agent.reply"));
  }
  auto rt = open_rt(dir.path + "/home");
  auto history = rt->db()->history("", "echo");
  REQUIRE(history);
  REQUIRE(history->size() == 2);
  CHECK((*history)[0].role == "user");
  CHECK((*history)[0].content == "hello");
  CHECK((*history)[0].execution_id == first_run);
  CHECK((*history)[1].role == "agent");
  CHECK((*history)[1].content == "re: hello ([])");
  // The next run gets the history as its input.
  auto r2 = rt->send_to_agent("", "echo", "again");
  REQUIRE(r2);
  CHECK(to_string(r2->status) == std::string{"completed"});
  auto text = r2->reply.get<std::string>();
  CHECK(text.find("re: again") == 0);
  CHECK(text.find("\"content\":\"hello\"") != std::string::npos);
  CHECK(text.find("\"role\":\"agent\"") != std::string::npos);
  CHECK(rt->db()->history("", "echo")->size() == 4);
}

TEST_CASE("a message to an unknown agent is not_found and stores nothing",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  auto r = rt->send_to_agent("", "nobody", "hi");
  REQUIRE_FALSE(r);
  CHECK(exit_code_of(r.error()) == 4);
  auto c = rt->cancel_agent("", "nobody");
  REQUIRE_FALSE(c);
  CHECK(exit_code_of(c.error()) == 4);
  CHECK(rt->db()->list({})->empty());
}

TEST_CASE("an agent that lives on a cluster node fails its runs on a node without a cluster "
          "and keeps its node across a replacement",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  auto parsed = parse_graph(echo_graph(dir.path), "/tmp", rt->graph_options());
  REQUIRE(parsed);
  auto made = rt->create_agent("", "far", *parsed.value, busy_policy::queue, "gpu-1");
  REQUIRE(made);
  CHECK(made->first.node == "gpu-1");
  CHECK(agent_document(made->first)["node"] == "gpu-1");
  auto stored = rt->db()->agent("", "far");
  REQUIRE(stored);
  CHECK(stored->node == "gpu-1");
  auto r = rt->send_to_agent("", "far", "hello");
  REQUIRE(r);
  CHECK(to_string(r->status) == std::string{"failed"});
  CHECK_THAT(r->error, Catch::Contains("node 'gpu-1'"));
  auto run = rt->db()->execution(r->execution_id);
  REQUIRE(run);
  CHECK(run->node == "gpu-1");
  // Replaced without a node: it runs anywhere again, here.
  REQUIRE(rt->create_agent("", "far", *parsed.value, busy_policy::queue));
  CHECK(rt->db()->agent("", "far")->node.empty());
  auto again = rt->send_to_agent("", "far", "hello");
  REQUIRE(again);
  CHECK(to_string(again->status) == std::string{"completed"});
  CHECK(again->reply == "re: hello ([])");
}

TEST_CASE("cancel stops the run in flight and an idle agent answers no_execution",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  create(*rt, "echo", echo_graph(dir.path));
  auto idle = rt->cancel_agent("", "echo");
  REQUIRE(idle);
  CHECK(*idle == cancel_result::no_execution);
  auto sent = send_async(*rt, "echo", "slow");
  auto pid = std::stol(wait_file(dir.path + "/pid-slow"));
  auto c = rt->cancel_agent("", "echo");
  REQUIRE(c);
  CHECK(*c == cancel_result::cancelled);
  auto r = sent.get();
  REQUIRE(r);
  CHECK(to_string(r->status) == std::string{"stopped"});
  CHECK(r->reason == step_reason::requested);
  CHECK(process_gone(pid));
  auto rec = rt->db()->execution(r->execution_id);
  REQUIRE(rec);
  CHECK(rec->status == execution_status::stopped);
  auto steps = rt->db()->steps(r->execution_id);
  REQUIRE(steps);
  CHECK(steps->at(0).status == step_status::pending);
  CHECK(has(event_types(*rt, r->execution_id), "agent.cancelled"));
  // A cancelled message is not part of the conversation.
  CHECK(rt->db()->history("", "echo")->empty());
  auto again = rt->cancel_agent("", "echo");
  REQUIRE(again);
  CHECK(*again == cancel_result::no_execution);
}

TEST_CASE("on_busy reject refuses a message while a run is live", "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  create(*rt, "echo", echo_graph(dir.path), busy_policy::reject);
  auto first = send_async(*rt, "echo", "slow");
  wait_file(dir.path + "/pid-slow");
  auto second = rt->send_to_agent("", "echo", "fast");
  REQUIRE(second);
  CHECK(to_string(second->status) == std::string{"busy"});
  CHECK(second->execution_id.empty());
  dir.write("go", "");
  auto r1 = first.get();
  REQUIRE(r1);
  CHECK(to_string(r1->status) == std::string{"completed"});
  // Idle again: accepted.
  auto third = rt->send_to_agent("", "echo", "fast");
  REQUIRE(third);
  CHECK(to_string(third->status) == std::string{"completed"});
  CHECK(rt->db()->history("", "echo")->size() == 4);
}

TEST_CASE("on_busy queue runs messages one after the other in arrival order",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  create(*rt, "echo", echo_graph(dir.path), busy_policy::queue);
  auto first = send_async(*rt, "echo", "slow");
  wait_file(dir.path + "/pid-slow");
  auto second = send_async(*rt, "echo", "second");
  // The second message waits in the mailbox: its run does not exist yet.
  CHECK(second.wait_for(200ms) == std::future_status::timeout);
  CHECK(rt->db()->agent_runs("", "echo")->size() == 1);
  dir.write("go", "");
  auto r1 = first.get();
  auto r2 = second.get();
  REQUIRE(r1);
  REQUIRE(r2);
  CHECK(to_string(r1->status) == std::string{"completed"});
  CHECK(to_string(r2->status) == std::string{"completed"});
  auto e1 = rt->db()->execution(r1->execution_id);
  auto e2 = rt->db()->execution(r2->execution_id);
  REQUIRE(e1);
  REQUIRE(e2);
  CHECK(e2->started_at >= e1->ended_at);
  auto h = rt->db()->history("", "echo");
  REQUIRE(h->size() == 4);
  CHECK((*h)[0].content == "slow");
  CHECK((*h)[2].content == "second");
  // The second run saw the first exchange.
  CHECK(r2->reply.get<std::string>().find("slow") != std::string::npos);
}

TEST_CASE("on_busy cancel_previous stops the live run for the newer message",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  create(*rt, "echo", echo_graph(dir.path)); // the default policy
  auto first = send_async(*rt, "echo", "slow");
  auto pid = std::stol(wait_file(dir.path + "/pid-slow"));
  auto r2 = rt->send_to_agent("", "echo", "newer");
  REQUIRE(r2);
  CHECK(to_string(r2->status) == std::string{"completed"});
  auto r1 = first.get();
  REQUIRE(r1);
  CHECK(to_string(r1->status) == std::string{"stopped"});
  CHECK(process_gone(pid));
  CHECK(has(event_types(*rt, r1->execution_id), "agent.cancelled"));
  auto h = rt->db()->history("", "echo");
  REQUIRE(h->size() == 2);
  CHECK((*h)[0].content == "newer");
}

namespace {

/// Agent `name`: step `count` appends a line to DIR/NAME.count, then step
/// `ask` messages agent `next` (or, for the last, waits for DIR/go after
/// writing its pid to DIR/pid-NAME) and replies with what it got.
json chain_graph(const std::string& dir, const std::string& name, const std::string& next) {
  json steps;
  steps["count"] = {{"run", {"sh", "-c", "echo x >> " + dir + "/" + name + ".count"}}};
  if (!next.empty()) {
    steps["ask"] = {{"agent", next}, {"message", name + " asks: ${inputs.message}"},
                    {"needs", {"count"}}};
    return {{"name", name},
            {"inputs", {"message"}},
            {"steps", steps},
            {"outputs", {{"reply", "${steps.ask.reply} via " + name}}}};
  }
  steps["work"] = {{"run", {"sh", "-c",
                            "echo $$ > " + dir + "/pid-" + name + "; while [ ! -f " + dir
                              + "/go ]; do sleep 0.02; done; printf done"}},
                   {"needs", {"count"}}};
  return {{"name", name},
          {"inputs", {"message"}},
          {"steps", steps},
          {"outputs", {{"reply", "${steps.work.stdout} by " + name}}}};
}

} // namespace

TEST_CASE("stopping a conversation stops every agent it reached, and resume completes it",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  create(*rt, "a", chain_graph(dir.path, "a", "b"));
  create(*rt, "b", chain_graph(dir.path, "b", "c"));
  create(*rt, "c", chain_graph(dir.path, "c", ""));
  auto sent = send_async(*rt, "a", "go");
  auto pid = std::stol(wait_file(dir.path + "/pid-c"));
  auto runs = rt->db()->agent_runs("", "a");
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  auto root = runs->at(0).first;
  REQUIRE(rt->stop(root));
  auto r = sent.get();
  REQUIRE(r);
  CHECK(to_string(r->status) == std::string{"stopped"});
  CHECK(r->execution_id == root);
  CHECK(process_gone(pid));
  // B's and C's runs are the children of the `ask` steps, stopped with them.
  auto ask_child = [&](const std::string& id) {
    auto steps = rt->db()->steps(id);
    REQUIRE(steps);
    for (auto& s : *steps)
      if (s.step == "ask")
        return s.child_id;
    return std::string{};
  };
  auto b_id = ask_child(root);
  REQUIRE_FALSE(b_id.empty());
  auto c_id = ask_child(b_id);
  REQUIRE_FALSE(c_id.empty());
  for (auto& id : {b_id, c_id}) {
    auto rec = rt->db()->execution(id);
    REQUIRE(rec);
    CHECK(rec->status == execution_status::stopped);
    CHECK(rec->reason == step_reason::parent_stopped);
    CHECK(rec->root_id == root);
  }
  CHECK(rt->db()->execution(b_id)->agent == "b");
  CHECK(rt->db()->execution(c_id)->parent_id == b_id);
  CHECK(rt->db()->agent_runs("", "c")->empty());
  // Resume: the same runs continue; the counting steps do not run again.
  dir.write("go", "");
  auto h = rt->resume(root);
  REQUIRE(h);
  auto done = h->wait();
  REQUIRE(done);
  CHECK(done->status == execution_status::completed);
  CHECK(done->outputs["reply"] == "done by c via b via a");
  CHECK(rt->db()->execution(b_id)->status == execution_status::completed);
  CHECK(rt->db()->execution(c_id)->status == execution_status::completed);
  for (auto& name : {"a", "b", "c"})
    CHECK(lines_of(dir.path + "/" + name + ".count") == 1);
  // Each agent's history has the exchange its run completed.
  CHECK(rt->db()->history("", "a")->size() == 2);
  CHECK(rt->db()->history("", "c")->size() == 2);
  CHECK(rt->db()->history("", "c")->at(0).content == "b asks: a asks: go");
}

TEST_CASE("an agent messaging itself, directly or through another, is stopped by max_depth",
          "[integration][agents]") {
  temp_dir dir;
  auto rt = open_rt(dir.path + "/home");
  auto loop = [](const std::string& name, const std::string& next) {
    return json{{"name", name},
                {"inputs", {"message"}},
                {"steps", {{"ask", {{"agent", next}, {"message", "${inputs.message}"}}}}},
                {"outputs", {{"reply", "${steps.ask.reply}"}}}};
  };
  create(*rt, "self", loop("self", "self"));
  create(*rt, "ping", loop("ping", "pong"));
  create(*rt, "pong", loop("pong", "ping"));
  for (auto& name : {"self", "ping"}) {
    auto r = rt->send_to_agent("", name, "again");
    REQUIRE(r);
    CHECK(to_string(r->status) == std::string{"stopped"});
    CHECK(r->reason == step_reason::max_depth);
    // Depths 0 to 17: the run at depth 17 is past the default max_depth 16.
    auto tree = rt->db()->subtree_ids(r->execution_id);
    REQUIRE(tree);
    CHECK(tree->size() == 18);
  }
}

namespace {

/// The request bodies in the provider double's log `path`, in arrival order.
std::vector<json> requests_in(const std::string& path) {
  std::vector<json> out;
  std::ifstream in{path};
  for (std::string line; std::getline(in, line);) {
    auto e = json::parse(line, nullptr, false);
    if (e.is_object() && e.value("event", "") == "request")
      out.push_back(e["body"]);
  }
  return out;
}

} // namespace

TEST_CASE("the writer and critic example converses for three rounds through a model with one "
          "command",
          "[integration][agents][llm][examples]") {
  temp_dir dir;
  auto home = dir.path + "/home";
  auto log = dir.path + "/requests.jsonl";
  auto r = run_command({"env", "FAKE_LLM_LOG=" + log, "sh",
                        source_dir() + "/examples/writer_critic/run.sh", canopy_binary(), home});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto history = [&](const std::string& agent) {
    auto h = run_canopy(home, {"agent", "history", agent, "--json"});
    REQUIRE(h.exit_code == 0);
    return h.out_json();
  };
  auto writer = history("writer");
  auto critic = history("critic");
  REQUIRE(writer.size() == 6);
  REQUIRE(critic.size() == 6);
  CHECK(writer[0]["content"] == "Write a paragraph about actor runtimes.");
  CHECK_THAT(writer[1]["content"].get<std::string>(),
             Catch::StartsWith("An actor runtime runs many small workers"));
  for (size_t i = 0; i < 6; i += 2) { // each draft reached the critic, each review the writer
    CHECK(critic[i]["content"] == writer[i + 1]["content"]);
    if (i + 2 < 6)
      CHECK(writer[i + 2]["content"] == critic[i + 1]["content"]);
  }
  auto ls = run_canopy(home, {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  auto show = run_canopy(home, {"show", ls.out_json()[0]["id"].get<std::string>(), "--json"});
  REQUIRE(show.exit_code == 0);
  auto outputs = show.out_json()["outputs"];
  CHECK(outputs["final"] == writer[5]["content"]); // the third draft
  CHECK_THAT(outputs["final"].get<std::string>(),
             Catch::EndsWith("while the system keeps serving everyone else."));
  CHECK_THAT(outputs["verdict"].get<std::string>(), Catch::StartsWith("Approved:"));
  // Six model calls, the writer's and the critic's in turn. A call's last
  // message is what the agent was sent; its system message holds the
  // agent's conversation so far, as JSON.
  auto calls = requests_in(log);
  REQUIRE(calls.size() == 6);
  for (auto& c : calls)
    CHECK(c["model"] == "qwen2.5-7b-instruct");
  auto sent = [&](size_t call, size_t message) {
    return calls[call]["messages"][message]["content"].get<std::string>();
  };
  CHECK(sent(1, 1) == writer[1]["content"]); // the critic's first call saw the first draft
  CHECK(sent(5, 1) == writer[5]["content"]);
  CHECK_THAT(sent(5, 0), Catch::Contains(critic[3]["content"].dump())); // its earlier review
  CHECK_THAT(sent(4, 0), Catch::Contains(writer[3]["content"].dump())); // the writer's draft 2
}
