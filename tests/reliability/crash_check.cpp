#include "tests/reliability/crash_check.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"

namespace canopy::core::test {

using json = nlohmann::json;

namespace {

/// Calls `f(name, step)` for every step of the tree `doc`.
template <class F>
void for_each_step(const json& doc, F&& f) {
  test::for_each_execution(doc, [&](const json& e) {
    if (!e.is_object())
      return;
    if (auto s = e.find("steps"); s != e.end() && s->is_object())
      for (auto& kv : s->items())
        f(kv.key(), kv.value());
  });
}

/// Number of events of `type` for `step`.
size_t count_events(const std::vector<json>& events, const std::string& type,
                    const std::string& step) {
  return static_cast<size_t>(std::count_if(events.begin(), events.end(), [&](const json& e) {
    return e.value("type", "") == type && e.value("step", "") == step;
  }));
}

/// The seq of the first (or last) event of `type` for `step`.
std::optional<uint64_t> seq_of(const std::vector<json>& events, const std::string& type,
                               const std::string& step, bool last) {
  std::optional<uint64_t> out;
  for (auto& e : events)
    if (e.value("type", "") == type && e.value("step", "") == step) {
      auto seq = e.value("seq", uint64_t{0});
      if (!out || (last ? seq > *out : seq < *out))
        out = seq;
    }
  return out;
}

/// The index of the first (or last) log line of `step` of the given kind.
std::optional<size_t> line_of(const std::vector<log_line>& log, bool begin,
                              const std::string& step, bool last) {
  std::optional<size_t> out;
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i].begin == begin && log[i].step == step && (last || !out))
      out = i;
  return out;
}

size_t count_begins(const std::vector<log_line>& log, const std::string& step) {
  return static_cast<size_t>(std::count_if(
    log.begin(), log.end(), [&](const log_line& l) { return l.begin && l.step == step; }));
}

} // namespace

std::vector<log_line> parse_log(const std::string& text) {
  std::vector<log_line> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words{line};
    std::string kind, step, pid, extra;
    if (!(words >> kind >> step >> pid) || (words >> extra))
      continue;
    if (kind != "begin" && kind != "end")
      continue;
    if (pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    out.push_back({kind == "begin", step});
  }
  return out;
}

std::map<std::string, json> tree_steps(const json& doc) {
  std::map<std::string, json> out;
  for_each_step(doc, [&](const std::string& name, const json& s) { out[name] = s; });
  return out;
}

completed_snapshot snapshot_of(const json& doc, const std::vector<json>& events,
                               const std::vector<log_line>& log) {
  completed_snapshot out;
  for_each_step(doc, [&](const std::string& name, const json& s) {
    if (s.value("status", "") != "completed")
      return;
    step_seen seen;
    seen.attempt = s.value("attempt", 0);
    seen.started = count_events(events, "step.started", name);
    seen.begins = count_begins(log, name);
    out[name] = seen;
  });
  return out;
}

trial_verdict judge(const trial_observations& obs) {
  trial_verdict v;
  auto note = [&](std::string text) { v.notes.push_back(std::move(text)); };
  auto final_steps = tree_steps(obs.final_doc);
  bool is_run = false;

  // 1. Completed steps never run again: the first snapshot that saw a step
  //    completed fixes its attempt and its start counts for good.
  std::map<std::string, step_seen> fixed;
  for (auto& snap : obs.snapshots)
    for (auto& kv : snap)
      fixed.emplace(kv.first, kv.second);
  std::map<std::string, size_t> final_begins;
  for (auto& line : obs.log)
    if (line.begin)
      ++final_begins[line.step];
  for (auto& [name, seen] : fixed) {
    is_run = std::find(obs.run_steps.begin(), obs.run_steps.end(), name)
             != obs.run_steps.end();
    auto f = final_steps.find(name);
    int attempt = f == final_steps.end() ? -1 : f->second.value("attempt", 0);
    auto started = count_events(obs.events, "step.started", name);
    auto begins = final_begins[name];
    if (attempt != seen.attempt || started != seen.started
        || (is_run && begins != seen.begins)) {
      ++v.reruns;
      note("step " + name + " was completed at a kill and ran again (attempt "
           + std::to_string(seen.attempt) + " -> " + std::to_string(attempt) + ", started "
           + std::to_string(seen.started) + " -> " + std::to_string(started) + ", begins "
           + std::to_string(seen.begins) + " -> " + std::to_string(begins) + ")");
    }
  }

  // 2. Dependency order, in the store's events and in the side-effect log.
  for (auto& [name, deps] : obs.needs) {
    is_run = std::find(obs.run_steps.begin(), obs.run_steps.end(), name)
             != obs.run_steps.end();
    auto first_start = seq_of(obs.events, "step.started", name, false);
    auto first_begin = line_of(obs.log, true, name, false);
    bool broken = false;
    for (auto& dep : deps) {
      auto done = seq_of(obs.events, "step.completed", dep, true);
      if (first_start && (!done || *done > *first_start)) {
        broken = true;
        note("step " + name + " started (event) before " + dep + " completed");
      }
      bool dep_is_run = std::find(obs.run_steps.begin(), obs.run_steps.end(), dep)
                        != obs.run_steps.end();
      if (is_run && dep_is_run && first_begin) {
        auto end = line_of(obs.log, false, dep, true);
        if (!end || *end > *first_begin) {
          broken = true;
          note("step " + name + " began (log) before " + dep + " ended");
        }
      }
    }
    if (broken)
      ++v.order_violations;
  }

  // 3. The end: completed, every step completed, the reference outputs, and
  //    every run step's effect in the log.
  if (obs.final_doc.value("status", "") != "completed") {
    ++v.incomplete;
    note("the execution ended " + obs.final_doc.value("status", std::string{"unknown"}));
  } else if (obs.final_doc.value("outputs", json()) != obs.reference_outputs) {
    ++v.incomplete;
    note("outputs " + obs.final_doc.value("outputs", json()).dump() + " differ from "
         + obs.reference_outputs.dump());
  }
  for (auto& kv : obs.needs) {
    auto f = final_steps.find(kv.first);
    if (f == final_steps.end() || f->second.value("status", "") != "completed") {
      ++v.incomplete;
      note("step " + kv.first + " did not end completed");
    }
  }
  for (auto& name : obs.run_steps)
    if (!line_of(obs.log, false, name, true)) {
      ++v.incomplete;
      note("step " + name + " never wrote its end line");
    }

  // 4. The event log's own invariants.
  for (auto& broken : event_log_violations(obs.events)) {
    ++v.log_violations;
    note("event log: " + broken);
  }
  return v;
}

} // namespace canopy::core::test
