// The `canopy` command line, driven as a user drives it: real processes, a
// real store in a temp folder, real subprocess steps.

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "persistence/duration.hpp"
#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

std::string fixture(const std::string& name) {
  return source_dir() + "/tests/fixtures/" + name;
}


/// The largest number of intervals [start, end) that overlap at one moment.
size_t max_overlap(std::vector<std::pair<int64_t, int64_t>> iv) {
  std::vector<std::pair<int64_t, int>> points;
  for (auto& [a, b] : iv) {
    points.emplace_back(a, +1);
    points.emplace_back(b, -1);
  }
  // Ends sort before starts at the same millisecond.
  std::sort(points.begin(), points.end());
  size_t cur = 0, best = 0;
  for (auto& p : points) {
    cur = p.second > 0 ? cur + 1 : cur - 1;
    best = std::max(best, cur);
  }
  return best;
}

/// Every execution of `home` (`ls --json --all`); [] when no store was
/// ever created there.
json ls_json(const std::string& home) {
  if (!has_store(home))
    return json::array();
  auto r = run_canopy(home, {"ls", "--json", "--all"});
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

} // namespace

// -- validation -------------------------------------------------------------------

TEST_CASE("every graph rejection exits 2 naming its JSON path and stores nothing",
          "[integration][cli][validation]") {
  temp_dir home;
  auto expected = json::parse(read_file(fixture("invalid/expected.json")));
  REQUIRE(expected.size() >= 12);
  for (auto& e : expected) {
    auto file = fixture("invalid/" + e["file"].get<std::string>());
    INFO("fixture " << file);
    auto path = e["path"].get<std::string>();
    auto contains = e["contains"].get<std::string>();
    for (auto cmd : {"validate", "run"}) {
      INFO("canopy " << cmd);
      auto r = run_canopy(home.path, {cmd, file});
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains(contains));
      if (!path.empty())
        CHECK_THAT(r.err, Catch::Contains(path + ": "));
    }
  }
  CHECK(ls_json(home.path) == json::array());
}

TEST_CASE("a graph over 8 MiB, a missing file and bad inputs exit 2 and store nothing",
          "[integration][cli][validation]") {
  temp_dir home;
  temp_dir files;
  std::string big = R"({"steps": {"a": {"fn": "echo", "with": {"pad": ")"
                    + std::string(9u << 20, 'x') + R"("}}}})";
  auto big_file = files.write("big.json", big);
  auto r = run_canopy(home.path, {"run", big_file});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("larger than 8 MiB"));

  r = run_canopy(home.path, {"run", files.path + "/missing.json"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("missing.json"));

  auto g = files.write("in.json", R"({"inputs": ["topic"], "steps": {"a": {"fn": "noop"}}})");
  r = run_canopy(home.path, {"run", g});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("missing input 'topic'"));
  r = run_canopy(home.path, {"run", g, "--input", "topic=x", "--input", "extra=y"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("undeclared input 'extra'"));
  r = run_canopy(home.path, {"run", g, "--input", "topic:={bad"});
  CHECK(r.exit_code == 2);
  r = run_canopy(home.path, {"run", g, "--no-such-flag"});
  CHECK(r.exit_code == 2);
  CHECK(ls_json(home.path) == json::array());
}

TEST_CASE("validate accepts a valid graph with a nested file", "[integration][cli][validation]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"validate", fixture("valid/nested.json")});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("ok"));
}

TEST_CASE("validate checks tool names against the tools of --config, and without it the error says "
          "where tools come from",
          "[integration][cli][validation]") {
  temp_dir home;
  auto g = home.write("t.json", R"({"name": "t", "steps": {"s": {"tool": "search"}}})");
  auto cfg = home.write("node.json", R"({"tools": {"search": {"argv": ["true"]}}})");
  auto typo = home.write("typo.json", R"({"tools": {"serch": {"argv": ["true"]}}})");

  auto r = run_canopy(home.path, {"validate", g});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/steps/s/tool: unknown tool 'search' (no tools are "
                                    "registered on this node); tools come from a node config "
                                    "file: pass it with --config FILE"));
  r = run_canopy(home.path, {"validate", g, "--config", cfg});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("ok: graph 't'"));
  r = run_canopy(home.path, {"validate", g, "--config", typo});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown tool 'search' (registered: serch); did you mean "
                                    "'serch'?"));
  CHECK(r.err.find("--config FILE") == std::string::npos);
  r = run_canopy(home.path, {"validate", g, "--config", home.path + "/missing.json"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("missing.json"));
  r = run_canopy(home.path, {"validate", g, "--config", cfg, "--server", "http://127.0.0.1:1"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--config is for a local check"));
  // `run` says the same, and stores nothing.
  r = run_canopy(home.path, {"run", g});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("pass it with --config FILE"));
  CHECK(ls_json(home.path) == json::array());
}

// -- running ----------------------------------------------------------------------------

TEST_CASE("a three-level nested graph records lineage and outputs", "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  g.write("leaf.json", R"({"inputs": ["word"],
    "steps": {"shout": {"run": ["sh", "-c", "printf '%s!' \"$W\""], "env": {"W": "${inputs.word}"}}},
    "outputs": {"text": "${steps.shout.stdout}"}})");
  g.write("sub/middle.json", R"({"inputs": ["word"],
    "steps": {"inner": {"graph": "../leaf.json", "with": {"word": "${inputs.word}"}}},
    "outputs": {"text": "${steps.inner.text}"}})");
  auto root = g.write("root.json", R"({"name": "root", "inputs": ["word"],
    "steps": {"outer": {"graph": "sub/middle.json", "with": {"word": "${inputs.word}"}}},
    "outputs": {"result": "${steps.outer.text}"}})");
  auto r = run_canopy(home.path, {"run", root, "--input", "word=canopy", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  REQUIRE(doc.is_object());
  CHECK(doc["status"] == "completed");
  CHECK(doc["outputs"]["result"] == "canopy!");

  auto show = run_canopy(home.path, {"show", doc["id"].get<std::string>(), "--json"});
  REQUIRE(show.exit_code == 0);
  auto tree = show.out_json();
  auto root_id = tree["id"];
  CHECK(tree["depth"] == 0);
  CHECK(tree["parent_id"].is_null());
  CHECK(tree["root_id"] == root_id);
  REQUIRE(tree["children"].size() == 1);
  auto& mid = tree["children"][0];
  CHECK(mid["parent_id"] == root_id);
  CHECK(mid["root_id"] == root_id);
  CHECK(mid["depth"] == 1);
  CHECK(mid["parent_step"] == "outer");
  CHECK(mid["status"] == "completed");
  CHECK(tree["steps"]["outer"]["child_id"] == mid["id"]);
  REQUIRE(mid["children"].size() == 1);
  auto& leaf = mid["children"][0];
  CHECK(leaf["parent_id"] == mid["id"]);
  CHECK(leaf["root_id"] == root_id);
  CHECK(leaf["depth"] == 2);
  CHECK(leaf["parent_step"] == "inner");
  CHECK(leaf["outputs"]["text"] == "canopy!");
  CHECK(leaf["steps"]["shout"]["status"] == "completed");
  CHECK(leaf["steps"]["shout"]["result"]["stdout"] == "canopy!");
  CHECK(leaf["steps"]["shout"]["result"]["exit_code"] == 0);

  // `show` of a child gives its subtree; `ls` lists roots unless --all.
  auto sub = run_canopy(home.path, {"show", mid["id"].get<std::string>(), "--json"});
  REQUIRE(sub.exit_code == 0);
  CHECK(sub.out_json()["children"][0]["id"] == leaf["id"]);
  auto ls = run_canopy(home.path, {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  CHECK(ls.out_json().size() == 1);
  CHECK(ls_json(home.path).size() == 3);
}

TEST_CASE("independent steps run at the same time", "[integration][cli]") {
  // A rendezvous: each step waits for the other's marker, so the graph can
  // only complete when both run at once (each gives up after 30 s).
  temp_dir home;
  temp_dir g;
  auto file = g.write("pair.json", R"({"steps": {
    "a": {"run": ["sh", "-c", "touch a.up; i=0; while [ ! -e b.up ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; sleep 0.01; done"]},
    "b": {"run": ["sh", "-c", "touch b.up; i=0; while [ ! -e a.up ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 9; sleep 0.01; done"]}}})");
  auto r = run_canopy(home.path, {"run", file, "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  auto& a = doc["steps"]["a"];
  auto& b = doc["steps"]["b"];
  // Recorded times overlap too.
  CHECK(ms_of(a["started_at"]) <= ms_of(b["ended_at"]));
  CHECK(ms_of(b["started_at"]) <= ms_of(a["ended_at"]));
}

TEST_CASE("no more than max_parallel subprocesses run at once", "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  json steps = json::object();
  for (int i = 0; i < 8; ++i)
    steps["s" + std::to_string(i)] = {{"run", {"sh", "-c", "sleep 0.1"}}};
  auto file = g.write("fan.json", json{{"steps", steps}}.dump());
  auto r = run_canopy(home.path, {"--max-parallel", "2", "run", file, "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  std::vector<std::pair<int64_t, int64_t>> iv;
  for (auto& kv : doc["steps"].items())
    iv.emplace_back(ms_of(kv.value()["started_at"]), ms_of(kv.value()["ended_at"]));
  CHECK(iv.size() == 8);
  CHECK(max_overlap(iv) <= 2);
  CHECK(max_overlap(iv) >= 1);
  // Waiting for a slot is visible as `queued`.
  auto events = run_canopy(home.path, {"events", doc["id"].get<std::string>(), "--json"});
  REQUIRE(events.exit_code == 0);
  CHECK_THAT(events.out, Catch::Contains("\"step.queued\""));
}

TEST_CASE("exit codes follow the execution's status", "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  auto ok = g.write("ok.json", R"({"steps": {"a": {"fn": "noop"}}})");
  auto bad = g.write("bad.json", R"({"steps": {"a": {"run": ["sh", "-c", "echo out; echo oops >&2; exit 3"]}, "b": {"fn": "sleep", "with": {"ms": 60000}}}})");
  CHECK(run_canopy(home.path, {"run", ok}).exit_code == 0);
  auto r = run_canopy(home.path, {"run", bad, "--json"});
  CHECK(r.exit_code == 1);
  auto doc = r.out_json();
  CHECK(doc["status"] == "failed");
  CHECK(doc["reason"] == "step_failed");
  CHECK(doc["outputs"].is_null());
  // A failed step keeps its result and error.
  CHECK(doc["steps"]["a"]["status"] == "failed");
  CHECK(doc["steps"]["a"]["result"]["exit_code"] == 3);
  CHECK(doc["steps"]["a"]["result"]["stderr"] == "oops\n");
  CHECK(doc["steps"]["a"]["error"] == "exit code 3");
  // Its running sibling was stopped and returned to pending.
  CHECK(doc["steps"]["b"]["status"] == "pending");
  CHECK(doc["steps"]["b"]["reason"] == "sibling_failed");
  CHECK_THAT(r.err, Catch::Contains("canopy --home"));
  CHECK(run_canopy(home.path, {"show", "01nosuchexecution000000000"}).exit_code == 4);
}

TEST_CASE("retries, timeout, env, stdin and cwd reach the subprocess", "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  g.write("work/marker.txt", "here\n");
  auto file = g.write("io.json", R"({"inputs": ["name"], "steps": {
    "flaky": {"run": ["sh", "-c", "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; [ $n -ge 3 ]"],
              "cwd": "work", "retries": 2, "retry_delay": "10ms"},
    "slow": {"run": ["sleep", "30"], "needs": ["flaky", "io"], "timeout": "100ms", "grace": {"interrupt": "50ms", "terminate": "50ms"}, "retries": 1, "retry_delay": "10ms"},
    "io": {"run": ["sh", "-c", "cat marker.txt; printf '%s|' \"$GREETING\"; cat"], "cwd": "work",
           "env": {"GREETING": "hi ${inputs.name}"}, "stdin": "from stdin"}}})");
  auto r = run_canopy(home.path, {"run", file, "--input", "name=ann", "--json"});
  CHECK(r.exit_code == 1); // `slow` times out twice
  auto doc = r.out_json();
  CHECK(doc["steps"]["flaky"]["status"] == "completed");
  CHECK(doc["steps"]["flaky"]["attempt"] == 3);
  CHECK(doc["steps"]["io"]["result"]["stdout"] == "here\nhi ann|from stdin");
  CHECK(doc["steps"]["slow"]["status"] == "failed");
  CHECK(doc["steps"]["slow"]["attempt"] == 2);
  CHECK(doc["steps"]["slow"]["error"] == "timeout");
  auto events = run_canopy(home.path, {"events", doc["id"].get<std::string>(), "--json"});
  CHECK_THAT(events.out, Catch::Contains("\"step.retry\""));
}

TEST_CASE("events are numbered without gaps and follow the tree", "[integration][cli]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"run", fixture("valid/nested.json"), "--input", "topic=x", "--json"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  auto ev = run_canopy(home.path, {"events", id, "--json"});
  REQUIRE(ev.exit_code == 0);
  std::vector<json> lines;
  std::istringstream in{ev.out};
  for (std::string line; std::getline(in, line);)
    lines.push_back(json::parse(line));
  REQUIRE(lines.size() >= 4);
  CHECK(lines.front()["type"] == "execution.queued");
  for (size_t i = 1; i < lines.size(); ++i)
    CHECK(lines[i]["seq"].get<uint64_t>() == lines[i - 1]["seq"].get<uint64_t>() + 1);
  std::set<std::string> types;
  for (auto& l : lines) {
    types.insert(l["type"].get<std::string>());
    CHECK(l["root_id"] == id);
  }
  CHECK(types.count("step.started") == 1);
  CHECK(types.count("execution.completed") == 1);
  // Human lines too.
  auto human = run_canopy(home.path, {"events", id});
  CHECK_THAT(human.out, Catch::Contains("execution.completed"));
}

TEST_CASE("run --detach prints the id and the execution completes in the background",
          "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  auto file = g.write("bg.json", R"({"steps": {"a": {"run": ["sh", "-c", "echo done"]}}})");
  auto r = run_canopy(home.path, {"run", file, "--detach", "--json"}, 30s);
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  // Follow until the tree stops running.
  auto follow = run_canopy(home.path, {"events", id, "--follow", "--json"}, 60s);
  CHECK(follow.exit_code == 0);
  CHECK_THAT(follow.out, Catch::Contains("execution.completed"));
  auto show = run_canopy(home.path, {"show", id, "--json"});
  CHECK(show.out_json()["status"] == "completed");
}

TEST_CASE("run --detach works as the first command on a home that does not exist yet",
          "[integration][cli]") {
  temp_dir dir;
  temp_dir g;
  auto home = dir.path + "/new/home";
  auto file = g.write("bg.json", R"({"steps": {"a": {"run": ["sh", "-c", "echo done"]}}})");
  auto r = run_canopy(home, {"run", file, "--detach", "--json"}, 30s);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  auto follow = run_canopy(home, {"events", id, "--follow", "--json"}, 60s);
  CHECK_THAT(follow.out, Catch::Contains("execution.completed"));
}

// -- crash safety -------------------------------------------------------------------------

TEST_CASE("a SIGKILLed run leaves a readable store with every completed result",
          "[integration][cli][crash]") {
  temp_dir home;
  temp_dir g;
  // A chain of 40 short steps: the kill lands in the middle of it.
  json steps = json::object();
  for (int i = 0; i < 40; ++i) {
    json s = {{"run", {"sh", "-c", "echo step" + std::to_string(i) + "; sleep 0.02"}}};
    if (i > 0)
      s["needs"] = {"s" + std::to_string(i - 1)};
    steps["s" + std::to_string(i)] = s;
  }
  auto file = g.write("chain.json", json{{"steps", steps}}.dump());
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home.path, "run", file};
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  // Kill it once a few steps have completed (an event, not a timer).
  REQUIRE(wait_for_output(*p, [](const std::string& out) {
    size_t n = 0;
    for (size_t pos = 0; (pos = out.find("step.completed", pos)) != std::string::npos; ++pos)
      ++n;
    return n >= 5;
  }));
  p->signal_group(SIGKILL);
  REQUIRE(wait_exit(*p));
  CHECK(p->term_signal() == SIGKILL);

  auto ls = run_canopy(home.path, {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  REQUIRE(ls.out_json().size() == 1);
  auto id = ls.out_json()[0]["id"].get<std::string>();
  auto show = run_canopy(home.path, {"show", id, "--json"});
  REQUIRE(show.exit_code == 0);
  auto doc = show.out_json();
  // The owner died: the next command that opened the store said so.
  CHECK(doc["status"] == "stopped");
  CHECK(doc["reason"] == "interrupted");
  size_t completed = 0;
  for (auto& kv : doc["steps"].items()) {
    auto& s = kv.value();
    INFO("step " << kv.key());
    CHECK(s["status"] != "running");
    CHECK(s["status"] != "queued");
    if (s["status"] == "completed") {
      ++completed;
      CHECK(s["result"]["exit_code"] == 0);
      CHECK(s["result"]["stdout"] == "step" + kv.key().substr(1) + "\n");
    }
    if (s["status"] == "pending" && s["attempt"].get<int>() > 0)
      CHECK(s["reason"] == "interrupted");
    // Whatever was running when the owner died must not linger: the command
    // that recovered the execution killed its process group.
    if (s.contains("pid") && s["status"] == "pending")
      CHECK(process_gone(s["pid"].get<long>()));
  }
  CHECK(completed >= 5);
  // The human views read it too.
  CHECK(run_canopy(home.path, {"show", id}).exit_code == 0);
  CHECK(run_canopy(home.path, {"events", id}).exit_code == 0);
  // And it resumes to completion without rerunning completed steps.
  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  CHECK(resumed.exit_code == 0);
  auto done = resumed.out_json();
  CHECK(done["status"] == "completed");
  for (auto& kv : done["steps"].items())
    CHECK(kv.value()["status"] == "completed");
}

// -- a busy store (runtime/docs/reference/cli.md#client-options) ------------------------------------------------------

namespace {

/// Holds the writers' lock of a home as every canopy writer takes it (the
/// coupling: `flock(LOCK_EX)` on `canopy::core::store::write_lock_path(home)`, see
/// persistence/store.hpp), so every canopy process writing that home waits.
struct home_write_lock {
  explicit home_write_lock(const std::string& home) {
    fd = ::open(canopy::core::store::write_lock_path(home).c_str(), O_RDWR | O_CREAT | O_CLOEXEC,
                0644);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  }
  ~home_write_lock() { release(); }
  home_write_lock(const home_write_lock&) = delete;
  home_write_lock& operator=(const home_write_lock&) = delete;
  void release() {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }
  int fd = -1;
};

/// A graph whose step `wait` runs until the file `go` exists, then `after`.
std::string wait_for_file_graph(const temp_dir& dir, const std::string& go) {
  json steps = {
    {"wait", {{"run", {"sh", "-c", "while [ ! -f '" + go + "' ]; do sleep 0.02; done"}}}},
    {"after", {{"fn", "noop"}, {"needs", {"wait"}}}}};
  return dir.write("wait.json", json{{"name", "waiter"}, {"steps", steps}}.dump());
}

/// Starts `canopy run FILE` in the background; returns once its step started.
canopy::core::subprocess start_run(const std::string& home, const std::string& file) {
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home, "run", file};
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  REQUIRE(wait_for_output(*p, [](const std::string& out) {
    return out.find("step.started") != std::string::npos;
  }));
  return std::move(*p);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

TEST_CASE("a write kept waiting over 5 s for the store exits 5 while reads keep working",
          "[integration][cli][busy]") {
  temp_dir home;
  temp_dir g;
  auto go = g.path + "/go";
  auto run = start_run(home.path, wait_for_file_graph(g, go));
  auto listed = ls_json(home.path);
  REQUIRE(listed.size() == 1);
  auto id = listed[0]["id"].get<std::string>();
  const std::string busy = "error: the store at " + home.path
                           + " is busy: another process has held its write lock for over 5 s";
  {
    home_write_lock lock{home.path};
    auto t0 = std::chrono::steady_clock::now();
    auto stop = run_canopy(home.path, {"stop", id}, 60s);
    auto took = seconds_since(t0);
    CHECK(stop.exit_code == 5);
    CHECK_THAT(stop.err, Catch::Contains(busy));
    CHECK(took >= 5.0);
    CHECK(took < 30.0);
    // Starting an execution is a write too.
    t0 = std::chrono::steady_clock::now();
    auto other = run_canopy(home.path, {"run", wait_for_file_graph(g, go)}, 60s);
    took = seconds_since(t0);
    CHECK(other.exit_code == 5);
    CHECK_THAT(other.err, Catch::Contains(busy));
    CHECK(took < 30.0);
    // Reads work meanwhile, and nothing of the failed writes was stored.
    auto ls = run_canopy(home.path, {"ls", "--json"}, 60s);
    CHECK(ls.exit_code == 0);
    REQUIRE(ls.out_json().size() == 1);
    CHECK(ls.out_json()[0]["status"] == "running");
    auto show = run_canopy(home.path, {"show", id, "--json"}, 60s);
    CHECK(show.exit_code == 0);
    CHECK(show.out_json()["steps"]["wait"]["status"] == "running");
    CHECK(run_canopy(home.path, {"events", id}, 60s).exit_code == 0);
  }
  // Once the holder lets go, the same stop goes through.
  auto stop = run_canopy(home.path, {"stop", id});
  CHECK(stop.exit_code == 0);
  CHECK(stop.out == "stopped (requested)\n");
  REQUIRE(wait_exit(run));
  CHECK(run.exit_code() == 3);
}

TEST_CASE("a run whose commit waits over 5 s for the store exits 5 and resumes later",
          "[integration][cli][busy]") {
  temp_dir home;
  temp_dir g;
  auto go = g.path + "/go";
  auto run = start_run(home.path, wait_for_file_graph(g, go));
  auto id = ls_json(home.path)[0]["id"].get<std::string>();
  {
    home_write_lock lock{home.path};
    // The step finishes now; recording it has to wait for the lock.
    g.write("go", "");
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(wait_exit(run, 60s));
    auto took = seconds_since(t0);
    CHECK(run.exit_code() == 5);
    CHECK_THAT(run.err().data,
               Catch::Contains("error: the store at " + home.path
                               + " is busy: another process has held its write lock for "
                                 "over 5 s"));
    CHECK_THAT(run.err().data, Catch::Contains("resume " + id));
    CHECK(took >= 5.0);
    CHECK(took < 30.0);
    // The owner is gone but the store cannot be written: a read shows the
    // last recorded state and says that it did not recover.
    auto show = run_canopy(home.path, {"show", id, "--json"}, 60s);
    CHECK(show.exit_code == 0);
    CHECK(show.out_json()["status"] == "running");
    CHECK_THAT(show.err, Catch::Contains("without recovering"));
  }
  // The next command that can write turns it into stopped/interrupted.
  auto show = run_canopy(home.path, {"show", id, "--json"});
  REQUIRE(show.exit_code == 0);
  CHECK(show.out_json()["status"] == "stopped");
  CHECK(show.out_json()["reason"] == "interrupted");
  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.out_json()["status"] == "completed");
}

// -- the command line itself ----------------------------------------------

TEST_CASE("canopy --version and canopy version print the version, and a misspelt command is "
          "named with the closest one",
          "[integration][cli]") {
  temp_dir home;
  for (auto args : {std::vector<std::string>{"--version"}, {"version"}}) {
    auto r = run_canopy(home.path, args);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::StartsWith("canopy ") && Catch::Contains("."));
  }
  auto typo = run_canopy(home.path, {"lst"});
  CHECK(typo.exit_code == 2);
  CHECK_THAT(typo.err, Catch::Contains("unknown command 'lst'")
                         && Catch::Contains("did you mean 'ls'?"));
  auto after_option = run_canopy(home.path, {"--max-parallel", "2", "stpo", "x"});
  CHECK(after_option.exit_code == 2);
  CHECK_THAT(after_option.err, Catch::Contains("did you mean 'stop'?"));
  auto far = run_canopy(home.path, {"frobnicate"});
  CHECK(far.exit_code == 2);
  CHECK_THAT(far.err, Catch::Contains("unknown command 'frobnicate'"));
  CHECK_THAT(far.err, !Catch::Contains("did you mean"));
  CHECK(!has_store(home.path));
}

TEST_CASE("on a home where nothing ran the listings are empty, show, events and logs answer "
          "4, and no reading command creates the home",
          "[integration][cli]") {
  temp_dir dir;
  auto typo = dir.path + "/typo";
  auto empty = dir.path + "/empty";
  REQUIRE(::mkdir(empty.c_str(), 0755) == 0);
  const std::string id = "01nosuchexecution000000000";
  auto line = [](const std::vector<std::string>& args) {
    std::string out = "canopy";
    for (auto& a : args)
      out += " " + a;
    return out;
  };
  for (auto& home : {typo, empty}) {
    INFO("home " << home);
    // A table is its header alone, and stderr names the folder looked at.
    for (auto args : {std::vector<std::string>{"ls"}, {"agent", "ls"}}) {
      auto r = run_canopy(home, args);
      INFO(line(args) << ": " << r.err);
      CHECK(r.exit_code == 0);
      CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
      CHECK_THAT(r.out, Catch::StartsWith(args.front() == "ls" ? "ID " : "NAME "));
      CHECK_THAT(r.err, Catch::Contains("no canopy home at '" + home + "'"));
    }
    // JSON is the empty array, with nothing on stderr.
    for (auto args : {std::vector<std::string>{"ls", "--json"}, {"ls", "-o", "json"},
                      {"ls", "--json", "--all", "--status", "failed"}, {"agent", "ls", "--json"}}) {
      auto r = run_canopy(home, args);
      INFO(line(args) << ": " << r.err);
      CHECK(r.exit_code == 0);
      CHECK(r.out == "[]\n");
      CHECK(r.err.empty());
    }
    // An id is unknown there.
    for (auto args : {std::vector<std::string>{"show", id}, {"events", id}, {"logs", id}}) {
      auto r = run_canopy(home, args);
      INFO(line(args) << ": " << r.err);
      CHECK(r.exit_code == 4);
      CHECK_THAT(r.err, Catch::Contains("no canopy home at '" + home + "'"));
    }
  }
  struct stat st;
  CHECK(::stat(typo.c_str(), &st) != 0); // not even the folder
  CHECK(std::filesystem::is_empty(empty));
}

TEST_CASE("a misspelt step, key or function in a graph is named with the closest known one",
          "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  auto file = g.write("typo.json", R"({"steps": {
    "fetch": {"fn": "echo", "with": {"v": 1}},
    "parse": {"fn": "ecoh", "needs": ["fecth"], "with": {"x": "${steps.fecht.v}"}},
    "store": {"fn": "noop", "neds": []}}})");
  auto r = run_canopy(home.path, {"validate", file});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/steps/parse/needs/0: unknown step 'fecth' in needs; did "
                                    "you mean 'fetch'?"));
  CHECK_THAT(r.err, Catch::Contains("unknown step 'fecht'; did you mean 'fetch'?"));
  CHECK_THAT(r.err, Catch::Contains("unknown function 'ecoh'") && Catch::Contains("did you mean 'echo'?"));
  CHECK_THAT(r.err, Catch::Contains("unknown key 'neds'") && Catch::Contains("did you mean 'needs'?"));
}

TEST_CASE("the live tree on a terminal is coloured unless NO_COLOR is set or --color never says "
          "so",
          "[integration][cli]") {
  temp_dir home;
  temp_dir g;
  auto file = g.write("one.json", R"({"steps": {"a": {"fn": "echo", "with": {"v": 1}}}})");
  // `script` (util-linux, essential in Debian) gives the run a terminal.
  auto on_tty = [&](const std::string& prefix, const std::string& flags) {
    auto r = run_command({"script", "-qfec",
                          prefix + " " + canopy_binary() + " --home " + home.path + " " + flags
                            + " run " + file,
                          "/dev/null"},
                         std::chrono::seconds{60});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r.out;
  };
  const std::string green = "\033[32m";
  CHECK_THAT(on_tty("env -u NO_COLOR", ""), Catch::Contains(green));
  CHECK_THAT(on_tty("env NO_COLOR=1", ""), !Catch::Contains(green));
  CHECK_THAT(on_tty("env -u NO_COLOR", "--color never"), !Catch::Contains(green));
  CHECK_THAT(on_tty("env NO_COLOR=1", "--color always"), Catch::Contains(green));
  auto bad = run_canopy(home.path, {"--color", "sometimes", "ls"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--color"));
}
