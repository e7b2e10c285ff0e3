#pragma once

// The server's Prometheus metrics (runtime/docs/reference/http.md `GET /metrics`): executions by
// status, steps started and finished, live execution actors, stop latency,
// store commit latency, HTTP requests by route and code, agent events
// (messages, replies, cancels), the store's bytes in use, trees pruned and
// log lines dropped.

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

/// A Prometheus histogram with fixed upper bounds (seconds).
class histogram {
public:
  explicit histogram(std::vector<double> bounds);
  void observe(double seconds);
  /// Appends the `_bucket`, `_sum` and `_count` lines of metric `name`.
  void render(const std::string& name, std::string& out) const;

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_; ///< per bound, not cumulative; last: +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

/// Every metric of one server. Thread-safe: all members may be called from
/// any thread.
class metrics {
public:
  metrics();

  /// Updates the step and agent counters from a committed event; a
  /// `stop.handled` event observes its request's latency (read from `db`).
  void on_event(const event_record& e, const store& db);

  /// Observes one store commit.
  void observe_commit(double seconds);

  /// Sets the closed set of route labels (the route patterns, e.g.
  /// `/v1/executions/{id}/stop`, and `unknown`); call before counting.
  void set_routes(std::vector<std::string> routes);

  /// Counts one answered HTTP request. The labels come from closed sets, so
  /// the number of series is bounded whatever clients send: a method outside
  /// http_methods() counts as `other`, a route outside set_routes() as
  /// `unknown`, a code outside 100-599 as 0.
  void count_request(const std::string& method, const std::string& route, int code);

  /// Counts root trees deleted by the server's retention.
  void count_pruned(size_t trees);

  /// Counts a write refused because another process took its tree over.
  void count_fenced();

  /// @returns the Prometheus text exposition (format 0.0.4), with the
  /// executions stored per status (`store::status_counts`, kept by the
  /// store: nothing here grows with the history), the store's bytes in use
  /// (`store_usage::used_bytes`) and the log lines lost so far
  /// (`log_status::dropped`, runtime/node/logging.hpp).
  std::string render(size_t live_actors, const std::array<uint64_t, 6>& executions,
                     uint64_t store_bytes, uint64_t log_dropped) const;

private:
  mutable std::mutex mtx_;
  uint64_t steps_started_ = 0;
  uint64_t steps_completed_ = 0;
  uint64_t steps_failed_ = 0;
  uint64_t pruned_ = 0;
  uint64_t fenced_ = 0;
  histogram stop_latency_;
  histogram commit_latency_;
  std::vector<std::string> routes_; ///< the route labels (set_routes)
  std::map<std::string, uint64_t> requests_; ///< "method\0route\0code" → count
  /// `agent.*` event type → count
  std::map<event_type, uint64_t> agent_events_{{event_type::agent_cancelled, 0},
                                               {event_type::agent_message, 0},
                                               {event_type::agent_reply, 0}};
};

} // namespace canopy::core
