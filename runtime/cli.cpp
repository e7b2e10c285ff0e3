#include "runtime/cli.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>

#include "persistence/error.hpp"
#include "runtime/document.hpp"
#include "runtime/error.hpp"
#include "runtime/render.hpp"
#include "runtime/runtime.hpp"

extern char** environ;

namespace canopy {

namespace {

// -- exit codes (SPEC §6) ------------------------------------------------------

constexpr int exit_completed = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_stopped = 3;

int exit_code_of(execution_status s) {
  switch (s) {
    case execution_status::completed: return exit_completed;
    case execution_status::stopped: return exit_stopped;
    default: return exit_failed;
  }
}

/// Prints `err` and returns its exit code.
int fail(const caf::error& err) {
  std::cerr << "error: " << message_of(err) << "\n";
  return canopy::exit_code_of(err);
}

int usage_error(const std::string& msg) {
  std::cerr << "error: " << msg << "\n";
  return exit_usage;
}

// -- options shared by commands ------------------------------------------------------

struct global_options {
  std::string home;
  size_t max_parallel = 4;
};

std::string home_of(const global_options& g) {
  return g.home.empty() ? default_home() : g.home;
}

/// Parses `--input K=V` (string) and `--input K:=JSON` (JSON value).
caf::expected<json> parse_inputs(const std::vector<std::string>& items) {
  json inputs = json::object();
  for (auto& item : items) {
    auto json_pos = item.find(":=");
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(runtime_errc::invalid_input,
                        "--input '" + item + "': expected K=V or K:=JSON");
    if (json_pos != std::string::npos && json_pos + 1 == eq) {
      auto key = item.substr(0, json_pos);
      auto value = parse_json_text(item.substr(eq + 1));
      if (!value)
        return make_error(runtime_errc::invalid_input,
                          "--input " + key + ": bad JSON: " + message_of(value.error()));
      inputs[key] = std::move(*value);
    } else {
      inputs[item.substr(0, eq)] = item.substr(eq + 1);
    }
  }
  return inputs;
}

int report_graph_errors(const std::string& file, const parse_result& r) {
  for (auto& e : r.errors)
    std::cerr << file << ": " << (e.path.empty() ? "" : e.path + ": ") << e.message << "\n";
  return exit_usage;
}

// -- watching an execution in the foreground ----------------------------------------

/// Blocks SIGINT and SIGTERM in every thread (call before any thread starts)
/// and turns them into stops on a thread of their own: the first is graceful,
/// the second forces.
class interrupt_guard {
public:
  interrupt_guard() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }

  void watch(execution_handle h) {
    thread_ = std::thread([this, h] {
      for (int n = 0;; ++n) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0 || done_)
          return;
        if (n == 0)
          std::cerr << "\nstopping " << h.id() << " (Ctrl-C again to force)\n";
        // The request runs on a thread that ends with it: a thread that called
        // into CAF and is still alive (blocked in sigwait) when the runtime is
        // destroyed kept ~actor_system waiting forever (seen with CAF 0.17).
        bool force = n > 0; // the second Ctrl-C forces
        std::thread([h, force] { (void) h.stop(force); }).join();
      }
    });
  }

  ~interrupt_guard() {
    if (thread_.joinable()) {
      done_ = true;
      pthread_kill(thread_.native_handle(), SIGINT);
      thread_.join();
    }
  }

private:
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// Shows progress of `h` until it ends (events after seq `after` only), then
/// prints the result.
int follow(runtime& rt, const execution_handle& h, bool as_json, uint64_t after = 0) {
  bool tty = !as_json && ::isatty(STDOUT_FILENO);
  std::mutex mtx;
  tree_view view{*rt.db(), h.id()};
  size_t drawn = 0;
  auto last_draw = std::chrono::steady_clock::time_point{};
  auto redraw = [&] {
    last_draw = std::chrono::steady_clock::now();
    std::string out;
    if (drawn > 0)
      out += "\033[" + std::to_string(drawn) + "F\033[J";
    auto lines = view.render();
    for (auto& l : lines)
      out += l + "\n";
    drawn = lines.size();
    std::cout << out << std::flush;
  };
  subscription sub;
  if (!as_json)
    sub = h.subscribe([&](const event_record& e) {
      std::lock_guard<std::mutex> guard{mtx};
      if (e.seq <= after) {
        view.apply(e); // history: builds the tree, printed only on a TTY
        return;
      }
      view.apply(e);
      if (tty) {
        // At most ten frames a second; the final state is drawn after wait().
        if (std::chrono::steady_clock::now() - last_draw > std::chrono::milliseconds(100))
          redraw();
      } else {
        std::cout << event_line(e, view.label(e.execution_id)) << "\n" << std::flush;
      }
    });
  auto rec = h.wait();
  sub.cancel();
  if (!rec)
    return fail(rec.error());
  auto doc = load_document(*rt.db(), h.id());
  if (!doc)
    return fail(doc.error());
  if (as_json) {
    std::cout << doc->dump() << "\n";
  } else {
    if (tty) {
      std::lock_guard<std::mutex> guard{mtx};
      redraw();
    }
    std::cout << (*doc)["status"].get<std::string>();
    if (!rec->reason.empty())
      std::cout << " (" << rec->reason << ")";
    std::cout << ": " << h.id() << "\n";
    if (!rec->error.empty())
      std::cout << "error: " << rec->error << "\n";
    if (rec->status == execution_status::completed)
      std::cout << rec->outputs.dump(2) << "\n";
  }
  if (rec->status == execution_status::stopped || rec->status == execution_status::failed)
    std::cerr << "resume with: canopy --home " << rt.db()->home() << " resume " << h.id()
              << "\n";
  return exit_code_of(rec->status);
}

caf::expected<std::unique_ptr<runtime>> open_runtime(const global_options& g) {
  runtime_options opts;
  opts.home = home_of(g);
  opts.max_parallel = g.max_parallel;
  return runtime::open(opts);
}

// -- commands --------------------------------------------------------------------------

struct run_options {
  std::string file;
  std::vector<std::string> inputs;
  bool json = false;
  bool detach = false;
  int detached_fd = -1; ///< internal: the detached child reports its id here
};

/// `run --detach`: re-executes this program in a session of its own and
/// prints the id the child reports.
int run_detached(const global_options& g, const run_options& o, const char* self_exe) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return usage_error(std::string{"pipe: "} + std::strerror(errno));
  std::vector<std::string> args = {self_exe, "--home", home_of(g), "--max-parallel",
                                   std::to_string(g.max_parallel), "run", o.file,
                                   "--detached-fd", "3"};
  for (auto& i : o.inputs) {
    args.push_back("--input");
    args.push_back(i);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 3);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::string log = home_of(g) + "/detached.log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return usage_error(std::string{"cannot start background process: "} + std::strerror(rc));
  }
  std::string id;
  char buf[64];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0)
    id.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  while (!id.empty() && id.back() == '\n')
    id.pop_back();
  if (id.empty()) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::cerr << "error: the background run did not start (see " << log << ")\n";
    return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : exit_failed;
  }
  // The child runs on in its own session; init reaps it when it exits.
  if (o.json)
    std::cout << json{{"id", id}}.dump() << "\n";
  else
    std::cout << id << "\n";
  return exit_completed;
}

int cmd_run(const global_options& g, const run_options& o, const char* self_exe) {
  auto inputs = parse_inputs(o.inputs);
  if (!inputs)
    return fail(inputs.error());
  // Validate before anything is stored (and before a detached child starts).
  parse_options popts;
  auto parsed = parse_graph_file(o.file, popts);
  if (!parsed)
    return report_graph_errors(o.file, parsed);
  if (auto err = check_inputs(*parsed.value, *inputs))
    return fail(err);
  if (o.detach)
    return run_detached(g, o, self_exe);
  interrupt_guard guard;
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  auto h = (*rt)->start(parsed.value, std::move(*inputs));
  if (!h)
    return fail(h.error());
  if (o.detached_fd >= 0) {
    auto line = h->id() + "\n";
    (void) !::write(o.detached_fd, line.data(), line.size());
    ::close(o.detached_fd);
  }
  guard.watch(*h);
  return follow(**rt, *h, o.json);
}

int cmd_resume(const global_options& g, const std::string& id, bool as_json,
               std::optional<double> budget) {
  interrupt_guard guard;
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  auto before = (*rt)->db()->last_seq();
  if (!before)
    return fail(before.error());
  auto h = (*rt)->resume(id, budget);
  if (!h)
    return fail(h.error());
  guard.watch(*h);
  return follow(**rt, *h, as_json, *before);
}

caf::expected<std::shared_ptr<store>> open_store(const global_options& g) {
  auto db = store::open({home_of(g)});
  if (!db)
    return db.error();
  if (auto rec = recover_interrupted(**db); !rec)
    return rec.error();
  return db;
}

/// `canopy stop`: stores the request, then waits (polling the store: the
/// execution lives in another process) until the execution is terminal.
int cmd_stop(const global_options& g, const std::string& id, bool force, double wait_s) {
  auto db = open_store(g);
  if (!db)
    return fail(db.error());
  auto rec = (*db)->execution(id);
  if (!rec)
    return fail(rec.error());
  if (!is_stoppable(rec->status)) {
    std::cout << "no_execution\n";
    return 0;
  }
  auto [req, batch] = make_stop_request(*rec, force, "cli:pid " + std::to_string(::getpid()));
  if (auto err = (*db)->commit(batch))
    return fail(err);
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  for (;;) {
    auto now = (*db)->execution(id);
    if (!now)
      return fail(now.error());
    if (is_terminal(now->status)) {
      write_batch settle;
      if (settle_stops(**db, settle) == caf::none && !settle.empty())
        (void) (*db)->commit(settle);
      std::cout << to_string(now->status);
      if (!now->reason.empty())
        std::cout << " (" << now->reason << ")";
      std::cout << "\n";
      return 0;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::cout << to_string(now->status) << "\n";
      std::cerr << "still " << to_string(now->status) << " after " << wait_s << " s\n";
      return 1;
    }
    // The execution lives in another process: poll the shared store.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (auto r = recover_interrupted(**db); !r)
      return fail(r.error());
  }
}

int cmd_show(const global_options& g, const std::string& id, bool as_json) {
  auto db = open_store(g);
  if (!db)
    return fail(db.error());
  auto doc = load_document(**db, id);
  if (!doc)
    return fail(doc.error());
  if (as_json)
    std::cout << doc->dump() << "\n";
  else
    std::cout << render_document(*doc);
  return 0;
}

int cmd_ls(const global_options& g, const std::string& status, bool all, bool as_json) {
  execution_filter f;
  f.roots_only = !all;
  if (!status.empty()) {
    execution_status s;
    if (!from_string(status, s))
      return usage_error("--status: unknown status '" + status
                         + "' (queued, running, stopping, stopped, completed, failed)");
    f.status = s;
  }
  auto db = open_store(g);
  if (!db)
    return fail(db.error());
  auto rows = (*db)->list(f);
  if (!rows)
    return fail(rows.error());
  if (as_json) {
    json out = json::array();
    for (auto& r : *rows)
      out.push_back(execution_summary(r));
    std::cout << out.dump() << "\n";
  } else {
    std::cout << render_list(*rows);
  }
  return 0;
}

/// The ids of `id` and all its descendants.
caf::expected<std::set<std::string>> subtree(const store& db, const std::string& id) {
  std::set<std::string> out{id};
  std::vector<std::string> todo{id};
  while (!todo.empty()) {
    auto cur = todo.back();
    todo.pop_back();
    auto kids = db.children(cur);
    if (!kids)
      return kids.error();
    for (auto& k : *kids)
      if (out.insert(k).second)
        todo.push_back(k);
  }
  return out;
}

int cmd_events(const global_options& g, const std::string& id, bool follow_live,
               bool as_json) {
  auto db = open_store(g);
  if (!db)
    return fail(db.error());
  auto rec = (*db)->execution(id);
  if (!rec)
    return fail(rec.error());
  tree_view view{**db, id};
  uint64_t after = 0;
  for (;;) {
    auto ids = subtree(**db, id);
    if (!ids)
      return fail(ids.error());
    auto events = (*db)->tree_events(rec->root_id, after);
    if (!events)
      return fail(events.error());
    for (auto& e : *events) {
      after = e.seq;
      if (!ids->count(e.execution_id))
        continue;
      if (as_json)
        std::cout << event_document(e).dump() << "\n";
      else
        std::cout << event_line(e, view.label(e.execution_id)) << "\n";
    }
    std::cout << std::flush;
    if (!follow_live)
      return 0;
    auto now = (*db)->execution(id);
    if (!now)
      return fail(now.error());
    if (is_terminal(now->status)) {
      // One more read: events committed with the final status.
      if (auto tail = (*db)->tree_events(rec->root_id, after); tail && tail->empty())
        return 0;
      continue;
    }
    // Another process writes the store: poll it at a human pace.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (auto again = recover_interrupted(**db); !again)
      return fail(again.error());
  }
}

int cmd_validate(const std::string& file) {
  auto parsed = parse_graph_file(file);
  if (!parsed)
    return report_graph_errors(file, parsed);
  std::cout << "ok: graph '" << parsed.value->name << "' with " << parsed.value->steps.size()
            << " steps\n";
  return 0;
}

} // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"canopy: run agent graphs as supervised actor trees"};
  app.require_subcommand(1);
  app.fallthrough();
  global_options g;
  app.add_option("--home", g.home, "store folder (default: $CANOPY_HOME, else ./.canopy)");
  app.add_option("--max-parallel", g.max_parallel, "subprocesses at once (default 4)")
    ->check(CLI::Range(1, 4096));

  run_options ro;
  auto run = app.add_subcommand("run", "start an execution and follow it");
  run->add_option("file", ro.file, "graph file")->required();
  run->add_option("--input", ro.inputs, "input K=V (string) or K:=JSON");
  run->add_flag("--json", ro.json, "print the execution document as JSON");
  run->add_flag("--detach", ro.detach, "run in the background and print the id");
  run->add_option("--detached-fd", ro.detached_fd)->group("");

  std::string id;
  bool as_json = false;
  auto resume = app.add_subcommand("resume", "resume a stopped, failed or interrupted execution");
  resume->add_option("id", id, "execution id")->required();
  std::optional<double> budget;
  resume->add_option("--budget", budget, "raise the tree's budget")->check(CLI::Range(0.0, 1e12));
  resume->add_flag("--json", as_json, "print the execution document as JSON");

  bool force = false;
  double wait_s = 30;
  auto stop = app.add_subcommand("stop", "stop an execution running in another process");
  stop->add_option("id", id, "execution id")->required();
  stop->add_flag("--force", force, "no grace periods: SIGKILL at once");
  stop->add_option("--wait", wait_s, "seconds to wait for the snapshot (default 30)")
    ->check(CLI::Range(0.0, 3600.0));

  auto show = app.add_subcommand("show", "an execution, its steps and descendants");
  show->add_option("id", id, "execution id")->required();
  show->add_flag("--json", as_json, "print the document as JSON");

  std::string status;
  bool all = false;
  auto ls = app.add_subcommand("ls", "list executions, newest first");
  ls->add_option("--status", status, "only this status");
  ls->add_flag("--all", all, "include child executions");
  ls->add_flag("--json", as_json, "print a JSON array");

  bool follow_live = false;
  auto events = app.add_subcommand("events", "the event log of an execution's tree");
  events->add_option("id", id, "execution id")->required();
  events->add_flag("--follow", follow_live, "keep printing until the tree stops running");
  events->add_flag("--json", as_json, "one JSON event per line");

  std::string file;
  auto validate = app.add_subcommand("validate", "check a graph file");
  validate->add_option("file", file, "graph file")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\n" << "run 'canopy --help' for usage\n";
    return exit_usage;
  }
  if (run->parsed())
    return cmd_run(g, ro, argv[0]);
  if (resume->parsed())
    return cmd_resume(g, id, as_json, budget);
  if (stop->parsed())
    return cmd_stop(g, id, force, wait_s);
  if (show->parsed())
    return cmd_show(g, id, as_json);
  if (ls->parsed())
    return cmd_ls(g, status, all, as_json);
  if (events->parsed())
    return cmd_events(g, id, follow_live, as_json);
  if (validate->parsed())
    return cmd_validate(file);
  return exit_usage;
}

} // namespace canopy
