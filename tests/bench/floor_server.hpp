#pragma once

// The floor of canopy's HTTP layer, for `bench_load --floor`: the same
// listener `canopy serve` runs (runtime/http_listener: thread per
// connection, keep-alive, TCP_NODELAY, the same limits, timeouts and
// payload cap as runtime/server/server.cpp sets), with handlers that answer the
// bench_load requests at once with canned JSON. The bodies are copies of a
// real server's answers (same shape, same size), each with its own id. No
// store, no actors, no authentication, no metrics: what is left is the cost
// of parsing a request, routing it, and the thread hand-offs of the
// connection model.
//
// The durable floor (`bench_load --floor-durable`) adds what canopy's
// contract needs of the disk and nothing else: each change a client sees
// is committed to an LMDB environment (default sync: the data pages, then
// the meta page) by one writer thread that groups every record waiting for
// it into one transaction, as canopy's store writer does. A start is
// answered once its record is committed; a stop once two records were
// committed one after the other (the request, then the stopped state); a
// `small` execution reads as completed once its run time passed and then
// two more commits did (its step's result, then its final record).

#include <chrono>
#include <functional>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <httplib.h>

#include "runtime/server/http_listener.hpp"

namespace canopy::core::test {

/// One load run's figures, for the floor's comparison.
struct load_summary {
  double starts = 0;                ///< executions started per second
  double requests = 0;              ///< HTTP requests answered per second
  double p50 = 0, p99 = 0, max = 0; ///< stop round trip (ms)
  bool bad = false; ///< a 5xx, a request without an answer, or a wrong stop answer
};

/// Prints a Markdown table of the floor run beside the real one.
void print_floor_comparison(const load_summary& floor, const load_summary& real, int clients,
                            int seconds);

/// One answer body in which an execution id is swapped for another.
class canned_body {
public:
  canned_body() = default;

  /// Splits `body` at every occurrence of `id`.
  canned_body(const std::string& body, const std::string& id);

  /// The body with `id` wherever the sample's id was.
  std::string render(const std::string& id) const;

  /// The sample's size in bytes.
  size_t size() const {
    return size_;
  }

private:
  std::vector<std::string> parts_;
  size_t size_ = 0;
};

/// Real answers that the floor server repeats.
struct floor_bodies {
  canned_body started;   ///< 201 to `POST /v1/graphs/{g}/executions`
  canned_body running;   ///< 200 to `GET /v1/executions/{id}`, not yet done
  canned_body completed; ///< 200 to `GET /v1/executions/{id}`, completed
  canned_body stopped;   ///< 200 to `POST /v1/executions/{id}/stop`
  size_t id_size = 0;    ///< the length of a real execution id
};

/// Reads one answer of each kind from a real server that has the load
/// graphs (tests/bench/load_graphs.hpp). @returns false, after saying why
/// on stderr, when one of them failed.
bool capture_floor_bodies(httplib::Client& c, floor_bodies& out);

/// One writer thread that commits every record waiting for it in one LMDB
/// transaction with LMDB's default (full) sync, and answers the waiters.
class floor_log {
public:
  using clock_type = std::chrono::steady_clock;

  /// Opens (creates) an environment in directory `home`, which must exist.
  /// @returns false from `ok()` when LMDB could not open it.
  explicit floor_log(const std::string& home);
  ~floor_log();

  floor_log(const floor_log&) = delete;
  floor_log& operator=(const floor_log&) = delete;

  bool ok() const {
    return env_ != nullptr;
  }

  /// Stores `value` under a fresh key; blocks until its commit returned.
  /// @returns false when the commit failed.
  bool commit(std::string value);

  /// After `due`, commits a record for `id` twice, in two transactions one
  /// after the other, then calls `done(id)` (on the writer thread).
  void complete_after(const std::string& id, clock_type::time_point due,
                      std::function<void(const std::string&)> done);

private:
  struct waiting {
    std::string value;
    std::promise<bool> committed;
  };
  struct finishing {
    std::string id;
    clock_type::time_point due;
    int commits_left = 2;
    std::function<void(const std::string&)> done;
  };

  void run();

  struct MDB_env* env_ = nullptr;
  unsigned int dbi_ = 0;
  uint64_t key_ = 0;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<waiting> queue_;
  std::vector<finishing> finishing_;
  bool stopping_ = false;
  std::thread thread_;
};

/// An in-process server on 127.0.0.1 (a free port) that answers like
/// `canopy serve` would, at once: a started execution reads as running
/// until `run_time` passed since its start, then as completed; a stop
/// answers `stopped` without waiting. Stops and joins on destruction.
class floor_server {
public:
  /// With `log`, every change is committed to it before it is answered
  /// (the durable floor); the server does not own it.
  explicit floor_server(floor_bodies bodies,
                        std::chrono::milliseconds run_time = std::chrono::milliseconds{5},
                        floor_log* log = nullptr);
  ~floor_server();

  floor_server(const floor_server&) = delete;
  floor_server& operator=(const floor_server&) = delete;

  /// The bound port, or -1 when binding failed.
  int port() const {
    return port_;
  }

private:
  using clock_type = std::chrono::steady_clock;

  /// A fresh id as long as a real one.
  std::string next_id();

  floor_bodies bodies_;
  std::chrono::milliseconds run_time_;
  floor_log* log_;
  canopy::core::http_listener svr_;
  std::thread thread_;
  int port_ = -1;
  std::mutex mtx_;
  uint64_t counter_ = 0;
  std::unordered_map<std::string, clock_type::time_point> live_; ///< id → start
  /// Durable floor: `small` executions whose final record is not committed yet.
  std::unordered_set<std::string> unfinished_;
};

} // namespace canopy::core::test
