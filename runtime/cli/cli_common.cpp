// What the CLI's files share (cli_common.hpp): errors and exit codes,
// inputs, Ctrl-C, opening the local home, and printing documents.

#include "runtime/cli/cli_common.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <thread>

#include "persistence/error.hpp"
#include "runtime/node/document.hpp"
#include "runtime/node/error.hpp"
#include "runtime/cli/render.hpp"

namespace canopy::core::cli {

namespace {

// -- tunables ---------------------------------------------------------------------------

/// `follow_store` polls the store this often: the shortest pause while
/// events arrive, doubling to the longest while the tree is quiet.
constexpr std::chrono::milliseconds min_follow_poll{5};
constexpr std::chrono::milliseconds max_follow_poll{50};

/// `follow_store` looks for a dead owner this often (a tree whose process
/// died stays `running` until someone recovers it).
constexpr std::chrono::milliseconds follow_recovery_interval{250};

/// How long a read command's recovery waits for the store's writers' lock.
/// Reads must work while another process holds the home (runtime/docs/reference/cli.md#client-options):
/// past this, the command reads without recovering (and says so on stderr).
/// Long enough for the other process's ordinary commits to finish.
constexpr std::chrono::milliseconds read_recovery_wait{250};

// -- helpers of the commands ----------------------------------------------------------

/// Turns executions of dead owners into `stopped`/`interrupted` (runtime/docs/reference/graph-format.md
/// rule 12). For a reading command a busy store is no error: it warns once on
/// stderr and reads on without recovering (runtime/docs/reference/cli.md#client-options).
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

/// Why a reading command finds nothing at the local home: it holds no store
/// (the folder is missing, or nothing has run with it). @returns the
/// message, naming the folder as an absolute path, or nothing when there is
/// a store.
std::optional<std::string> missing_home(const std::string& home) {
  struct stat st;
  if (::stat((home + "/data.mdb").c_str(), &st) == 0)
    return std::nullopt;
  auto shown = home;
  char cwd[4096];
  if (!shown.empty() && shown.front() != '/' && ::getcwd(cwd, sizeof(cwd)) != nullptr)
    shown = std::string{cwd} + "/" + (shown.rfind("./", 0) == 0 ? shown.substr(2) : shown);
  return "no canopy home at '" + shown
         + "' (nothing has run with it; pass --home DIR or set $CANOPY_HOME)";
}

} // namespace

std::string home_of(const global_options& g) {
  return g.home.empty() ? default_home() : g.home;
}

// -- shared by the CLI's files (cli_common.hpp) -----------------------------------------

int exit_code_of(execution_status s) {
  switch (s) {
    case execution_status::completed: return exit_completed;
    case execution_status::stopped: return exit_stopped;
    default: return exit_failed;
  }
}

caf::expected<json> parse_signals(const std::vector<std::string>& items) {
  json out = json::object();
  for (auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(runtime_errc::invalid_input,
                        "--signal '" + item + "': expected NAME=JSON");
    auto value = parse_json_text(item.substr(eq + 1));
    if (!value)
      return make_error(runtime_errc::invalid_input,
                        "--signal " + item.substr(0, eq) + ": bad JSON: "
                          + message_of(value.error()) + " (a string needs quotes)");
    out[item.substr(0, eq)] = std::move(*value);
  }
  return out;
}

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

int fail(const caf::error& err) {
  std::cerr << "error: " << message_of(err) << "\n";
  return canopy::core::exit_code_of(err);
}

int usage_error(const std::string& msg) {
  std::cerr << "error: " << msg << "\n";
  return exit_usage;
}

int report_graph_errors(const std::string& file, const parse_result& r) {
  for (auto& e : r.errors)
    std::cerr << file << ": " << (e.path.empty() ? "" : e.path + ": ") << e.message << "\n";
  return exit_usage;
}

interrupt_guard::interrupt_guard() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

void interrupt_guard::watch(std::function<void(int)> on_signal) {
  thread_ = std::thread([this, f = std::move(on_signal)] {
    for (int n = 0;; ++n) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0 || done_)
        return;
      f(n);
    }
  });
}

void interrupt_guard::finish() {
  if (thread_.joinable()) {
    done_ = true;
    pthread_kill(thread_.native_handle(), SIGINT);
    thread_.join();
  }
}

interrupt_guard::~interrupt_guard() {
  finish();
}

caf::expected<std::unique_ptr<runtime>> open_runtime(const global_options& g) {
  return open_runtime(g, nullptr);
}

caf::expected<std::unique_ptr<runtime>> open_runtime(const global_options& g,
                                                     const node_config* cfg) {
  runtime_options opts;
  opts.home = home_of(g);
  opts.max_parallel = g.max_parallel;
  if (cfg != nullptr) {
    opts.tools = cfg->tools;
    opts.providers = cfg->providers;
  }
  return runtime::open(opts);
}

std::optional<node_config> read_run_config(const std::string& file) {
  auto parsed = load_run_config(file);
  if (parsed)
    return std::move(*parsed.value);
  for (auto& e : parsed.errors)
    std::cerr << "error: " << (e.path.empty() ? file : file + ": " + e.path) << ": " << e.message
              << "\n";
  if (parsed.errors.empty())
    std::cerr << "error: " << file << ": unusable configuration\n";
  return std::nullopt;
}

parse_options local_or_server_tools(const node_config* cfg, const remote_options& remote) {
  parse_options opts;
  if (!remote.server.empty()) {
    opts.any_tool = true;
    return opts;
  }
  if (cfg == nullptr) {
    opts.unknown_tool_hint = "; tools come from a node config file: pass it with --config FILE";
    return opts;
  }
  for (auto& kv : cfg->tools)
    opts.tools.insert(kv.first);
  return opts;
}

bool use_colour(const global_options& g, bool tty) {
  if (g.color == "always")
    return true;
  if (g.color == "never")
    return false;
  auto no_color = std::getenv("NO_COLOR");
  return tty && (no_color == nullptr || *no_color == '\0');
}

caf::expected<std::shared_ptr<store>> open_store(const global_options& g, store_use use) {
  store_options opts;
  opts.home = home_of(g);
  // A reading command never creates a home: a typo in --home, or a folder
  // where nothing ran, says so instead of opening an empty new store.
  if (use == store_use::read) {
    if (auto why = missing_home(opts.home))
      return make_error(persistence_errc::not_found, std::move(*why));
    opts.write_wait = read_recovery_wait;
  }
  auto db = store::open(opts);
  if (!db)
    return db.error();
  if (auto err = recover(**db, use))
    return err;
  return db;
}

caf::expected<std::shared_ptr<store>> open_listing(const global_options& g, bool as_json) {
  // An empty home gives `[]`; the table names the folder
  // looked at, so that a typo in --home still shows.
  if (auto why = missing_home(home_of(g))) {
    if (!as_json)
      std::cerr << *why << "\n";
    return std::shared_ptr<store>{};
  }
  return open_store(g, store_use::read);
}

caf::error recover_reading(store& db) {
  return recover(db, store_use::read);
}

int print_document(const caf::expected<json>& doc, bool as_json) {
  if (!doc)
    return fail(doc.error());
  if (as_json)
    std::cout << doc->dump() << "\n";
  else
    std::cout << render_document(*doc, now_ms());
  return 0;
}

void print_nodes(const json& docs, bool as_json) {
  if (as_json)
    std::cout << docs.dump() << "\n";
  else
    std::cout << render_nodes(docs);
}

caf::error follow_store(store& db, const std::string& id, const std::string& root_id,
                        bool follow, const store_read_handler& on_read) {
  uint64_t after = 0;
  auto delay = min_follow_poll;
  auto last_recovery = std::chrono::steady_clock::now();
  for (;;) {
    auto now = db.execution(id);
    if (!now)
      return now.error();
    auto events = db.tree_events(root_id, after);
    if (!events)
      return events.error();
    if (!events->empty())
      after = events->back().seq;
    if (on_read(*now, *events) || !follow || is_terminal(now->status))
      return caf::none;
    delay = events->empty() ? std::min(delay * 2, max_follow_poll) : min_follow_poll;
    std::this_thread::sleep_for(delay);
    if (std::chrono::steady_clock::now() - last_recovery > follow_recovery_interval) {
      last_recovery = std::chrono::steady_clock::now();
      if (auto err = recover_reading(db))
        return err;
    }
  }
}

} // namespace canopy::core::cli
