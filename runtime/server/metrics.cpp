#include "runtime/server/metrics.hpp"

#include <algorithm>
#include <cstdio>

#include "runtime/server/http_routes.hpp"

namespace canopy::core {

// -- histogram -------------------------------------------------------------------

histogram::histogram(std::vector<double> bounds)
  : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
}

void histogram::observe(double seconds) {
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i])
    ++i;
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

namespace {

std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", x);
  return buf;
}

/// Escapes a label value (backslash, quote, newline).
std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

} // namespace

void histogram::render(const std::string& name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative)
           + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

// -- metrics -----------------------------------------------------------------------

metrics::metrics()
  : stop_latency_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
    commit_latency_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {
}

void metrics::on_event(const event_record& e, const store& db) {
  if (e.type == event_type::stop_handled && e.data.is_object() && e.data.contains("stop_id")
      && e.data["stop_id"].is_string()) {
    if (auto r = db.stop(e.data["stop_id"].get<std::string>()); r && r->handled_at != 0) {
      std::lock_guard<std::mutex> guard{mtx_};
      stop_latency_.observe(static_cast<double>(r->handled_at - r->requested_at) / 1000.0);
    }
    return;
  }
  std::lock_guard<std::mutex> guard{mtx_};
  switch (e.type) {
    case event_type::step_started: ++steps_started_; break;
    case event_type::step_completed: ++steps_completed_; break;
    case event_type::step_failed: ++steps_failed_; break;
    case event_type::agent_cancelled:
    case event_type::agent_message:
    case event_type::agent_reply: ++agent_events_[e.type]; break;
    default: break;
  }
}

void metrics::count_pruned(size_t trees) {
  std::lock_guard<std::mutex> guard{mtx_};
  pruned_ += trees;
}

void metrics::count_fenced() {
  std::lock_guard<std::mutex> guard{mtx_};
  ++fenced_;
}

void metrics::observe_commit(double seconds) {
  std::lock_guard<std::mutex> guard{mtx_};
  commit_latency_.observe(seconds);
}

void metrics::set_routes(std::vector<std::string> routes) {
  std::lock_guard<std::mutex> guard{mtx_};
  routes_ = std::move(routes);
  if (std::find(routes_.begin(), routes_.end(), route_table::unknown) == routes_.end())
    routes_.push_back(route_table::unknown);
}

void metrics::count_request(const std::string& method, const std::string& route, int code) {
  std::lock_guard<std::mutex> guard{mtx_};
  bool known = std::find(routes_.begin(), routes_.end(), route) != routes_.end();
  if (code < 100 || code > 599)
    code = 0;
  ++requests_[method_label(method) + '\0' + (known ? route : route_table::unknown) + '\0'
              + std::to_string(code)];
}

std::string metrics::render(size_t live_actors, const std::array<uint64_t, 6>& executions,
                            uint64_t store_bytes, uint64_t log_dropped) const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::string out;
  out += "# HELP canopy_executions Executions in the store by status.\n"
         "# TYPE canopy_executions gauge\n";
  for (size_t i = 0; i < executions.size(); ++i)
    out += std::string{"canopy_executions{status=\""}
           + to_string(static_cast<execution_status>(i)) + "\"} "
           + std::to_string(executions[i]) + "\n";
  out += "# HELP canopy_steps_started_total Step attempts started.\n"
         "# TYPE canopy_steps_started_total counter\n"
         "canopy_steps_started_total "
         + std::to_string(steps_started_) + "\n";
  out += "# HELP canopy_steps_finished_total Step attempts finished, by result.\n"
         "# TYPE canopy_steps_finished_total counter\n"
         "canopy_steps_finished_total{result=\"completed\"} "
         + std::to_string(steps_completed_) + "\ncanopy_steps_finished_total{result=\"failed\"} "
         + std::to_string(steps_failed_) + "\n";
  out += "# HELP canopy_live_actors Execution actors alive in this node.\n"
         "# TYPE canopy_live_actors gauge\n"
         "canopy_live_actors "
         + std::to_string(live_actors) + "\n";
  out += "# HELP canopy_store_bytes Bytes of the store file holding data (its free pages "
         "excluded).\n"
         "# TYPE canopy_store_bytes gauge\n"
         "canopy_store_bytes "
         + std::to_string(store_bytes) + "\n";
  out += "# HELP canopy_pruned_total Settled root trees deleted by the retention rules.\n"
         "# TYPE canopy_pruned_total counter\n"
         "canopy_pruned_total "
         + std::to_string(pruned_) + "\n";
  out += "# HELP canopy_fenced_total Writes refused because another process took their "
         "tree over.\n"
         "# TYPE canopy_fenced_total counter\n"
         "canopy_fenced_total "
         + std::to_string(fenced_) + "\n";
  out += "# HELP canopy_log_dropped_total Log lines dropped because stderr did not take "
         "them in time.\n"
         "# TYPE canopy_log_dropped_total counter\n"
         "canopy_log_dropped_total "
         + std::to_string(log_dropped) + "\n";
  out += "# HELP canopy_stop_latency_seconds From a stop request to its committed snapshot.\n"
         "# TYPE canopy_stop_latency_seconds histogram\n";
  stop_latency_.render("canopy_stop_latency_seconds", out);
  out += "# HELP canopy_store_commit_seconds Duration of store write transactions.\n"
         "# TYPE canopy_store_commit_seconds histogram\n";
  commit_latency_.render("canopy_store_commit_seconds", out);
  out += "# HELP canopy_agent_events_total Agent messages, replies and cancels, by event type.\n"
         "# TYPE canopy_agent_events_total counter\n";
  for (auto& kv : agent_events_)
    out += "canopy_agent_events_total{type=\"" + std::string{to_string(kv.first)} + "\"} "
           + std::to_string(kv.second)
           + "\n";
  out += "# HELP canopy_http_requests_total HTTP requests answered, by route and code.\n"
         "# TYPE canopy_http_requests_total counter\n";
  for (auto& kv : requests_) {
    auto a = kv.first.find('\0');
    auto b = kv.first.find('\0', a + 1);
    out += "canopy_http_requests_total{method=\"" + label(kv.first.substr(0, a)) + "\",route=\""
           + label(kv.first.substr(a + 1, b - a - 1)) + "\",code=\"" + kv.first.substr(b + 1)
           + "\"} " + std::to_string(kv.second) + "\n";
  }
  return out;
}

} // namespace canopy::core
