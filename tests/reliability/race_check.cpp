#include "tests/reliability/race_check.hpp"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "tests/integration/event_log_check.hpp"
#include "tests/integration/helpers.hpp"

namespace canopy::core::test {

using json = nlohmann::json;

namespace {

/// The longest an HTTP answer may take.
constexpr int64_t answer_bound_ms = 30'000;

std::string text_of(const json& e, const char* key) {
  auto i = e.find(key);
  return i != e.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

uint64_t seq_of(const json& e) {
  auto i = e.find("seq");
  return i != e.end() && i->is_number_integer() && i->get<int64_t>() >= 0 ? i->get<uint64_t>()
                                                                          : 0;
}

std::string stop_id_of(const json& e) {
  auto d = e.find("data");
  return d != e.end() && d->is_object() ? text_of(*d, "stop_id") : std::string{};
}

/// The event's time in ms since the epoch; nullopt when unreadable.
std::optional<int64_t> time_of(const json& e) {
  try {
    return ms_of(e.at("time"));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string describe(const json& e) {
  auto out = "seq " + std::to_string(seq_of(e)) + " " + text_of(e, "type");
  if (auto step = text_of(e, "step"); !step.empty())
    out += " " + step;
  if (auto reason = text_of(e, "reason"); !reason.empty())
    out += " (" + reason + ")";
  return out;
}

int64_t end_of(const process_span& p) {
  return p.ended_ms == 0 ? std::numeric_limits<int64_t>::max() : p.ended_ms;
}

/// True when `p` was surely alive at `t`: started, and neither signalled by
/// the harness nor exited yet, with the slacks of race_check.hpp.
bool surely_alive(const process_span& p, int64_t t) {
  if (t < p.started_ms + lifetime_slack_ms)
    return false;
  if (p.signalled_ms != 0 && t > p.signalled_ms - lifetime_slack_ms)
    return false;
  return p.ended_ms == 0 || t < p.ended_ms - own_exit_slack_ms;
}

std::string life_of(const process_span& p) {
  return p.role + " pid " + std::to_string(p.pid) + " (alive " + std::to_string(p.started_ms)
         + ".." + (p.ended_ms == 0 ? std::string{"end"} : std::to_string(p.ended_ms)) + ")";
}

/// Collects violations of one kind.
struct sink {
  std::vector<race_violation>& out;
  void operator()(const char* kind, std::string text) { out.push_back({kind, std::move(text)}); }
};

// -- reads ------------------------------------------------------------------------------------

void check_reads(const race_observations& obs, sink& add) {
  for (auto& r : obs.reads) {
    // The final log from the first event after `after`.
    auto from = std::find_if(obs.events.begin(), obs.events.end(),
                             [&](const json& e) { return seq_of(e) > r.after; });
    auto left = static_cast<size_t>(obs.events.end() - from);
    for (size_t i = 0; i < r.events.size(); ++i) {
      if (i >= left) {
        add("reads", r.source + ": event #" + std::to_string(i) + " (" + describe(r.events[i])
                       + ") is past the end of the final log");
        break;
      }
      auto& want = *(from + static_cast<long>(i));
      if (seq_of(r.events[i]) != seq_of(want)
          || text_of(r.events[i], "type") != text_of(want, "type")) {
        add("reads", r.source + ": event #" + std::to_string(i) + " is " + describe(r.events[i])
                       + " where the final log has " + describe(want));
        break;
      }
    }
  }
}

// -- side effects -----------------------------------------------------------------------------

void check_reruns(const race_observations& obs, sink& add) {
  std::map<std::string, int64_t> completed; // step → its first completion
  for (auto& e : obs.events)
    if (text_of(e, "type") == "step.completed")
      if (auto t = time_of(e))
        completed.emplace(text_of(e, "step"), *t);
  for (auto& [step, lines] : obs.side_lines) {
    auto c = completed.find(step);
    if (c == completed.end())
      continue;
    for (auto t : lines)
      if (t > c->second)
        add("re-run", "step " + step + " wrote its side-file line at " + std::to_string(t)
                        + ", after it was recorded completed at " + std::to_string(c->second));
  }
}

// -- live owners ------------------------------------------------------------------------------

void check_live_owners(const race_observations& obs, sink& add) {
  for (size_t i = 0; i < obs.events.size(); ++i) {
    auto& e = obs.events[i];
    auto type = text_of(e, "type");
    if (text_of(e, "reason") != "interrupted"
        || (type != "execution.stopped" && type != "step.pending"))
      continue;
    auto t = time_of(e);
    auto id = text_of(e, "execution_id");
    // The execution's latest start or resume before it.
    const json* run = nullptr;
    for (size_t j = i; j-- > 0;) {
      auto& r = obs.events[j];
      auto rt = text_of(r, "type");
      if (text_of(r, "execution_id") == id
          && (rt == "execution.started" || rt == "execution.resumed")) {
        run = &r;
        break;
      }
    }
    auto tr = run ? time_of(*run) : std::nullopt;
    if (!t || !tr)
      continue;
    // Who may have written it: every process claimed by then and alive then.
    std::set<size_t> writers;
    for (auto& c : obs.claims) {
      if (c.process >= obs.processes.size())
        continue;
      auto& p = obs.processes[c.process];
      if (c.asked_ms <= *tr + lifetime_slack_ms && p.started_ms <= *tr + lifetime_slack_ms
          && end_of(p) >= *tr - lifetime_slack_ms)
        writers.insert(c.process);
    }
    if (writers.empty())
      continue;
    bool all_alive = std::all_of(writers.begin(), writers.end(),
                                 [&](size_t w) { return surely_alive(obs.processes[w], *t); });
    if (!all_alive)
      continue;
    std::string who;
    for (auto w : writers)
      who += (who.empty() ? "" : ", ") + life_of(obs.processes[w]);
    add("live owner interrupted",
        describe(e) + " of " + id + " at " + std::to_string(*t) + ", while the process that "
          + (text_of(*run, "type") == "execution.resumed" ? "resumed" : "started") + " it ("
          + describe(*run) + " at " + std::to_string(*tr) + ") was alive: " + who);
  }
}

// -- the end ----------------------------------------------------------------------------------

/// Reports every execution of the tree `root` (the root, then its children
/// at any depth) and every step of it that did not complete.
void check_completed(const json& root, sink& add) {
  test::for_each_execution(root, [&](const json& doc) {
    const std::string where = &doc == &root ? "root" : "child";
    if (!doc.is_object()) {
      add("not completed", where + ": no execution document");
      return;
    }
    auto id = text_of(doc, "id");
    auto reason = text_of(doc, "reason");
    if (text_of(doc, "status") != "completed")
      add("not completed", where + " " + id + " ended " + text_of(doc, "status")
                             + (reason.empty() ? "" : " (" + reason + ")"));
    if (auto s = doc.find("steps"); s != doc.end() && s->is_object())
      for (auto& kv : s->items())
        if (text_of(kv.value(), "status") != "completed")
          add("not completed", "step " + kv.key() + " of " + id + " ended "
                                 + text_of(kv.value(), "status"));
  });
}

void check_stops(const race_observations& obs, sink& add) {
  std::set<std::string> handled;
  for (auto& e : obs.events)
    if (text_of(e, "type") == "stop.handled")
      handled.insert(stop_id_of(e));
  for (auto& e : obs.events)
    if (text_of(e, "type") == "stop.requested" && handled.count(stop_id_of(e)) == 0)
      add("stop not handled", describe(e) + " of " + text_of(e, "execution_id") + " (stop "
                                + stop_id_of(e) + ") has no stop.handled");
}

void check_http(const race_observations& obs, sink& add) {
  for (auto& h : obs.http) {
    auto at = " (sent at " + std::to_string(h.started_ms) + ")";
    if (h.ms > answer_bound_ms)
      add("http", h.what + " took " + std::to_string(h.ms) + " ms" + at);
    if (h.status >= 500 && h.status != 503)
      add("http", h.what + " answered " + std::to_string(h.status) + at);
    if (h.status == 0 && !h.server_signalled && h.server_running)
      add("http", h.what + " got no answer from a running server: " + h.error + at);
    if (h.status != 0 && !h.error.empty())
      add("http", h.what + ": " + h.error + at);
  }
}

void check_processes(const race_observations& obs, sink& add) {
  for (auto& p : obs.processes) {
    if (p.ended_ms == 0)
      continue;
    bool by_signal = p.exit_code > 128;
    if (by_signal && p.signalled == 0)
      add("crash", life_of(p) + " died of signal " + std::to_string(p.exit_code - 128) + " ("
                     + strsignal(p.exit_code - 128) + ") the harness did not send; stderr: "
                     + p.stderr_tail);
    if (p.role.rfind("serve", 0) == 0 && p.signalled == 0)
      add("crash", life_of(p) + " exited " + std::to_string(p.exit_code)
                     + " on its own; stderr: " + p.stderr_tail);
  }
}

} // namespace

const std::vector<std::string>& race_violation_kinds() {
  static const std::vector<std::string> kinds = {
    "event log", "reads",   "re-run", "live owner interrupted", "not completed",
    "stop not handled", "http", "crash", "orphans", "failures"};
  return kinds;
}

std::vector<race_violation> judge_race(const race_observations& obs) {
  std::vector<race_violation> out;
  sink add{out};
  for (auto& v : event_log_violations(obs.events))
    add("event log", v);
  check_reads(obs, add);
  check_reruns(obs, add);
  check_live_owners(obs, add);
  check_completed(obs.final_doc, add);
  check_stops(obs, add);
  check_http(obs, add);
  check_processes(obs, add);
  for (auto& o : obs.orphans)
    add("orphans", "left running at the end, killed: " + o);
  for (auto& f : obs.failures)
    add("failures", f);
  return out;
}

} // namespace canopy::core::test
