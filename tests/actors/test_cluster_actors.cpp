// The cluster actors over real loopback TCP (CAF's middleman): a supervisor
// runtime and worker node actors in actor systems of their own. Steps placed
// on a worker run there; a stop crosses the connection; a worker that is
// lost gives its steps back as `pending`/`node_lost`, and they run elsewhere.
// The multi-process tests are in tests/integration/test_cluster.cpp.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>

#include "actors/cluster.hpp"
#include "runtime/runtime.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy;
using namespace canopy::test;
using namespace std::chrono_literals;

namespace {

/// A worker node in an actor system of its own, joined to `port`.
struct worker {
  worker(uint16_t port, const std::string& name, tool_table tools,
         const std::string& secret = "s3cret") {
    add_cluster_types(cfg);
    configure_middleman(cfg, millis{200}, millis{1000});
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
    worker_options o;
    o.host = "127.0.0.1";
    o.port = port;
    o.secret = secret;
    o.self.name = name;
    o.self.slots = 2;
    for (auto& kv : tools)
      o.self.tools.push_back(kv.first);
    o.tools = std::move(tools);
    o.heartbeat = millis{200};
    o.timeout = millis{1000};
    node = spawn_worker_node(*sys, o);
  }
  ~worker() { stop(); }
  void stop() {
    if (!sys)
      return;
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    node = nullptr;
    sys.reset();
  }
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor node;
};

std::unique_ptr<runtime> open_supervisor(const std::string& home, tool_table tools = {}) {
  runtime_options opts;
  opts.home = home;
  opts.tools = std::move(tools);
  cluster_listen c;
  c.secret = "s3cret";
  c.heartbeat = millis{200};
  c.timeout = millis{1000};
  opts.cluster = c;
  auto rt = runtime::open(opts);
  REQUIRE(rt);
  REQUIRE((*rt)->cluster_port() != 0);
  return std::move(*rt);
}

/// Waits until the supervisor lists `n` nodes.
void wait_members(runtime& rt, size_t n) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (rt.nodes().size() != n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  REQUIRE(rt.nodes().size() == n);
}

tool_def tool(const std::string& name, std::vector<std::string> argv);

tool_def tool(const std::string& name, std::vector<std::string> argv) {
  tool_def t;
  t.name = name;
  for (auto& a : argv)
    t.argv.push_back(a);
  return t;
}

std::string wait_line(const std::string& path, std::chrono::seconds timeout = 30s) {
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

} // namespace

TEST_CASE("a worker with the secret joins and one without it is refused", "[actors][cluster]") {
  temp_dir dir;
  auto rt = open_supervisor(dir.path + "/home");
  tool_table grep;
  grep["grep"] = tool("grep", {"grep", "x"});
  worker w1{rt->cluster_port(), "w1", grep};
  wait_members(*rt, 2);
  auto nodes = rt->nodes();
  CHECK(nodes[0].name == "supervisor");
  CHECK(nodes[0].supervisor);
  CHECK(nodes[1].name == "w1");
  CHECK(nodes[1].slots == 2);
  CHECK(nodes[1].tools == std::vector<std::string>{"grep"});
  worker bad{rt->cluster_port(), "w2", {}, "wrong"};
  // The refusal reaches the bad worker: its node actor quits.
  caf::scoped_actor self{*bad.sys};
  self->monitor(bad.node);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(30s) >> [] {});
  CHECK(down);
  CHECK(rt->nodes().size() == 2);
}

TEST_CASE("tool steps run on the workers that have their tools, and a stop crosses to them",
          "[actors][cluster]") {
  temp_dir dir;
  // The supervisor has no tools: both steps must run on workers.
  auto rt = open_supervisor(dir.path + "/home");
  tool_table t1, t2;
  t1["write"] = tool("write", {"sh", "-c", "echo ${with.text} > " + dir.path + "/w1.out"});
  t2["hold"] = tool("hold", {"sh", "-c", "echo $$ > " + dir.path + "/hold.pid; exec sleep 60"});
  worker w1{rt->cluster_port(), "w1", t1};
  worker w2{rt->cluster_port(), "w2", t2};
  wait_members(*rt, 3);
  auto parsed = rt->parse_document({{"name", "spread"},
                                    {"steps",
                                     {{"a", {{"tool", "write"}, {"with", {{"text", "hi"}}}}},
                                      {"b", {{"tool", "hold"}, {"needs", {"a"}}}}}}});
  REQUIRE(parsed);
  auto h = rt->start(parsed.value, json::object());
  REQUIRE(h);
  auto pid = std::stol(wait_line(dir.path + "/hold.pid"));
  CHECK(wait_line(dir.path + "/w1.out") == "hi");
  REQUIRE(rt->stop(h->id(), false));
  REQUIRE(h->wait_for(millis{60'000}));
  auto rec = h->wait();
  REQUIRE(rec);
  CHECK(rec->status == execution_status::stopped);
  CHECK(process_gone(pid)); // the snapshot waited for the remote runner's down
  auto steps = rt->db()->steps(h->id());
  REQUIRE(steps);
  std::map<std::string, step_record> by;
  for (auto& s : *steps)
    by[s.step] = s;
  CHECK(by["a"].status == step_status::completed);
  CHECK(by["a"].node == "w1");
  CHECK(by["b"].status == step_status::pending);
  CHECK(by["b"].node == "w2");
  CHECK(by["b"].pid == 0); // a pid on another host is never recorded
}

TEST_CASE("a lost worker's running step returns to pending with node_lost and runs on another",
          "[actors][cluster]") {
  temp_dir dir;
  auto rt = open_supervisor(dir.path + "/home");
  tool_table t;
  t["hold"] = tool("hold", {"sh", "-c",
                            "echo $$ >> " + dir.path + "/pids; while [ ! -f " + dir.path
                              + "/go ]; do sleep 0.02; done; echo done"});
  auto w1 = std::make_unique<worker>(rt->cluster_port(), "w1", t);
  wait_members(*rt, 2);
  auto parsed = rt->parse_document(
    {{"name", "failover"}, {"steps", {{"once", {{"fn", "noop"}}}, {"b", {{"tool", "hold"}, {"needs", {"once"}}}}}}});
  REQUIRE(parsed);
  auto h = rt->start(parsed.value, json::object());
  REQUIRE(h);
  auto first = std::stol(wait_line(dir.path + "/pids"));
  worker w2{rt->cluster_port(), "w2", t};
  wait_members(*rt, 3);
  w1->stop(); // the worker goes away: its steps die with it, the connection closes
  CHECK(process_gone(first));
  dir.write("go", "");
  REQUIRE(h->wait_for(millis{60'000}));
  auto rec = h->wait();
  REQUIRE(rec);
  CHECK(rec->status == execution_status::completed);
  auto steps = rt->db()->steps(h->id());
  REQUIRE(steps);
  for (auto& s : *steps)
    if (s.step == "b") {
      CHECK(s.node == "w2");
      CHECK(s.attempt >= 2); // a placement on the lost node may fail once more
    } else {
      CHECK(s.attempt == 1);
    }
  auto events = rt->db()->tree_events(h->id());
  REQUIRE(events);
  bool lost = false;
  for (auto& e : *events)
    lost = lost || (e.type == "step.pending" && e.reason == "node_lost");
  CHECK(lost);
}
