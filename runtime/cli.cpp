#include "runtime/cli.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>

#include "actors/execution_actor.hpp"
#include "persistence/error.hpp"
#include "runtime/client.hpp"
#include "runtime/config.hpp"
#include "runtime/document.hpp"
#include "runtime/error.hpp"
#include "runtime/render.hpp"
#include "runtime/runtime.hpp"
#include "runtime/server.hpp"
#include "runtime/worker.hpp"

extern char** environ;

namespace canopy {

namespace {

// -- exit codes (SPEC §6) ------------------------------------------------------

constexpr int exit_completed = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_stopped = 3;

// -- tunables ---------------------------------------------------------------------------

/// `events --follow` polls the store this often: the shortest pause while
/// events arrive, doubling to the longest while the tree is quiet.
constexpr std::chrono::milliseconds min_follow_poll{5};
constexpr std::chrono::milliseconds max_follow_poll{50};

/// `events --follow` looks for a dead owner this often (a tree whose process
/// died stays `running` until someone recovers it).
constexpr std::chrono::milliseconds follow_recovery_interval{250};

/// How long a read command's recovery waits for the store's writers' lock.
/// Reads must work while another process holds the home (SPEC §13 rule 16):
/// past this, the command reads without recovering (and says so on stderr).
/// Long enough for the other process's ordinary commits to finish.
constexpr std::chrono::milliseconds read_recovery_wait{250};

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

/// True when `s` names an execution status.
bool valid_status(const std::string& s) {
  execution_status x;
  return from_string(s, x);
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

  /// Calls `on_signal(n)` on the guard's thread for the n-th SIGINT or
  /// SIGTERM (from 0). `on_signal` makes its calls into CAF on threads that
  /// end before it returns: a thread that called into CAF and is still alive
  /// (blocked in sigwait) when the runtime is destroyed kept ~actor_system
  /// waiting forever (seen with CAF 0.17).
  void watch(std::function<void(int)> on_signal) {
    thread_ = std::thread([this, f = std::move(on_signal)] {
      for (int n = 0;; ++n) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0 || done_)
          return;
        f(n);
      }
    });
  }

  void watch(execution_handle h) {
    watch([h](int n) {
      if (n == 0)
        std::cerr << "\nstopping " << h.id() << " (Ctrl-C again to force)\n";
      bool force = n > 0; // the second Ctrl-C forces
      std::thread([h, force] { (void) h.stop(force); }).join();
    });
  }

  /// Ends the watch: no signal is handled after this returns. Call it before
  /// the runtime that `on_signal` uses is destroyed.
  void finish() {
    if (thread_.joinable()) {
      done_ = true;
      pthread_kill(thread_.native_handle(), SIGINT);
      thread_.join();
    }
  }

  ~interrupt_guard() { finish(); }

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
  if (!rec) {
    // The execution could not record its end (e.g. the store stayed busy):
    // once this process is gone, the next command that opens the store makes
    // it `stopped`/`interrupted`, resumable from its last recorded state.
    int rc = fail(rec.error());
    std::cerr << "resume with: canopy --home " << rt.db()->home() << " resume " << h.id()
              << "\n";
    return rc;
  }
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

/// What a command does with the local store.
enum class store_use {
  read,  ///< reads only: recovery is best effort
  write, ///< writes: a store busy for over 5 s fails it (exit 5)
};

/// Turns executions of dead owners into `stopped`/`interrupted` (SPEC §13
/// rule 12). For a reading command a busy store is no error: it warns once on
/// stderr and reads on without recovering (SPEC §13 rule 16).
/// @returns nothing, or the error of `recover_interrupted`.
caf::error recover(store& db, store_use use) {
  auto r = recover_interrupted(db);
  if (r)
    return caf::none;
  if (use == store_use::read && is(r.error(), persistence_errc::store_busy)) {
    static bool warned = false; // commands run on one thread
    if (!warned)
      std::cerr << "warning: " << message_of(r.error())
                << "; reading without recovering interrupted executions\n";
    warned = true;
    return caf::none;
  }
  return r.error();
}

/// Opens the local store and runs recovery.
/// @returns the store, or an error of `store::open` or `recover`.
caf::expected<std::shared_ptr<store>> open_store(const global_options& g, store_use use) {
  store_options opts;
  opts.home = home_of(g);
  if (use == store_use::read)
    opts.write_wait = read_recovery_wait;
  auto db = store::open(opts);
  if (!db)
    return db.error();
  if (auto err = recover(**db, use))
    return err;
  return db;
}

/// `canopy stop`: stores the request, then waits (polling the store: the
/// execution lives in another process) until the execution is terminal.
int cmd_stop(const global_options& g, const std::string& id, bool force, double wait_s) {
  auto db = open_store(g, store_use::write);
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

/// Prints an execution document (`show`): JSON or the rendered tree.
int print_document(const caf::expected<json>& doc, bool as_json) {
  if (!doc)
    return fail(doc.error());
  if (as_json)
    std::cout << doc->dump() << "\n";
  else
    std::cout << render_document(*doc);
  return 0;
}

int cmd_show(const global_options& g, const std::string& id, bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  return print_document(load_document(**db, id), as_json);
}

// -- cluster nodes (SPEC §10) ------------------------------------------------------------

/// Prints node documents: the JSON array, or the table.
void print_nodes(const json& docs, bool as_json) {
  if (as_json)
    std::cout << docs.dump() << "\n";
  else
    std::cout << render_nodes(docs);
}

/// `canopy ls --nodes` on the local home: this process's runtime alone (the
/// node `local`); a cluster's members are listed by its server (`--server`).
int cmd_ls_nodes(const global_options& g, bool as_json) {
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  json out = json::array();
  for (auto& n : (*rt)->nodes())
    out.push_back(node_document(n));
  print_nodes(out, as_json);
  return exit_completed;
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
  auto db = open_store(g, store_use::read);
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

/// Prints one event of a local tree: a JSON line, or a human line.
void print_event(const event_record& e, tree_view& view, bool as_json) {
  if (as_json)
    std::cout << event_document(e).dump() << "\n";
  else
    std::cout << event_line(e, view.label(e.execution_id)) << "\n";
}

/// `canopy events ID [--follow]` on the local home: the events of `id`'s
/// subtree; with `follow_live`, keeps reading the store (another process
/// writes it) until `id` is terminal and every event up to that was printed.
int cmd_events(const global_options& g, const std::string& id, bool follow_live,
               bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  auto rec = (*db)->execution(id);
  if (!rec)
    return fail(rec.error());
  // Of a child, only its subtree: the ids known now, and those that join.
  bool whole_tree = id == rec->root_id;
  std::set<std::string> inside, outside;
  if (!whole_tree) {
    auto ids = subtree_ids(**db, id);
    if (!ids)
      return fail(ids.error());
    inside = std::move(*ids);
  }
  auto in_subtree = [&](const event_record& e) {
    if (whole_tree || inside.count(e.execution_id))
      return true;
    if (outside.count(e.execution_id))
      return false;
    // A new execution belongs when its parent does (lineage never changes).
    auto parent = e.parent_id;
    if (parent.empty())
      if (auto r = (*db)->execution(e.execution_id))
        parent = r->parent_id;
    bool in = !parent.empty() && inside.count(parent) > 0;
    (in ? inside : outside).insert(e.execution_id);
    return in;
  };
  tree_view view{**db, id};
  uint64_t after = 0;
  auto delay = min_follow_poll;
  auto last_recovery = std::chrono::steady_clock::now();
  for (;;) {
    // Status first, then events: once `id` is terminal, the read that
    // follows holds every event up to its terminal commit.
    auto now = (*db)->execution(id);
    if (!now)
      return fail(now.error());
    auto events = (*db)->tree_events(rec->root_id, after);
    if (!events)
      return fail(events.error());
    for (auto& e : *events) {
      after = e.seq;
      if (in_subtree(e))
        print_event(e, view, as_json);
    }
    std::cout << std::flush;
    if (!follow_live || is_terminal(now->status))
      return 0;
    // Another process writes the store: poll it, quickly while it is busy.
    delay = events->empty() ? std::min(delay * 2, max_follow_poll) : min_follow_poll;
    std::this_thread::sleep_for(delay);
    // An owner that died leaves its tree `running`: notice it, now and then.
    if (std::chrono::steady_clock::now() - last_recovery > follow_recovery_interval) {
      last_recovery = std::chrono::steady_clock::now();
      if (auto err = recover(**db, store_use::read))
        return fail(err);
    }
  }
}

// -- commands against a server (--server URL) --------------------------------------------

/// `--server URL` and `--token TOKEN` of the commands that can use a server.
struct remote_options {
  std::string server; ///< empty: the local home
  std::string token;  ///< empty: `$CANOPY_TOKEN`
};

/// A client for `r`, or a usage error (bad URL, no token).
caf::expected<api_client> open_client(const remote_options& r) {
  auto url = parse_server_url(r.server);
  if (!url)
    return url.error();
  client_options opts;
  opts.server = *url;
  opts.token = r.token;
  if (opts.token.empty())
    if (auto env = std::getenv("CANOPY_TOKEN"))
      opts.token = env;
  if (opts.token.empty())
    return make_error(runtime_errc::invalid_input,
                      "--server needs a token: pass --token TOKEN or set $CANOPY_TOKEN");
  return api_client{std::move(opts)};
}

/// Prints a final status as `canopy stop` does: `stopped (requested)`.
void print_status(const json& doc) {
  auto rec = execution_of(doc);
  std::cout << to_string(rec.status);
  if (!rec.reason.empty())
    std::cout << " (" << rec.reason << ")";
  std::cout << "\n";
}

/// `canopy stop ID --server URL`: the server stops and waits; the output and
/// exit code are the local stop's (SPEC §13 rule 13).
int remote_stop(const remote_options& r, const std::string& id, bool force, double wait_s) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto answer = api->stop(id, force, wait_s);
  if (!answer)
    return fail(answer.error());
  if (answer->result == "no_execution") {
    std::cout << "no_execution\n";
    return 0;
  }
  if (answer->result == "stopped") {
    print_status(answer->execution);
    return 0;
  }
  auto status = answer->execution.is_object() ? to_string(execution_of(answer->execution).status)
                                              : "stopping";
  std::cout << status << "\n";
  std::cerr << "still " << status << " after " << wait_s << " s\n";
  return 1;
}

int remote_ls_nodes(const remote_options& r, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto items = api->nodes();
  if (!items)
    return fail(items.error());
  json out = json::array();
  for (auto& item : *items)
    out.push_back(std::move(item));
  print_nodes(out, as_json);
  return exit_completed;
}

int remote_show(const remote_options& r, const std::string& id, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  return print_document(api->tree(id), as_json);
}

int remote_ls(const remote_options& r, const std::string& status, bool all, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto items = api->executions(status, all);
  if (!items)
    return fail(items.error());
  json out = json::array();
  std::vector<execution_record> rows;
  for (auto& item : *items) {
    if (!all && item.contains("parent_id") && !item["parent_id"].is_null())
      continue; // roots only unless --all (SPEC §13 rule 14)
    item.erase("steps");
    item.erase("children");
    rows.push_back(execution_of(item));
    out.push_back(std::move(item));
  }
  if (as_json)
    std::cout << out.dump() << "\n";
  else
    std::cout << render_list(rows);
  return 0;
}

/// Labels of a tree document's executions, as `tree_view::label` makes them:
/// the top's graph name, and `parent-label/step` below it.
void collect_labels(const json& doc, const std::string& label,
                    std::map<std::string, std::string>& out) {
  auto rec = execution_of(doc);
  out[rec.id] = label;
  if (doc.contains("children") && doc["children"].is_array())
    for (auto& child : doc["children"])
      collect_labels(child, label + "/" + execution_of(child).parent_step, out);
}

/// Human labels of the executions of a server's tree, fetched when an
/// unknown execution shows up (a child created while following).
class remote_labels {
public:
  remote_labels(const api_client& api, std::string id) : api_(api), id_(std::move(id)) {
    refresh();
  }

  const std::string& operator()(const std::string& execution_id) {
    auto i = labels_.find(execution_id);
    if (i == labels_.end() && refreshed_for_.insert(execution_id).second) {
      refresh();
      i = labels_.find(execution_id);
    }
    if (i == labels_.end())
      i = labels_.emplace(execution_id, execution_id.substr(0, 10)).first;
    return i->second;
  }

private:
  void refresh() {
    if (auto doc = api_.tree(id_)) {
      auto graph = execution_of(*doc).graph;
      collect_labels(*doc, graph.empty() ? id_.substr(0, 10) : graph, labels_);
    }
  }

  const api_client& api_;
  std::string id_;
  std::map<std::string, std::string> labels_;
  std::set<std::string> refreshed_for_;
};

int remote_events(const remote_options& r, const std::string& id, bool follow_live,
                  bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  std::optional<remote_labels> labels;
  auto print = [&](const json& doc) {
    if (as_json) {
      std::cout << doc.dump() << "\n";
    } else {
      if (!labels)
        labels.emplace(*api, id);
      auto e = event_of(doc);
      std::cout << event_line(e, (*labels)(e.execution_id)) << "\n";
    }
    std::cout << std::flush;
    return true;
  };
  if (follow_live) {
    if (auto err = api->stream_events(id, 0, print))
      return fail(err);
    return 0;
  }
  auto events = api->events(id);
  if (!events)
    return fail(events.error());
  for (auto& e : *events)
    print(e);
  return 0;
}

// -- agents (SPEC §9, §13 rule 21) ----------------------------------------------------------

/// Arguments of `canopy agent ...`.
struct agent_options {
  std::string name;
  std::string graph_file;                 ///< create
  std::string on_busy;                    ///< create; empty: not given
  std::string node;                       ///< create; empty: any node
  std::string text;                       ///< send
  std::optional<double> wait_s;           ///< cancel; nullopt: not given
  bool json = false;
};

/// The agents of the CLI have no owner (the HTTP API's users own theirs).
const std::string local_owner;

/// `who` of the requests this process makes, as `canopy stop` writes it.
std::string cli_who() {
  return "cli:pid " + std::to_string(::getpid());
}

/// Prints `err` for agent `name`: an unknown agent in those words (exit 4).
int agent_fail(const std::string& name, const caf::error& err) {
  if (is(err, persistence_errc::not_found)) {
    std::cerr << "error: unknown agent " << name << "\n";
    return canopy::exit_code_of(err);
  }
  return fail(err);
}

/// The name and `--on-busy` of `agent create`, checked before any file is
/// read. @returns 0, or the exit code after printing the error.
int check_agent_args(const agent_options& o, std::optional<busy_policy>& policy) {
  if (auto why = check_agent_name(o.name); !why.empty())
    return usage_error("agent name '" + o.name + "': " + why);
  if (!o.on_busy.empty()) {
    busy_policy p;
    if (!from_string(o.on_busy, p))
      return usage_error("--on-busy '" + o.on_busy
                         + "': expected cancel_previous, queue or reject");
    policy = p;
  }
  if (!o.node.empty())
    if (auto why = check_node_name(o.node); !why.empty())
      return usage_error("--node '" + o.node + "': " + why);
  return 0;
}

/// Parses an agent's graph file with the CLI's graph options (as `run`
/// does) and checks it can be an agent's graph (SPEC §9). For a server
/// (`for_server`) any tool name passes: the server checks them against its
/// tools and its workers'. Every error is printed as `FILE: PATH: message`.
/// @returns the graph, or null.
std::shared_ptr<const graph> load_agent_graph(const std::string& file, bool for_server) {
  parse_options opts;
  opts.any_tool = for_server;
  auto parsed = parse_graph_file(file, opts);
  if (!parsed) {
    report_graph_errors(file, parsed);
    return nullptr;
  }
  parse_result bad;
  bad.errors = check_agent_graph(*parsed.value);
  if (!bad.errors.empty()) {
    report_graph_errors(file, bad);
    return nullptr;
  }
  return parsed.value;
}

/// How a message ended, from the library (`agent_reply`) or the server.
struct message_outcome {
  std::string status;
  std::string reason;
  json reply;
  std::string execution_id;
  std::string error;
};

/// Prints the outcome of `agent send` and @returns its exit code: 0
/// completed, 3 stopped or cancelled, 1 failed or busy. `resume_hint`
/// gives the command that resumes a run of that id.
int report_message(const std::string& name, const message_outcome& r, bool as_json,
                   const std::function<std::string(const std::string&)>& resume_hint) {
  if (as_json) {
    json out = {{"reply", r.reply},
                {"execution_id", r.execution_id.empty() ? json() : json(r.execution_id)},
                {"status", r.status}};
    if (!r.reason.empty())
      out["reason"] = r.reason;
    if (!r.error.empty())
      out["error"] = r.error;
    std::cout << out.dump() << "\n";
  }
  auto hint = [&] {
    if (!r.execution_id.empty())
      std::cerr << "resume with: " << resume_hint(r.execution_id) << "\n";
  };
  if (r.status == "completed") {
    if (!as_json) {
      auto text = content_text(r.reply);
      std::cout << text;
      if (text.empty() || text.back() != '\n')
        std::cout << "\n";
    }
    return exit_completed;
  }
  if (r.status == "busy") {
    std::cerr << "agent " << name << " is busy\n";
    return exit_failed;
  }
  if (r.status == "cancelled") {
    std::cerr << "the message to agent " << name << " was cancelled"
              << (r.error.empty() ? std::string{} : ": " + r.error) << "\n";
    return exit_stopped;
  }
  std::cerr << r.status << (r.reason.empty() ? std::string{} : " (" + r.reason + ")");
  if (!r.execution_id.empty())
    std::cerr << ": " << r.execution_id;
  std::cerr << "\n";
  if (!r.error.empty())
    std::cerr << "error: " << r.error << "\n";
  hint();
  return r.status == "stopped" ? exit_stopped : exit_failed;
}

int cmd_agent_create(const global_options& g, const agent_options& o) {
  std::optional<busy_policy> policy;
  if (int rc = check_agent_args(o, policy))
    return rc;
  auto gr = load_agent_graph(o.graph_file, false);
  if (!gr)
    return exit_usage;
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  // Graph and policy are both replaced: without --on-busy, the default (as
  // a server does when the body has no `on_busy`).
  auto res = (*rt)->create_agent(local_owner, o.name, *gr,
                                 policy.value_or(busy_policy::cancel_previous), o.node);
  if (!res)
    return fail(res.error());
  if (o.json)
    std::cout << agent_document(res->first).dump() << "\n";
  else
    std::cout << (res->second ? "created" : "updated") << " agent " << o.name << "\n";
  return exit_completed;
}

int cmd_agent_send(const global_options& g, const agent_options& o) {
  interrupt_guard guard;
  auto opened = open_runtime(g);
  if (!opened)
    return fail(opened.error());
  auto& rt = **opened;
  auto who = cli_who();
  std::atomic<bool> over{false};
  // Ctrl-C cancels the agent's run; a second one forces its stop. Every call
  // into the runtime is made on a thread that ends with it.
  guard.watch([&](int n) {
    if (n == 0) {
      std::cerr << "\ncancelling the run of agent " << o.name << " (Ctrl-C again to force)\n";
      // The run may not be stored yet: ask again until it was cancelled or
      // the send is over.
      while (!over) {
        caf::expected<std::string> res{std::string{}};
        std::thread([&] { res = rt.cancel_agent(local_owner, o.name, who, millis{0}); }).join();
        if (!res || *res == "cancelled")
          return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return;
    }
    std::thread([&] {
      if (auto runs = rt.db()->agent_runs(local_owner, o.name))
        for (auto& run : *runs)
          (void) rt.stop(run.first, true, who);
    }).join();
  });
  auto reply = rt.send_to_agent(local_owner, o.name, json(o.text), who);
  over = true;
  guard.finish();
  if (!reply)
    return agent_fail(o.name, reply.error());
  message_outcome m{reply->status, reply->reason, reply->reply, reply->execution_id,
                    reply->error};
  auto home = rt.db()->home();
  return report_message(o.name, m, o.json, [&](const std::string& id) {
    return "canopy --home " + home + " resume " + id;
  });
}

int cmd_agent_cancel(const global_options& g, const agent_options& o) {
  auto rt = open_runtime(g);
  if (!rt)
    return fail(rt.error());
  double wait_s = o.wait_s.value_or(30);
  auto res = (*rt)->cancel_agent(local_owner, o.name, cli_who(),
                                 millis{static_cast<int64_t>(wait_s * 1000)});
  if (!res)
    return agent_fail(o.name, res.error());
  std::cout << *res << "\n";
  return exit_completed;
}

/// Prints history documents: the JSON array, or one line per entry.
void print_history(const json& docs, bool as_json) {
  if (as_json)
    std::cout << docs.dump() << "\n";
  else
    std::cout << render_history(docs);
}

int cmd_agent_history(const global_options& g, const agent_options& o) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  if (auto ag = (*db)->agent(local_owner, o.name); !ag)
    return agent_fail(o.name, ag.error());
  auto entries = (*db)->history(local_owner, o.name);
  if (!entries)
    return fail(entries.error());
  json out = json::array();
  for (auto& e : *entries)
    out.push_back(history_document(e));
  print_history(out, o.json);
  return exit_completed;
}

int cmd_agent_ls(const global_options& g, bool as_json) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  auto rows = (*db)->agents(local_owner);
  if (!rows)
    return fail(rows.error());
  json out = json::array();
  for (auto& a : *rows)
    out.push_back(agent_document(a));
  if (as_json)
    std::cout << out.dump() << "\n";
  else
    std::cout << render_agents(out);
  return exit_completed;
}

// -- agents on a server (--server URL) -------------------------------------------------------

int remote_agent_create(const remote_options& r, const agent_options& o) {
  std::optional<busy_policy> policy;
  if (int rc = check_agent_args(o, policy))
    return rc;
  auto gr = load_agent_graph(o.graph_file, true);
  if (!gr)
    return exit_usage;
  // A server never reads files from the sender's disk: the graph is sent as
  // one document.
  if (!gr->files.empty()) {
    std::cerr << o.graph_file << ": the graph includes other files (";
    bool first = true;
    for (auto& kv : gr->files) {
      std::cerr << (first ? "" : ", ") << kv.first;
      first = false;
    }
    std::cerr << "); a graph sent to a server must be one document: put the included "
                 "graphs inline\n";
    return exit_usage;
  }
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto res = api->create_agent(o.name, gr->document, o.on_busy, o.node);
  if (!res)
    return fail(res.error());
  if (o.json)
    std::cout << res->body.dump() << "\n";
  else
    std::cout << (res->status == 201 ? "created" : "updated") << " agent " << o.name << "\n";
  return exit_completed;
}

int remote_agent_send(const remote_options& r, const agent_options& o) {
  interrupt_guard guard;
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  guard.watch([&](int n) {
    if (n == 0)
      std::cerr << "\ncancelling the run of agent " << o.name << "\n";
    auto& client = *api;
    std::thread([&] {
      if (auto res = client.cancel_agent(o.name); !res)
        std::cerr << "error: " << message_of(res.error()) << "\n";
    }).join();
  });
  auto answer = api->send_agent_message(o.name, json(o.text));
  guard.finish();
  if (!answer)
    return fail(answer.error());
  message_outcome m{answer->status, answer->reason, answer->reply, answer->execution_id,
                    answer->error};
  auto url = api->options().server.text();
  return report_message(o.name, m, o.json, [&](const std::string& id) {
    return "POST " + url + "/v1/executions/" + id + "/resume";
  });
}

int remote_agent_cancel(const remote_options& r, const agent_options& o) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  // The server's cancel takes no wait of its own (it waits up to 30 s):
  // --wait only bounds how long this waits for its answer.
  auto wait = millis{static_cast<int64_t>(o.wait_s.value_or(30) * 1000)};
  auto res = api->cancel_agent(o.name, wait);
  if (!res)
    return fail(res.error());
  std::cout << *res << "\n";
  return exit_completed;
}

int remote_agent_history(const remote_options& r, const agent_options& o) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto doc = api->agent(o.name);
  if (!doc)
    return fail(doc.error());
  auto history = doc->value("history", json::array());
  print_history(history.is_array() ? history : json::array(), o.json);
  return exit_completed;
}

int remote_agent_ls(const remote_options& r, bool as_json) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto items = api->agents();
  if (!items)
    return fail(items.error());
  json out = json::array();
  for (auto& item : *items)
    out.push_back(std::move(item));
  if (as_json)
    std::cout << out.dump() << "\n";
  else
    std::cout << render_agents(out);
  return exit_completed;
}

// -- serve ----------------------------------------------------------------------------------

/// Flags of `canopy serve`; each overrides the config file.
struct serve_flags {
  std::string config;  ///< empty: no file, SPEC §12 defaults
  std::string listen;  ///< empty: the file's (default 127.0.0.1:8080)
  std::string cluster; ///< empty: the file's (default: no cluster port)
  bool resume_interrupted = false;
};

/// `canopy serve`: reads the config, applies the flags over it, and runs
/// the server until SIGTERM/SIGINT. `max_parallel_given` says whether
/// `--max-parallel` was on the command line.
int cmd_serve(const global_options& g, bool max_parallel_given, const serve_flags& f) {
  server_options opts;
  if (!f.config.empty()) {
    auto parsed = load_node_config(f.config);
    if (!parsed) {
      for (auto& e : parsed.errors) {
        // `error: PATH: MESSAGE`; without a path, the file is the place.
        auto where = !e.path.empty() ? e.path + ": "
                     : e.message.find(f.config) == std::string::npos ? f.config + ": "
                                                                     : std::string{};
        std::cerr << "error: " << where << e.message << "\n";
      }
      if (parsed.errors.empty())
        std::cerr << "error: " << f.config << ": unusable configuration\n";
      return exit_usage;
    }
    opts.config = std::move(*parsed.value);
  }
  auto& cfg = opts.config;
  if (!f.listen.empty()) {
    std::string host;
    int port = 0;
    if (!split_host_port(f.listen, host, port))
      return usage_error("--listen '" + f.listen + "': expected HOST:PORT");
    cfg.listen = f.listen;
  }
  if (!f.cluster.empty()) {
    std::string host;
    int port = 0;
    if (!split_host_port(f.cluster, host, port))
      return usage_error("--cluster '" + f.cluster + "': expected HOST:PORT");
    if (!cfg.cluster)
      cfg.cluster.emplace();
    cfg.cluster->listen = f.cluster;
  }
  // A cluster port needs the cluster secret (SPEC §13 rule 22).
  if (cfg.cluster && !cfg.cluster->listen.empty() && cfg.cluster->secret.empty()) {
    if (auto env = std::getenv("CANOPY_CLUSTER_SECRET"); env && *env)
      cfg.cluster->secret = env;
    else
      return usage_error("the cluster port " + cfg.cluster->listen
                         + " needs a secret that workers present: put \"cluster\": "
                           "{\"secret\": \"...\"} in the file of --config FILE, or set "
                           "$CANOPY_CLUSTER_SECRET");
  }
  if (max_parallel_given)
    cfg.max_parallel = g.max_parallel;
  // --home, else the file's home, else $CANOPY_HOME, else ./.canopy.
  if (!g.home.empty())
    cfg.home = g.home;
  else if (cfg.home.empty())
    cfg.home = default_home();
  if (cfg.users.empty())
    if (auto token = std::getenv("CANOPY_TOKEN"); token && *token)
      cfg.users["default"] = token;
  if (cfg.users.empty())
    return usage_error("no users: every request needs a token; add "
                       "\"users\": {\"NAME\": {\"token\": \"...\"}} to the file of "
                       "--config FILE, or set $CANOPY_TOKEN for a user named 'default'");
  opts.resume_interrupted = f.resume_interrupted;
  return run_server(opts);
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
  auto max_parallel_opt =
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

  // `--server URL` and `--token TOKEN` on the commands that can use a server.
  remote_options remote;
  auto add_remote = [&remote](CLI::App* cmd) {
    cmd->add_option("--server", remote.server, "a canopy server, http://HOST:PORT");
    cmd->add_option("--token", remote.token, "bearer token for --server (default $CANOPY_TOKEN)");
  };

  bool force = false;
  double wait_s = 30;
  auto stop = app.add_subcommand("stop", "stop an execution running in another process");
  stop->add_option("id", id, "execution id")->required();
  stop->add_flag("--force", force, "no grace periods: SIGKILL at once");
  stop->add_option("--wait", wait_s, "seconds to wait for the snapshot (default 30)")
    ->check(CLI::Range(0.0, 3600.0));
  add_remote(stop);

  auto show = app.add_subcommand("show", "an execution, its steps and descendants");
  show->add_option("id", id, "execution id")->required();
  show->add_flag("--json", as_json, "print the document as JSON");
  add_remote(show);

  std::string status;
  bool all = false;
  auto ls = app.add_subcommand("ls", "list executions, newest first");
  ls->add_option("--status", status, "only this status");
  ls->add_flag("--all", all, "include child executions");
  ls->add_flag("--json", as_json, "print a JSON array");
  bool nodes = false;
  ls->add_flag("--nodes", nodes, "list the cluster's nodes instead of executions");
  add_remote(ls);

  bool follow_live = false;
  auto events = app.add_subcommand("events", "the event log of an execution's tree");
  events->add_option("id", id, "execution id")->required();
  events->add_flag("--follow", follow_live, "keep printing until the tree stops running");
  events->add_flag("--json", as_json, "one JSON event per line");
  add_remote(events);

  serve_flags sf;
  auto serve = app.add_subcommand("serve", "run a supervisor node with the HTTP API");
  serve->add_option("--listen", sf.listen, "HOST:PORT of the HTTP API (default 127.0.0.1:8080)");
  serve->add_option("--cluster", sf.cluster, "HOST:PORT of the cluster port");
  serve->add_option("--config", sf.config, "node configuration file (JSON)");
  serve->add_flag("--resume-interrupted", sf.resume_interrupted,
                  "resume the executions a dead process left interrupted");

  worker_flags wf;
  auto worker = app.add_subcommand("worker", "run a node that runs steps for a supervisor");
  worker->add_option("--join", wf.join, "HOST:PORT of the supervisor's cluster port")
    ->required();
  auto slots_opt = worker->add_option("--slots", wf.slots, "subprocess steps at once (default 4)")
                     ->check(CLI::Range(1, 4096));
  worker->add_option("--tools", wf.tools_file, "tools file (JSON: tools; cluster: secret, heartbeat, timeout)");
  worker->add_option("--name", wf.name, "node name (default: the host name)");
  worker->add_option("--heartbeat", wf.heartbeat,
                     "ping interval, e.g. 500ms (default: the tools file's cluster.heartbeat, "
                     "else 1s)");
  worker->add_option("--timeout", wf.timeout,
                     "the supervisor is lost after this much silence (default: the tools "
                     "file's cluster.timeout, else 5s)");

  agent_options ao;
  auto agent = app.add_subcommand("agent", "named agents: create, send, cancel, history, ls");
  agent->require_subcommand(1);
  auto agent_create = agent->add_subcommand("create", "create an agent, or replace its graph");
  agent_create->add_option("name", ao.name, "agent name")->required();
  agent_create->add_option("--graph", ao.graph_file, "the agent's graph file")->required();
  agent_create->add_option("--on-busy", ao.on_busy,
                           "cancel_previous (default), queue or reject");
  agent_create->add_option("--node", ao.node,
                           "the cluster node it lives on: its steps run there "
                           "(default: any node)");
  agent_create->add_flag("--json", ao.json, "print the agent document");
  add_remote(agent_create);
  auto agent_send = agent->add_subcommand("send", "send a message and print the reply");
  agent_send->add_option("name", ao.name, "agent name")->required();
  agent_send->add_option("text", ao.text, "the message (a JSON string)")->required();
  agent_send->add_flag("--json", ao.json, "print {reply, execution_id, status}");
  add_remote(agent_send);
  auto agent_cancel = agent->add_subcommand("cancel", "cancel the agent's live run");
  agent_cancel->add_option("name", ao.name, "agent name")->required();
  agent_cancel->add_option("--wait", ao.wait_s, "seconds to wait for the run to stop (default 30)")
    ->check(CLI::Range(0.0, 3600.0));
  add_remote(agent_cancel);
  auto agent_history = agent->add_subcommand("history", "the agent's conversation");
  agent_history->add_option("name", ao.name, "agent name")->required();
  agent_history->add_flag("--json", ao.json, "print the array of history entries");
  add_remote(agent_history);
  auto agent_ls = agent->add_subcommand("ls", "list agents");
  agent_ls->add_flag("--json", ao.json, "print a JSON array of agent documents");
  add_remote(agent_ls);

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
  if (!remote.token.empty() && remote.server.empty())
    return usage_error("--token needs --server URL");
  if (!status.empty() && !valid_status(status))
    return usage_error("--status: unknown status '" + status
                       + "' (queued, running, stopping, stopped, completed, failed)");
  bool on_server = !remote.server.empty();
  if (stop->parsed())
    return on_server ? remote_stop(remote, id, force, wait_s) : cmd_stop(g, id, force, wait_s);
  if (show->parsed())
    return on_server ? remote_show(remote, id, as_json) : cmd_show(g, id, as_json);
  if (ls->parsed() && nodes) {
    if (!status.empty() || all)
      return usage_error("--nodes lists nodes: it takes no --status or --all");
    return on_server ? remote_ls_nodes(remote, as_json) : cmd_ls_nodes(g, as_json);
  }
  if (ls->parsed())
    return on_server ? remote_ls(remote, status, all, as_json)
                     : cmd_ls(g, status, all, as_json);
  if (events->parsed())
    return on_server ? remote_events(remote, id, follow_live, as_json)
                     : cmd_events(g, id, follow_live, as_json);
  if (agent_create->parsed())
    return on_server ? remote_agent_create(remote, ao) : cmd_agent_create(g, ao);
  if (agent_send->parsed())
    return on_server ? remote_agent_send(remote, ao) : cmd_agent_send(g, ao);
  if (agent_cancel->parsed())
    return on_server ? remote_agent_cancel(remote, ao) : cmd_agent_cancel(g, ao);
  if (agent_history->parsed())
    return on_server ? remote_agent_history(remote, ao) : cmd_agent_history(g, ao);
  if (agent_ls->parsed())
    return on_server ? remote_agent_ls(remote, ao.json) : cmd_agent_ls(g, ao.json);
  if (serve->parsed())
    return cmd_serve(g, max_parallel_opt->count() > 0, sf);
  if (validate->parsed())
    return cmd_validate(file);
  if (worker->parsed()) {
    // `--max-parallel` is an alias of `--slots` (SPEC §13 rule 15).
    if (max_parallel_opt->count() > 0) {
      if (slots_opt->count() > 0 && wf.slots != g.max_parallel)
        return usage_error("--slots " + std::to_string(wf.slots) + " and --max-parallel "
                           + std::to_string(g.max_parallel) + " disagree (one is an alias "
                           "of the other)");
      wf.slots = g.max_parallel;
    }
    return run_worker(wf);
  }
  return exit_usage;
}

} // namespace canopy
