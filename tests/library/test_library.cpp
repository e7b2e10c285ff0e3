// The library as a program sees it: only <canopy/canopy.hpp> and
// libcanopy.so, a real store in a temp folder, real threads.

#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include <canopy/canopy.hpp>

using canopy::errc;
using canopy::json;

namespace {

/// A fresh folder, removed with everything in it.
struct temp_home {
  std::string path;
  temp_home() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "canopy-lib-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_home() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::unique_ptr<canopy::runtime> open(const temp_home& home) {
  canopy::options opts;
  opts.home = home.path + "/home";
  auto rt = canopy::runtime::open(opts);
  REQUIRE(rt);
  return std::move(*rt);
}

/// One `fn` step calling `name` with the input `x`, its result as output `out`.
canopy::graph one_step(const std::string& name) {
  auto g = canopy::graph_builder{"one"}
             .input("x")
             .step("only").fn(name).with({{"x", "${inputs.x}"}})
             .output("out", "${steps.only.out}")
             .build();
  REQUIRE(g);
  return *g;
}

/// Registers `hold`: returns `{"out": "released"}` once `block` is false
/// (or the step is stopped).
void register_hold(canopy::runtime& rt, const std::atomic<bool>& block) {
  REQUIRE(rt.register_fn("hold", [&block](canopy::fn_context& ctx) -> canopy::result<json> {
    while (block && !ctx.stop_requested())
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return json{{"out", "released"}};
  }));
}

canopy::result<json> echo_x(canopy::fn_context& ctx) {
  return json{{"out", ctx.with().value("x", "")}};
}

} // namespace

// -- graphs -----------------------------------------------------------------------------------

TEST_CASE("a graph built in C++ is the graph its JSON document parses to", "[library]") {
  auto built = canopy::graph_builder{"team"}
                 .input("topic")
                 .step("plan").run({"./plan.sh", "${inputs.topic}"}).timeout("30s")
                 .step("read").fn("read").with({{"plan", "${steps.plan.stdout}"}}).needs("plan")
                 .retries(2)
                 .output("summary", "${steps.read.text}")
                 .build();
  REQUIRE(built);
  auto doc = json::parse(R"({"name": "team", "inputs": ["topic"],
    "steps": {"plan": {"run": ["./plan.sh", "${inputs.topic}"], "timeout": "30s"},
              "read": {"fn": "read", "with": {"plan": "${steps.plan.stdout}"},
                       "needs": ["plan"], "retries": 2}},
    "outputs": {"summary": "${steps.read.text}"}})");
  CHECK(built->to_json() == doc);
  auto parsed = canopy::graph::parse(doc);
  REQUIRE(parsed);
  CHECK(parsed->name() == "team");
  CHECK(parsed->inputs() == std::vector<std::string>{"topic"});
  CHECK(parsed->steps() == built->steps());
  CHECK(built->steps() == std::vector<std::string>{"plan", "read"});
  // And back: the document round-trips.
  auto again = canopy::graph::parse(built->to_json(), built->base_dir());
  REQUIRE(again);
  CHECK(again->to_json() == built->to_json());
}

TEST_CASE("the builder reports the parser's errors with their JSON paths", "[library]") {
  canopy::graph_builder b{"broken"};
  b.step("a").fn("noop").needs("nowhere");
  b.step("b").with({{"x", 1}}); // no kind
  auto built = b.build();
  REQUIRE_FALSE(built);
  auto parsed = canopy::graph::parse(b.document());
  REQUIRE_FALSE(parsed);
  CHECK(built.error().code() == errc::invalid);
  REQUIRE(built.error().details().size() == parsed.error().details().size());
  for (size_t i = 0; i < parsed.error().details().size(); ++i) {
    CHECK(built.error().details()[i].path == parsed.error().details()[i].path);
    CHECK(built.error().details()[i].message == parsed.error().details()[i].message);
  }
  std::vector<std::string> paths;
  for (auto& p : built.error().details())
    paths.push_back(p.path);
  CHECK(std::find(paths.begin(), paths.end(), "/steps/a/needs/0") != paths.end());
  CHECK(std::find(paths.begin(), paths.end(), "/steps/b") != paths.end());
  CHECK_THROWS_AS(built.value(), canopy::bad_result_access);
}

TEST_CASE("a builder call that shapes no step is reported at /steps", "[library]") {
  auto built = canopy::graph_builder{"g"}.fn("noop").step("a").fn("noop").build();
  REQUIRE_FALSE(built);
  CHECK(built.error().path() == "/steps");
  CHECK_THAT(built.error().details().front().message, Catch::Contains("fn() called before step()"));
}

TEST_CASE("a graph file that does not exist is an invalid graph, not a crash", "[library]") {
  auto g = canopy::graph::load("/nonexistent/graph.json");
  REQUIRE_FALSE(g);
  CHECK(g.error().code() == errc::invalid);
}

// -- functions and executions ------------------------------------------------------------------

TEST_CASE("a started graph completes with the outputs its function returned", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("echo_x", echo_x));
  auto run = rt->start(one_step("echo_x"), {{"x", "hello"}});
  REQUIRE(run);
  auto done = run->wait();
  REQUIRE(done);
  CHECK(done->status == canopy::execution_status::completed);
  CHECK(done->outputs == json{{"out", "hello"}});
  auto out = run->output();
  REQUIRE(out);
  CHECK(*out == json{{"out", "hello"}});
  CHECK_FALSE(run->running());
}

TEST_CASE("a function name is registered once, and the built-ins are taken", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("f", echo_x));
  auto again = rt->register_fn("f", echo_x);
  REQUIRE_FALSE(again);
  CHECK(again.error().code() == errc::conflict);
  auto builtin = rt->register_fn("echo", echo_x);
  REQUIRE_FALSE(builtin);
  CHECK(builtin.error().code() == errc::conflict);
  CHECK(rt->register_fn("", echo_x).error().code() == errc::invalid);
}

TEST_CASE("start checks the graph's functions against the runtime, with the JSON path",
          "[library]") {
  temp_home home;
  auto rt = open(home);
  auto run = rt->start(one_step("not_registered"), {{"x", "1"}});
  REQUIRE_FALSE(run);
  CHECK(run.error().code() == errc::invalid);
  CHECK(run.error().path() == "/steps/only/fn");
}

TEST_CASE("start refuses inputs the graph does not declare", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("echo_x", echo_x));
  auto run = rt->start(one_step("echo_x"), {{"y", "1"}});
  REQUIRE_FALSE(run);
  CHECK(run.error().code() == errc::invalid);
}

TEST_CASE("fn_fail fails the step and its execution with the message", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("refuse", [](canopy::fn_context&) -> canopy::result<json> {
    return canopy::fn_fail("no input today");
  }));
  auto run = rt->start(one_step("refuse"), {{"x", "1"}});
  REQUIRE(run);
  auto done = run->wait();
  REQUIRE(done);
  CHECK(done->status == canopy::execution_status::failed);
  CHECK_THAT(done->error, Catch::Contains("no input today"));
  auto out = run->output();
  REQUIRE_FALSE(out);
  CHECK(out.error().code() == errc::conflict);
}

TEST_CASE("wait returns only after every subscriber was handed the final event", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("echo_x", echo_x));
  auto g = one_step("echo_x");
  std::atomic<int> finals_seen{0};
  auto all = rt->events([&](const canopy::event& e) {
    if (e.type == "execution.completed")
      ++finals_seen;
  });
  for (int i = 0; i < 40; ++i) {
    auto run = rt->start(g, {{"x", std::to_string(i)}});
    REQUIRE(run);
    std::atomic<bool> tree_saw_end{false};
    auto mine = run->events([&, id = run->id()](const canopy::event& e) {
      if (e.type == "execution.completed" && e.execution_id == id)
        tree_saw_end = true;
    });
    auto done = run->wait();
    REQUIRE(done);
    CHECK(tree_saw_end);
    CHECK(finals_seen == i + 1);
  }
}

TEST_CASE("a stopped execution resumes without running its finished steps again", "[library]") {
  temp_home home;
  auto rt = open(home);
  std::atomic<int> first_calls{0};
  std::atomic<bool> block{true};
  std::promise<void> blocking;
  std::atomic<bool> told{false};
  REQUIRE(rt->register_fn("first", [&](canopy::fn_context&) -> canopy::result<json> {
    ++first_calls;
    return json{{"n", 1}};
  }));
  REQUIRE(rt->register_fn("second", [&](canopy::fn_context& ctx) -> canopy::result<json> {
    while (block) {
      if (!told.exchange(true))
        blocking.set_value();
      if (auto stop = ctx.checkpoint())
        return *stop;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return json{{"n", 2}};
  }));
  auto g = canopy::graph_builder{"two"}
             .step("a").fn("first")
             .step("b").fn("second").needs("a")
             .output("b", "${steps.b.n}")
             .build();
  REQUIRE(g);
  auto run = rt->start(*g);
  REQUIRE(run);
  blocking.get_future().wait();
  auto stopped = run->stop(canopy::stop_mode::graceful);
  REQUIRE(stopped);
  CHECK(*stopped == canopy::stop_outcome::stopped);
  auto st = run->status();
  REQUIRE(st);
  CHECK(st->status == canopy::execution_status::stopped);
  CHECK(st->reason == "requested");
  // A second stop finds nothing to stop.
  auto again = run->stop();
  REQUIRE(again);
  CHECK(*again == canopy::stop_outcome::not_running);

  block = false;
  auto resumed = run->resume();
  REQUIRE(resumed);
  CHECK(resumed->id() == run->id());
  auto done = resumed->wait();
  REQUIRE(done);
  CHECK(done->status == canopy::execution_status::completed);
  CHECK(done->outputs == json{{"b", 2}});
  CHECK(first_calls == 1);
  // A completed execution resumes to itself: nothing runs again.
  auto more = run->resume();
  REQUIRE(more);
  auto same = more->wait();
  REQUIRE(same);
  CHECK(same->status == canopy::execution_status::completed);
  CHECK(first_calls == 1);
}

TEST_CASE("a handle found by id reports what is stored, and unknown ids are not found",
          "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("echo_x", echo_x));
  auto run = rt->start(one_step("echo_x"), {{"x", "kept"}});
  REQUIRE(run);
  REQUIRE(run->wait());
  auto found = rt->find(run->id());
  REQUIRE(found);
  auto done = found->wait(std::chrono::seconds{5});
  REQUIRE(done);
  CHECK(done->outputs == json{{"out", "kept"}});
  auto missing = rt->find("no-such-execution");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == errc::not_found);
  REQUIRE(rt->remove(run->id()));
  CHECK(run->status().error().code() == errc::not_found);
}

TEST_CASE("resume refuses an execution that is live", "[library]") {
  temp_home home;
  auto rt = open(home);
  std::atomic<bool> block{true};
  register_hold(*rt, block);
  auto run = rt->start(one_step("hold"), {{"x", ""}});
  REQUIRE(run);
  auto twice = run->resume();
  REQUIRE_FALSE(twice);
  CHECK(twice.error().code() == errc::conflict);
  block = false;
  REQUIRE(run->wait());
}

TEST_CASE("wait with a timeout gives up on a running execution, which runs on", "[library]") {
  temp_home home;
  auto rt = open(home);
  std::atomic<bool> block{true};
  register_hold(*rt, block);
  auto run = rt->start(one_step("hold"), {{"x", ""}});
  REQUIRE(run);
  auto early = run->wait(std::chrono::milliseconds{50});
  REQUIRE_FALSE(early);
  CHECK(early.error().code() == errc::timeout);
  CHECK(run->running());
  block = false;
  auto done = run->wait();
  REQUIRE(done);
  CHECK(done->outputs == json{{"out", "released"}});
}

TEST_CASE("a registered graph starts by name, newest version first", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("echo_x", echo_x));
  auto v1 = rt->register_graph("greeter", one_step("echo_x"));
  REQUIRE(v1);
  CHECK(*v1 == 1);
  auto v2 = rt->register_graph("greeter", one_step("echo_x"));
  REQUIRE(v2);
  CHECK(*v2 == 2);
  auto run = rt->start("greeter", {{"x", "by name"}});
  REQUIRE(run);
  auto done = run->wait();
  REQUIRE(done);
  CHECK(done->outputs == json{{"out", "by name"}});
  CHECK(rt->start("nobody", {}).error().code() == errc::not_found);
  CHECK(rt->register_graph("bad name!", one_step("echo_x")).error().code() == errc::invalid);
}

TEST_CASE("an agent answers a message through its graph", "[library]") {
  temp_home home;
  auto rt = open(home);
  REQUIRE(rt->register_fn("answer", [](canopy::fn_context& ctx) -> canopy::result<json> {
    return json{{"text", "you said " + ctx.with().value("m", "")}};
  }));
  auto g = canopy::graph_builder{"helper"}
             .input("message")
             .step("answer").fn("answer").with({{"m", "${inputs.message}"}})
             .output("reply", "${steps.answer.text}")
             .build();
  REQUIRE(g);
  auto made = rt->create_agent("helper", *g);
  REQUIRE(made);
  CHECK(*made);
  auto reply = rt->send("helper", "hi");
  REQUIRE(reply);
  CHECK(reply->status == canopy::execution_status::completed);
  CHECK(reply->reply == "you said hi");
  CHECK(rt->send("nobody", "hi").error().code() == errc::not_found);
  auto no_reply = canopy::graph_builder{"mute"}.input("message").step("a").fn("noop").build();
  REQUIRE(no_reply);
  CHECK(rt->create_agent("mute", *no_reply).error().code() == errc::invalid);
}

TEST_CASE("open leaves SIGPIPE alone when told to", "[library]") {
  temp_home home;
  std::signal(SIGPIPE, SIG_DFL);
  {
    canopy::options opts;
    opts.home = home.path + "/a";
    opts.ignore_sigpipe = false;
    auto rt = canopy::runtime::open(opts);
    REQUIRE(rt);
    auto now = std::signal(SIGPIPE, SIG_DFL);
    CHECK(now == SIG_DFL);
  }
  {
    canopy::options opts;
    opts.home = home.path + "/b";
    auto rt = canopy::runtime::open(opts);
    REQUIRE(rt);
    auto now = std::signal(SIGPIPE, SIG_DFL);
    CHECK(now == SIG_IGN);
  }
}

TEST_CASE("open refuses a runtime that could run no subprocess, naming the option",
          "[library]") {
  temp_home home;
  canopy::options opts;
  opts.home = home.path + "/home";
  opts.max_parallel = 0;
  auto rt = canopy::runtime::open(opts);
  REQUIRE_FALSE(rt);
  CHECK(rt.error().code() == errc::invalid);
  CHECK(rt.error().message().find("max_parallel") != std::string::npos);
}

TEST_CASE("a home that cannot be created is store_unreachable", "[library]") {
  canopy::options opts;
  opts.home = "/proc/canopy-cannot-be-here";
  auto rt = canopy::runtime::open(opts);
  REQUIRE_FALSE(rt);
  CHECK(rt.error().code() == errc::store_unreachable);
}
