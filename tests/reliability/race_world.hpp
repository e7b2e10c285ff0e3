#pragma once

// The state of one race trial (race_trial.hpp), shared by its scheduler and
// bookkeeping (race_trial.cpp) and its actions (race_actions.cpp). Internal
// to the race harness.
//
// Threads: the trial's own thread draws every random number and starts
// every action; a monitor thread polls the processes and records their
// exits; actions that block (readers, stops, HTTP calls, SSE streams) run on
// worker threads. Members marked "locked" take `mtx_`.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/process/subprocess.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/reliability/race_trial.hpp"

namespace canopy::core::test::race {

/// Milliseconds since the epoch on the wall clock (what event times use).
int64_t wall_ms();

/// One canopy process the trial started.
struct tracked {
  process_span span;
  std::string mark;
  std::optional<subprocess> cli;          ///< `run`, `run --detach`, `resume`
  std::unique_ptr<server_process> server; ///< `serve`
  bool owner = true;                      ///< may run the tree: a target for signals
  bool watched = false;                   ///< not our child (a detached run): seen through /proc
  bool ended() const { return span.ended_ms != 0; }
};

/// One trial's world: its folder, graph, processes and observations.
class world {
public:
  explicit world(const race_options& opts);
  /// Kills whatever still runs (servers, processes, marked leftovers),
  /// joins the workers and the monitor.
  ~world();
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  // -- setup ---------------------------------------------------------------------------

  race_options opts;
  std::mt19937_64 rng;
  /// The trial's folder (/tmp/canopy-race-XXXXXX): home, graph, side file.
  std::string dir, home, graph_file, side_file, mark_base;
  nlohmann::json graph;
  int64_t t0_ms = 0;

  /// A uniform draw from lo..hi (trial thread only).
  int draw(int lo, int hi);

  // -- recording (locked) --------------------------------------------------------------

  /// Appends `+MS what` to the action log.
  void note(const std::string& what);
  /// Counts one action of kind `kind` and notes it.
  void did(const std::string& kind, const std::string& detail = {});
  /// A failure the trial met (kind `failures`).
  void fail(const std::string& text);
  void add_read(log_read r);

  // -- processes (locked) --------------------------------------------------------------

  /// Starts `canopy --home HOME ARGS...` marked for this trial. A `claim`
  /// says it is asked to run the tree now. @returns its index.
  size_t spawn_cli(const std::string& role, const std::vector<std::string>& args, bool owner,
                   bool claim);
  /// Starts `canopy serve` (with `--resume-interrupted`: a claim). @returns
  /// its index, or nullopt when it did not start (a failure).
  std::optional<size_t> spawn_serve(bool resume_interrupted);
  /// Tracks a detached run's background process `pid`, started for
  /// process `parent`, and moves the parent's claims to it.
  void watch_detached(size_t parent, long pid);
  void claim(size_t process, int64_t asked_ms);
  /// Sends `sig` to the process (its leader only: its guardian and the
  /// steps' groups react as to a real crash or Ctrl-C).
  void signal(size_t process, int sig);
  /// Indices of processes not ended that satisfy `pred`.
  std::vector<size_t> live(const std::function<bool(const tracked&)>& pred);
  bool ended(size_t process);
  /// Waits until process `i` ended; false after `timeout`.
  bool wait_ended(size_t process, std::chrono::milliseconds timeout);
  /// What process `i` printed on stdout so far (a CLI process).
  std::string out_of(size_t process);
  int port_of(size_t process);
  /// `ROLE pid PID` of process `i`.
  std::string name_of(size_t process);

  // -- HTTP (any thread) ---------------------------------------------------------------

  /// A request to server `process` as alice, recorded.
  http_answer http(size_t process, const std::string& method, const std::string& path,
                   const std::string& body = {});
  /// Reads an SSE stream of the tree's events from server `process` to its
  /// end, recorded (as a read when it was answered 200).
  void sse(size_t process, std::optional<uint64_t> last_event_id);

  // -- the tree ------------------------------------------------------------------------

  std::string id() const;
  void set_id(const std::string& id);
  /// Started over HTTP: alice owns it, HTTP actions reach it.
  std::atomic<bool> http_tree{false};

  // -- workers -------------------------------------------------------------------------

  /// Runs `f` on a worker thread; an exception it throws is a failure.
  void spawn_worker(const std::string& what, std::function<void()> f);
  void join_workers();

  // -- actions (race_actions.cpp) --------------------------------------------------------

  /// Starts the tree in one of three ways, drawn. Throws when it cannot.
  void start_tree();
  /// Draws one applicable action and performs (or launches) it.
  void act();

  // -- the workload and the end (race_trial.cpp) -----------------------------------------

  /// Draws the graph and writes it to `graph_file`.
  void make_workload();

  /// Lets the tree settle, stops the servers, resumes it to completion,
  /// reads the store and the side file, scans for orphans.
  void finish();
  /// Everything observed, for the judge.
  race_observations observations();

  /// What the trial did so far (locked copy).
  race_result copy_result();

  race_result result; ///< written under the lock; read with copy_result()

private:
  void monitor_loop();
  /// Polls process `t` once (locked); records its exit.
  void poll(tracked& t);

  mutable std::mutex mtx_;
  std::vector<std::unique_ptr<tracked>> procs_;
  race_observations obs_;
  std::string id_;
  std::vector<std::thread> workers_;
  std::atomic<bool> quit_{false};
  std::thread monitor_;
};

} // namespace canopy::core::test::race
