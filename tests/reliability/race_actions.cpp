// The actions of a race trial (race_trial.hpp): how the tree starts and
// what happens to it afterwards. Each action is drawn on the trial's thread
// (with every random number it needs) and either done there (starting a
// process, sending a signal) or handed to a worker thread when it blocks
// (reading, stopping, HTTP).

#include <signal.h>

#include <fstream>
#include <stdexcept>

#include "tests/integration/event_log_check.hpp"
#include "tests/reliability/race_world.hpp"
#include "tests/reliability/trial_processes.hpp"

namespace canopy::core::test::race {

using namespace std::chrono_literals;

namespace {

/// The longest wait for a reader or `canopy stop`.
constexpr auto read_timeout = std::chrono::seconds{60};

/// How often the reader loop runs `show --json` (the pace of a dashboard).
constexpr auto show_every = 200ms;

/// The actions after the start, with their weights.
struct action_kind {
  const char* name;
  int weight;
};

constexpr action_kind kinds[] = {
  {"resume", 3},    {"serve", 1},     {"serve --resume-interrupted", 1},
  {"http stop", 3}, {"http resume", 3}, {"http get", 2}, {"sse", 3},
  {"canopy stop", 2}, {"ls", 1},    {"show", 1},      {"events", 1},
  {"show loop", 2}, {"SIGKILL", 4},  {"SIGTERM", 1}};

bool is_server(const tracked& t) {
  return t.server != nullptr && t.span.signalled == 0;
}

bool is_owner(const tracked& t) {
  return t.owner && t.span.signalled != SIGKILL;
}

/// The pid of the background process a `run --detach` marked `mark` left.
long detached_pid(const std::string& mark) {
  for (auto pid : marked_processes(mark)) {
    std::ifstream in{"/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary};
    std::string cmdline{std::istreambuf_iterator<char>{in}, {}};
    if (cmdline.find("--detached-fd") != std::string::npos)
      return pid;
  }
  return 0;
}

} // namespace

// -- the start ------------------------------------------------------------------------------

void world::start_tree() {
  switch (draw(0, 2)) {
    case 0: { // foreground, no TTY: it prints one line per event, not its id
      result.start = "run";
      auto p = spawn_cli("run", {"run", graph_file}, true, true);
      std::string found;
      eventually(
        [&] {
          if (has_store(home)) {
            auto list = run_canopy(home, {"ls", "--json"}, read_timeout).out_json();
            if (list.is_array() && !list.empty())
              found = list.back().value("id", "");
          }
          return !found.empty() || ended(p);
        },
        30s, 10ms);
      if (found.empty())
        throw std::runtime_error("`canopy run` stored no execution: " + out_of(p));
      set_id(found);
      break;
    }
    case 1: { // in the background: the command prints the id and exits
      result.start = "run --detach";
      auto p = spawn_cli("run --detach", {"run", "--detach", graph_file}, false, true);
      if (!wait_ended(p, 30s))
        throw std::runtime_error("`canopy run --detach` did not exit");
      auto out = out_of(p);
      while (!out.empty() && out.back() == '\n')
        out.pop_back();
      if (out.empty())
        throw std::runtime_error("`canopy run --detach` printed no id");
      set_id(out);
      if (auto pid = detached_pid(mark_base + std::to_string(p)))
        watch_detached(p, pid);
      break;
    }
    default: { // over HTTP: alice's execution
      result.start = "http start";
      auto s = spawn_serve(false);
      if (!s)
        throw std::runtime_error("the first server did not start");
      auto posted = http(*s, "POST", "/v1/graphs", graph.dump());
      if (posted.status != 201)
        throw std::runtime_error("POST /v1/graphs answered " + std::to_string(posted.status)
                                 + ": " + posted.text);
      auto asked = wall_ms();
      auto started = http(*s, "POST", "/v1/graphs/race/executions", R"({"inputs": {}})");
      if (started.status != 201 || !started.body.is_object())
        throw std::runtime_error("the HTTP start answered " + std::to_string(started.status)
                                 + ": " + started.text);
      claim(*s, asked);
      set_id(started.body.value("id", ""));
      http_tree = true;
    }
  }
  did("start", result.start + " " + id());
}

// -- the actions ----------------------------------------------------------------------------

void world::act() {
  auto servers = live(is_server);
  auto owners = live(is_owner);
  bool http_ok = http_tree && !servers.empty();
  std::vector<const action_kind*> menu;
  int total = 0;
  std::vector<int> weights;
  for (auto& k : kinds) {
    std::string name = k.name;
    bool ok = true;
    int weight = k.weight;
    if (name.rfind("serve", 0) == 0) {
      ok = servers.size() < 2;
      // An HTTP tree without a server would see no HTTP action at all.
      if (http_tree && servers.empty())
        weight *= 4;
    }
    else if (name.rfind("http", 0) == 0 || name == "sse")
      ok = http_ok;
    else if (name == "SIGKILL" || name == "SIGTERM")
      ok = !owners.empty();
    if (ok) {
      menu.push_back(&k);
      weights.push_back(weight);
      total += weight;
    }
  }
  auto pick = draw(1, total);
  const action_kind* k = menu.front();
  for (size_t i = 0; i < menu.size(); ++i)
    if ((pick -= weights[i]) <= 0) {
      k = menu[i];
      break;
    }
  std::string name = k->name;
  auto id = this->id();
  auto server =
    servers.empty() ? size_t{0} : servers[draw(0, static_cast<int>(servers.size()) - 1)];

  if (name == "resume") {
    did(name);
    spawn_cli("resume", {"resume", id}, true, true);
  } else if (name == "serve" || name == "serve --resume-interrupted") {
    did(name);
    spawn_serve(name != "serve");
  } else if (name == "SIGKILL" || name == "SIGTERM") {
    auto target = owners[draw(0, static_cast<int>(owners.size()) - 1)];
    did(name, name_of(target));
    signal(target, name == "SIGKILL" ? SIGKILL : SIGTERM);
  } else if (name == "http stop") {
    auto wait = draw(0, 10);
    bool force = draw(0, 3) == 0;
    did(name, "wait " + std::to_string(wait) + (force ? " force" : ""));
    spawn_worker(name, [this, server, id, wait, force] {
      nlohmann::json body = {{"wait", wait}, {"mode", force ? "force" : "graceful"}};
      http(server, "POST", "/v1/executions/" + id + "/stop", body.dump());
    });
  } else if (name == "http resume") {
    did(name);
    claim(server, wall_ms());
    spawn_worker(name, [this, server, id] {
      http(server, "POST", "/v1/executions/" + id + "/resume", "{}");
    });
  } else if (name == "http get") {
    bool tree = draw(0, 1) == 1;
    did(name, tree ? "tree" : "execution");
    spawn_worker(name, [this, server, id, tree] {
      http(server, "GET", "/v1/executions/" + id + (tree ? "/tree" : ""));
    });
  } else if (name == "sse") {
    std::optional<uint64_t> after;
    if (draw(0, 2) == 0)
      after = static_cast<uint64_t>(draw(1, 20));
    did(name, after ? "Last-Event-ID " + std::to_string(*after) : "from the start");
    spawn_worker(name, [this, server, after] { sse(server, after); });
  } else if (name == "canopy stop") {
    auto wait = draw(0, 10);
    did(name, "--wait " + std::to_string(wait));
    spawn_worker(name, [this, id, wait] {
      auto r = run_canopy(home, {"stop", id, "--wait", std::to_string(wait)}, read_timeout);
      // 0: stopped or nothing to stop; 1: still stopping when the wait ended.
      if (r.exit_code != 0 && r.exit_code != 1)
        fail("`canopy stop " + id + "` exited " + std::to_string(r.exit_code) + ": " + r.err);
    });
  } else if (name == "events") {
    did(name);
    spawn_worker(name, [this, id] {
      auto sent = wall_ms();
      auto log = read_event_log(home, id, read_timeout);
      if (!log.ok)
        return fail("`canopy events " + id + " --json`: " + log.error);
      add_read({"`canopy events --json` run at +" + std::to_string(sent - t0_ms) + " ms", 0,
                std::move(log.events)});
    });
  } else {
    // ls, show, show loop: read commands that must succeed while others write.
    std::vector<std::string> args = name == "ls" ? std::vector<std::string>{"ls", "--json"}
                                                 : std::vector<std::string>{"show", id, "--json"};
    auto rounds = name == "show loop" ? draw(5, 15) : 1;
    did(name, rounds > 1 ? std::to_string(rounds) + " times" : "");
    spawn_worker(name, [this, args, rounds] {
      for (int i = 0; i < rounds; ++i) {
        if (i > 0)
          std::this_thread::sleep_for(show_every); // pacing, not synchronisation
        auto r = run_canopy(home, args, read_timeout);
        if (r.exit_code != 0 || !r.out_json().is_structured())
          return fail("`canopy " + args[0] + "` exited " + std::to_string(r.exit_code) + ": "
                      + r.err);
      }
    });
  }
}

} // namespace canopy::core::test::race
