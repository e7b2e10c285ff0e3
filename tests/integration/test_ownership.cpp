// Ownership across processes (store.hpp, "Leases and fencing"): a resumed
// run keeps its owner whatever another process reads meanwhile; a process
// whose tree was taken over ends its steps and writes nothing more; a stop
// request comes before the events it causes. Real `canopy` processes on a
// real store; every wait is an event wait (an output line, an exit, a
// process that disappears).

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/process/subprocess.hpp"
#include "persistence/error.hpp"
#include "persistence/store.hpp"
#include "runtime/node/runtime.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/server_test_helpers.hpp"

using canopy::core::event_type;
using canopy::core::step_reason;
using canopy::core::stop_result;

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// Starts `canopy --home HOME ARGS...` in its own process group.
canopy::core::subprocess start_canopy(const std::string& home, const std::vector<std::string>& args) {
  canopy::core::subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  auto p = canopy::core::subprocess::start(opts);
  REQUIRE(p);
  return std::move(*p);
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = 0; (pos = hay.find(needle, pos)) != std::string::npos; pos += needle.size())
    ++n;
  return n;
}

/// A chain of `n` `run` steps, each appending its name to `side.log` in
/// `dir` and sleeping `pause` seconds, each needing the one before.
std::string chain_graph(const temp_dir& dir, int n, const std::string& pause) {
  json steps = json::object();
  for (int i = 1; i <= n; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "s%02d", i);
    json s = {{"run",
               {"sh", "-c", std::string{"echo "} + name + " >> '" + dir.path + "/side.log'; sleep "
                              + pause}}};
    if (i > 1) {
      char prev[16];
      std::snprintf(prev, sizeof prev, "s%02d", i - 1);
      s["needs"] = {prev};
    }
    steps[name] = s;
  }
  return dir.write("chain.json", json{{"name", "chain"}, {"steps", steps}}.dump());
}

/// The events of `id`'s tree as `canopy events --json` prints them.
std::vector<json> events_of(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"events", id, "--json"});
  REQUIRE(r.exit_code == 0);
  std::vector<json> out; // JSON Lines
  std::istringstream lines{r.out};
  for (std::string line; std::getline(lines, line);)
    if (!line.empty())
      out.push_back(json::parse(line));
  REQUIRE_FALSE(out.empty());
  return out;
}

/// The id of the only execution of `home`.
std::string only_id(const std::string& home) {
  auto ls = run_canopy(home, {"ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  REQUIRE(ls.out_json().size() == 1);
  return ls.out_json()[0]["id"].get<std::string>();
}

/// Kills a foreground `canopy run` of a 12-step chain once 4 steps completed.
std::string killed_chain(const std::string& home, const temp_dir& dir) {
  auto file = chain_graph(dir, 12, "0.1");
  auto p = start_canopy(home, {"run", file});
  REQUIRE(wait_for_output(p, [](const std::string& out) {
    return count_of(out, "step.completed") >= 4;
  }));
  p.signal_group(SIGKILL);
  REQUIRE(wait_exit(p));
  return only_id(home);
}

/// No event says the tree was interrupted after its last `execution.resumed`,
/// and the tree completed.
void check_resumed_to_completion(const std::string& store, const std::string& id) {
  bool resumed = false, ended = false;
  for (auto& e : events_of(store, id)) {
    INFO(e.dump());
    if (e["type"] == "execution.resumed")
      resumed = true;
    if (resumed)
      CHECK(e.value("reason", "") != "interrupted");
    CHECK_FALSE(ended);
    if (resumed && e["type"] == "execution.completed")
      ended = true;
  }
  CHECK(ended);
}

/// Takes tree `id` of the store in `home` over as another process's
/// recovery would (its owner looked dead to it): a compare-and-set on the
/// epoch read, marking the root `stopped`/`interrupted`. `owner` is the pid
/// the lease must name before. @returns the seq of the last event written.
uint64_t take_over(const std::string& home, const std::string& id, int64_t owner) {
  auto db = canopy::core::store::open({home});
  REQUIRE(db);
  auto lease = (*db)->lease(id);
  REQUIRE(lease);
  REQUIRE(lease->epoch > 0);
  REQUIRE(lease->pid == owner);
  auto rec = (*db)->execution(id);
  REQUIRE(rec);
  canopy::core::write_batch b;
  b.lease.root = id;
  b.lease.acquire = true;
  b.lease.epoch = lease->epoch;
  b.lease.owner.pid = ::getpid();
  b.lease.owner.start = canopy::core::process_start_time(::getpid());
  rec->status = canopy::core::execution_status::stopped;
  rec->reason = step_reason::interrupted;
  b.executions.push_back(*rec);
  b.events.push_back(canopy::core::make_execution_event(
    *rec, event_type::execution_stopped, canopy::core::now_ms(),
    canopy::core::execution_status::stopped, step_reason::interrupted));
  REQUIRE_FALSE((*db)->commit(b));
  REQUIRE(b.lease.outcome == canopy::core::lease_outcome::acquired);
  return b.events.back().seq;
}

} // namespace

TEST_CASE("a resumed run survives readers in another process that open the store",
          "[integration][ownership]") {
  temp_dir home;
  temp_dir dir;
  auto id = killed_chain(home.path, dir);
  auto resume = start_canopy(home.path, {"resume", id});
  // Readers open the store (and run recovery) while the resumed run goes on.
  size_t reads = 0;
  while (!resume.poll()) {
    auto show = run_canopy(home.path, {"show", id, "--json"});
    REQUIRE(show.exit_code == 0);
    ++reads;
  }
  REQUIRE(wait_exit(resume));
  INFO("resume printed:\n" << resume.out().data << resume.err().data);
  CHECK(reads > 0);
  CHECK(resume.exit_code() == 0);
  auto show = run_canopy(home.path, {"show", id, "--json"});
  CHECK(show.out_json()["status"] == "completed");
  check_resumed_to_completion(home.path, id);
}

TEST_CASE("a process whose tree was taken over ends its steps and writes nothing more",
          "[integration][ownership]") {
  temp_dir home;
  temp_dir dir;
  // A long step beside a chain that keeps writing.
  json steps = {
    {"long", {{"run", {"sh", "-c", "echo $$ > '" + dir.path + "/long.pid'; exec sleep 60"}}}}};
  for (int i = 1; i <= 40; ++i) {
    json s = {{"run", {"sh", "-c", "sleep 0.05"}}};
    if (i > 1)
      s["needs"] = {"c" + std::to_string(i - 1)};
    steps["c" + std::to_string(i)] = s;
  }
  auto file = dir.write("g.json", json{{"name", "taken"}, {"steps", steps}}.dump());
  auto run = start_canopy(home.path, {"run", file});
  auto long_pid = wait_pid_file(dir.path + "/long.pid");
  REQUIRE(long_pid > 0);
  auto id = only_id(home.path);
  // Another process takes the tree over as recovery would (its owner looked
  // dead to it): a compare-and-set on the epoch it read.
  auto last_seq = take_over(home.path, id, run.pid());
  REQUIRE(wait_exit(run, 60s));
  CHECK(run.exit_code() == 1);
  CHECK_THAT(run.err().data,
             Catch::Contains("execution " + id + " was taken over by another process"));
  // Its step processes are gone (no grace: the new owner may run them again).
  auto pgid = long_pid;
  CHECK(eventually([&] { return !group_alive(pgid); }, 10s));
  // It wrote nothing after the take-over.
  for (auto& e : events_of(home.path, id)) {
    INFO(e.dump());
    CHECK(e["seq"].get<uint64_t>() <= last_seq);
  }
  auto show = run_canopy(home.path, {"show", id, "--json"});
  CHECK(show.out_json()["status"] == "stopped");
  CHECK(show.out_json()["reason"] == "interrupted");
}

TEST_CASE("a stop request comes before every event it causes in the log",
          "[integration][ownership][stop]") {
  temp_dir home;
  canopy::core::runtime_options opts;
  opts.home = home.path;
  auto rt = canopy::core::runtime::open(opts);
  REQUIRE(rt);
  auto g = canopy::core::parse_graph(
    json::parse(R"({"name":"h_life","steps":{"a":{"fn":"noop"},
      "b":{"fn":"sleep","with":{"ms":3000},"needs":["a"]},
      "c":{"fn":"echo","with":{"v":42},"needs":["b"]}}})"),
    home.path, (*rt)->graph_options());
  REQUIRE(g.value);
  auto h = (*rt)->start(g.value, json::object());
  REQUIRE(h);
  auto db = (*rt)->db();
  REQUIRE(eventually([&] {
    auto steps = db->steps(h->id());
    if (!steps)
      return false;
    for (auto& s : *steps)
      if (s.step == "b" && s.status == canopy::core::step_status::running)
        return true;
    return false;
  }));
  auto ticket = (*rt)->stop(h->id(), canopy::core::stop_mode::graceful, "test");
  REQUIRE(ticket);
  CHECK((*rt)->await_stop(*ticket, 10s) == canopy::core::stop_result::stopped);
  auto events = db->tree_events(h->id());
  REQUIRE(events);
  uint64_t requested = 0;
  for (auto& e : *events)
    if (e.type == event_type::stop_requested)
      requested = e.seq;
  REQUIRE(requested > 0);
  for (auto& e : *events) {
    INFO(to_string(e.type) << " at " << e.seq << ", stop.requested at " << requested);
    if (e.type == event_type::execution_stopping || e.type == event_type::execution_stopped
        || (e.type == event_type::step_pending && e.reason == step_reason::requested) || e.type == event_type::stop_handled)
      CHECK(e.seq > requested);
  }
}

// -- the server ---------------------------------------------------------------------------

namespace {

/// `chain` over HTTP: a server over `store` starts it, is SIGKILLed once 4
/// steps completed. @returns the execution id.
std::string killed_server_chain(const std::string& store, const temp_dir& dir) {
  server_process srv{server_test::inline_server(store)};
  auto c = srv.client(alice_token);
  auto doc = json::parse(read_file(chain_graph(dir, 12, "0.1")));
  server_test::register_graph(c, doc);
  auto id = server_test::start(c, "chain")["id"].get<std::string>();
  auto four = wait_until(c, id, [](const json& d) {
    size_t n = 0;
    for (auto& s : d["steps"].items())
      n += s.value()["status"] == "completed";
    return n >= 4;
  });
  REQUIRE(four["status"] == "running");
  srv.kill();
  return id;
}

/// Reads `id` with `canopy show` (which runs recovery) until `done()`.
size_t read_until(const std::string& store, const std::string& id,
                  const std::function<bool()>& done) {
  size_t reads = 0;
  auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    auto show = run_canopy(store, {"show", id, "--json"});
    REQUIRE(show.exit_code == 0);
    ++reads;
  }
  return reads;
}

/// While the server runs `id`, reads it with `canopy show` in a loop; then
/// checks that it completed and that no reader interrupted it.
void completes_under_readers(httplib::Client& c, const std::string& store,
                             const std::string& id) {
  auto status = [&] { return get_json(c, "/v1/executions/" + id).body["status"]; };
  auto reads = read_until(store, id, [&] { return status() != "running"; });
  CHECK(reads > 0);
  CHECK(status() == "completed");
  check_resumed_to_completion(store, id);
}

} // namespace

TEST_CASE("a run resumed over HTTP survives readers in another process",
          "[integration][ownership][server]") {
  temp_dir home;
  temp_dir dir;
  auto store = home.path + "/store";
  auto id = killed_server_chain(store, dir);
  server_process srv{server_test::inline_server(store)};
  auto c = srv.client(alice_token);
  auto resumed = post_json(c, "/v1/executions/" + id + "/resume");
  REQUIRE(resumed.status == 200);
  completes_under_readers(c, store, id);
}

TEST_CASE("a run that serve --resume-interrupted resumes survives readers in another process",
          "[integration][ownership][server]") {
  temp_dir home;
  temp_dir dir;
  auto store = home.path + "/store";
  auto id = killed_server_chain(store, dir);
  auto opts = server_test::inline_server(store);
  opts.args = {"--resume-interrupted"};
  server_process srv{opts};
  auto c = srv.client(alice_token);
  completes_under_readers(c, store, id);
}

TEST_CASE("a server whose tree was taken over logs event=fenced and counts it",
          "[integration][ownership][server]") {
  temp_dir home;
  temp_dir dir;
  auto store = home.path + "/store";
  server_process srv{server_test::inline_server(store)};
  auto c = srv.client(alice_token);
  server_test::register_graph(c, json::parse(read_file(chain_graph(dir, 40, "0.05"))));
  auto id = server_test::start(c, "chain")["id"].get<std::string>();
  REQUIRE(wait_until(c, id, [](const json& d) {
            return d["steps"]["s02"]["status"] == "completed";
          })["status"] == "running");
  take_over(store, id, srv.pid());
  REQUIRE(eventually([&] { return srv.log().find("event=fenced execution=" + id) != std::string::npos; },
                     30s));
  auto m = c.Get("/metrics");
  REQUIRE(m);
  CHECK(server_test::sample(server_test::samples(m->body), "canopy_fenced_total") >= 1);
  // The server goes on serving.
  CHECK(get_json(c, "/healthz").status == 200);
}
