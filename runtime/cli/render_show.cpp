// `canopy show` and `canopy ls` for people: the execution tree
// with a step per line in graph order, when it started and how long it took,
// and the last stderr lines under a failed step; the list with each
// execution's age and duration.
//
// Times: STARTED is the local time of day (`HH:MM:SS`) when it is today,
// else the local date (`YYYY-MM-DD`); durations are `340ms`, `1.2s`, `12s`,
// `3m04s`, `2h05m` or `3d04h`; a step or execution still running shows how
// long it has run so far.

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>

#include "persistence/duration.hpp"
#include "runtime/client/client.hpp"
#include "runtime/cli/render.hpp"
#include "runtime/cli/step_logs.hpp"

namespace canopy::core {

namespace {

// -- human times ---------------------------------------------------------------------

/// `340ms`, `1.2s`, `12s`, `3m04s`, `2h05m`, `3d04h` (negative: 0).
std::string human_duration(int64_t ms) {
  char buf[32];
  if (ms < 0)
    ms = 0;
  if (ms < 1000)
    std::snprintf(buf, sizeof(buf), "%lldms", static_cast<long long>(ms));
  else if (ms < 10'000)
    std::snprintf(buf, sizeof(buf), "%lld.%llds", static_cast<long long>(ms / 1000),
                  static_cast<long long>(ms % 1000 / 100));
  else if (ms < 60'000)
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(ms / 1000));
  else if (ms < 3'600'000)
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms % 60'000 / 1000));
  else if (ms < 86'400'000)
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(ms / 3'600'000),
                  static_cast<long long>(ms % 3'600'000 / 60'000));
  else
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", static_cast<long long>(ms / 86'400'000),
                  static_cast<long long>(ms % 86'400'000 / 3'600'000));
  return buf;
}

/// `5s ago`, `3m ago`, `2h ago`, `4d ago`: the largest whole unit.
std::string human_age(int64_t ms) {
  if (ms < 0)
    ms = 0;
  auto s = ms / 1000;
  auto text = s < 60      ? std::to_string(s) + "s"
              : s < 3600  ? std::to_string(s / 60) + "m"
              : s < 86400 ? std::to_string(s / 3600) + "h"
                          : std::to_string(s / 86400) + "d";
  return text + " ago";
}

/// The local time of day `HH:MM:SS` when `ms` is on today's local date,
/// else the local date `YYYY-MM-DD`.
std::string human_start(int64_t ms, int64_t now) {
  auto local = [](int64_t t) {
    auto secs = static_cast<time_t>(t / 1000);
    std::tm tm{};
    localtime_r(&secs, &tm);
    return tm;
  };
  auto at = local(ms);
  auto today = local(now);
  char buf[32];
  if (at.tm_year == today.tm_year && at.tm_yday == today.tm_yday)
    std::strftime(buf, sizeof(buf), "%H:%M:%S", &at);
  else
    std::strftime(buf, sizeof(buf), "%Y-%m-%d", &at);
  return buf;
}

/// How long something that started at `start` and ended at `end` (0: not
/// yet) took, or has taken by `now` while `running`; "-" without a start.
std::string span(int64_t start, int64_t end, bool running, int64_t now) {
  if (start == 0)
    return "-";
  if (end >= start)
    return human_duration(end - start);
  return running ? human_duration(now - start) : "-";
}

// -- text -----------------------------------------------------------------------------

/// Columns `s` takes on a terminal: its UTF-8 code points (the tree's box
/// characters are one column each).
size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

/// `s` padded with spaces to `width` columns.
std::string pad(const std::string& s, size_t width) {
  auto n = columns(s);
  return n >= width ? s : s + std::string(width - n, ' ');
}

/// `s` cut to at most `n` code points, with `…` when cut.
std::string cut(const std::string& s, size_t n) {
  if (columns(s) <= n)
    return s;
  size_t kept = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && kept++ == n - 1)
      break;
  }
  return s.substr(0, i) + "…";
}

std::string rtrim(std::string s) {
  while (!s.empty() && s.back() == ' ')
    s.pop_back();
  return s;
}

std::string text_of(const nlohmann::json& doc, const char* key) {
  auto i = doc.find(key);
  return i != doc.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

// -- show -----------------------------------------------------------------------------


/// One line of `show`: a step, or text under one (its stderr).
struct show_row {
  std::string tree; ///< the guides and the step name, e.g. `│  ├─ draft`
  std::string status, started, duration, extra;
  bool note = false; ///< a line of text under a step: `tree` is all of it
};

/// A spend as `show` prints it: `0.005`.
std::string spend_text(double spend) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", spend);
  return buf;
}

/// `  · 50 tokens · spent 0.005` for a model call's result with a usage
/// (and a price), else "".
std::string model_usage(const nlohmann::json& step) {
  auto r = step.find("result");
  if (r == step.end() || !r->is_object())
    return {};
  auto u = r->find("usage");
  if (u == r->end() || !u->is_object())
    return {};
  auto tokens = u->value("prompt_tokens", int64_t{0}) + u->value("completion_tokens", int64_t{0});
  std::string out = "  · " + std::to_string(tokens) + " tokens";
  if (auto spend = r->find("spend"); spend != r->end() && spend->is_number())
    out += " · spent " + spend_text(spend->get<double>());
  return out;
}

/// A repeating step shows at most this many iterations (the newest).
constexpr size_t shown_iterations = 10;

/// The iteration number of child document `c` (0: not an iteration).
int iteration_of(const nlohmann::json& c) {
  auto i = c.find("iteration");
  return i != c.end() && i->is_number_integer() ? i->get<int>() : 0;
}

void collect_rows(const nlohmann::json& doc, const std::string& indent, int64_t now,
                  std::vector<show_row>& out);

/// The rows of the iterations `kids` of repeating step `name`, each with
/// its steps below it: `review#2  completed ...`.
void collect_iterations(const std::string& name, const std::vector<const nlohmann::json*>& kids,
                        const std::string& indent, int64_t now, std::vector<show_row>& out) {
  size_t first = kids.size() > shown_iterations ? kids.size() - shown_iterations : 0;
  if (first > 0) {
    show_row note;
    note.note = true;
    note.tree = indent + "│  (" + std::to_string(first) + " earlier iteration"
                + (first == 1 ? "" : "s") + ")";
    out.push_back(std::move(note));
  }
  for (size_t n = first; n < kids.size(); ++n) {
    auto& c = *kids[n];
    bool last = n + 1 == kids.size();
    show_row row;
    row.tree = indent + (last ? "└─ " : "├─ ") + name + "#" + std::to_string(iteration_of(c));
    row.status = text_of(c, "status");
    auto started = ms_of_rfc3339(c.value("started_at", nlohmann::json()));
    auto ended = ms_of_rfc3339(c.value("ended_at", nlohmann::json()));
    row.started = started == 0 ? "-" : human_start(started, now);
    row.duration = span(started, ended, row.status == "running" || row.status == "queued", now);
    row.extra = "  → " + text_of(c, "id");
    out.push_back(std::move(row));
    collect_rows(c, indent + (last ? "   " : "│  "), now, out);
  }
}

void collect_rows(const nlohmann::json& doc, const std::string& indent, int64_t now,
                  std::vector<show_row>& out) {
  // Each step's children, oldest first: one, or a repeating step's iterations.
  std::map<std::string, std::vector<const nlohmann::json*>> kids_by_step;
  if (auto kids = doc.find("children"); kids != doc.end() && kids->is_array())
    for (auto& c : *kids)
      kids_by_step[text_of(c, "parent_step")].push_back(&c);
  for (auto& kv : kids_by_step)
    std::stable_sort(kv.second.begin(), kv.second.end(), [](auto* a, auto* b) {
      return iteration_of(*a) < iteration_of(*b);
    });
  auto steps = doc.find("steps");
  if (steps == doc.end() || !steps->is_object())
    return;
  auto order = steps_in_order(*steps);
  for (size_t n = 0; n < order.size(); ++n) {
    auto& name = order[n];
    bool last = n + 1 == order.size();
    auto& s = (*steps)[name];
    show_row row;
    row.tree = indent + (last ? "└─ " : "├─ ") + name;
    row.status = text_of(s, "status");
    auto started = ms_of_rfc3339(s.value("started_at", nlohmann::json()));
    auto ended = ms_of_rfc3339(s.value("ended_at", nlohmann::json()));
    row.started = started == 0 ? "-" : human_start(started, now);
    row.duration = span(started, ended,
                        row.status == "running" || row.status == "queued"
                          || row.status == "waiting",
                        now);
    if (s.value("attempt", 0) > 1)
      row.extra += "  attempt " + std::to_string(s.value("attempt", 0));
    if (auto reason = text_of(s, "reason"); !reason.empty())
      row.extra += "  (" + reason + ")";
    if (row.status == "waiting") {
      // approve  waiting · approval · 23h59m left
      row.extra += "  · " + text_of(s, "signal") + " · ";
      row.extra += time_left(ms_of_rfc3339(s.value("deadline", nlohmann::json())), now);
    }
    if (auto error = text_of(s, "error"); !error.empty())
      row.extra += "  error: " + error;
    row.extra += model_usage(s);
    auto c = kids_by_step.find(name);
    bool looped = c != kids_by_step.end() && iteration_of(*c->second.back()) > 0;
    if (looped) {
      // An llm step's tool-calling loop counts turns.
      row.extra += (text_of(s, "kind") == "llm" ? "  turn " : "  iteration ")
                   + std::to_string(iteration_of(*c->second.back()));
    } else if (c != kids_by_step.end()) {
      auto& child = *c->second.back();
      row.extra += "  → " + text_of(child, "graph") + " " + text_of(child, "id") + " "
                   + text_of(child, "status");
    }
    out.push_back(std::move(row));
    auto below = indent + (last ? "   " : "│  ");
    if (text_of(s, "status") == "waiting") {
      show_row note;
      note.note = true;
      auto prompt = text_of(s, "prompt");
      note.tree = below + "  " + (prompt.empty() ? std::string{} : cut(prompt, 200) + "  ")
                  + "(canopy signal " + text_of(doc, "id") + " " + text_of(s, "signal")
                  + " --value JSON)";
      out.push_back(std::move(note));
    }
    if (text_of(s, "status") == "failed")
      for (auto& line : stderr_tail(s, failed_step_stderr_lines)) {
        show_row note;
        note.note = true;
        note.tree = below + "  | " + cut(line, 200);
        out.push_back(std::move(note));
      }
    if (looped)
      collect_iterations(name, c->second, below, now, out);
    else if (c != kids_by_step.end())
      collect_rows(*c->second.back(), below, now, out);
  }
}

} // namespace

std::string time_left(int64_t deadline, int64_t now) {
  if (deadline == 0)
    return "no deadline";
  return deadline <= now ? std::string{"deadline passed"} : human_duration(deadline - now) + " left";
}

std::string render_document(const nlohmann::json& doc, int64_t now) {
  std::string out = text_of(doc, "graph") + " " + text_of(doc, "id") + "  "
                    + text_of(doc, "status");
  if (auto reason = text_of(doc, "reason"); !reason.empty())
    out += " (" + reason + ")";
  out += "\n";
  if (auto error = text_of(doc, "error"); !error.empty())
    out += "error: " + error + "\n";
  std::vector<show_row> rows;
  collect_rows(doc, "", now, rows);
  if (!rows.empty()) {
    size_t width = 4; // "STEP"
    for (auto& r : rows)
      if (!r.note)
        width = std::max(width, columns(r.tree));
    out += rtrim(pad("STEP", width) + "  " + pad("STATUS", 10) + "  " + pad("STARTED", 10)
                 + "  DURATION")
           + "\n";
    for (auto& r : rows)
      out += r.note ? r.tree + "\n"
                    : rtrim(pad(r.tree, width) + "  " + pad(r.status, 10) + "  "
                            + pad(r.started, 10) + "  " + pad(r.duration, 8) + r.extra)
                        + "\n";
  }
  if (auto model = doc.find("model"); model != doc.end() && model->is_object()) {
    // model: 4 calls · 702 tokens (600 in, 102 out) · spent 0.0702
    auto calls = model->value("calls", int64_t{0});
    out += "model: " + std::to_string(calls) + (calls == 1 ? " call" : " calls") + " · "
           + std::to_string(model->value("tokens", int64_t{0})) + " tokens ("
           + std::to_string(model->value("prompt_tokens", int64_t{0})) + " in, "
           + std::to_string(model->value("completion_tokens", int64_t{0})) + " out)";
    if (auto spend = model->find("spend"); spend != model->end() && spend->is_number())
      out += " · spent " + spend_text(spend->get<double>());
    out += "\n";
  }
  if (doc.contains("outputs") && !doc["outputs"].is_null())
    out += "outputs: " + doc["outputs"].dump(2) + "\n";
  return out;
}

// -- ls ----------------------------------------------------------------------------------

std::string render_list(const std::vector<execution_record>& rows, int64_t now) {
  auto line = [](const std::string& id, const std::string& graph, const std::string& status,
                 const std::string& reason, const std::string& age, const std::string& duration) {
    return rtrim(pad(id, 26) + "  " + pad(cut(graph, 20), 20) + "  " + pad(status, 10) + "  "
                 + pad(reason, 16) + "  " + pad(age, 8) + "  " + duration)
           + "\n";
  };
  std::string out = line("ID", "GRAPH", "STATUS", "REASON", "AGE", "DURATION");
  for (auto& r : rows) {
    auto from = r.started_at != 0 ? r.started_at : r.created_at;
    out += line(r.id, r.graph, to_string(r.status),
                r.reason == core::step_reason::none ? "-" : to_string(r.reason),
                r.created_at == 0 ? std::string{"-"} : human_age(now - r.created_at),
                span(from, r.ended_at, !is_terminal(r.status), now));
  }
  return out;
}

// -- order of steps -----------------------------------------------------------------------

std::vector<std::string> steps_in_order(const nlohmann::json& steps) {
  std::vector<std::string> out;
  if (!steps.is_object())
    return out;
  std::map<std::string, size_t> missing;
  std::map<std::string, std::vector<std::string>> dependents;
  for (auto& kv : steps.items()) {
    missing[kv.key()] = 0;
    auto needs = kv.value().is_object() ? kv.value().find("needs") : kv.value().end();
    if (needs != kv.value().end() && needs->is_array())
      for (auto& n : *needs)
        if (n.is_string() && n.get<std::string>() != kv.key()
            && steps.contains(n.get<std::string>())) {
          ++missing[kv.key()];
          dependents[n.get<std::string>()].push_back(kv.key());
        }
  }
  std::set<std::string> ready, placed;
  for (auto& kv : missing)
    if (kv.second == 0)
      ready.insert(kv.first);
  while (!ready.empty()) {
    auto id = *ready.begin();
    ready.erase(ready.begin());
    out.push_back(id);
    placed.insert(id);
    for (auto& d : dependents[id])
      if (--missing[d] == 0)
        ready.insert(d);
  }
  for (auto& kv : missing)
    if (!placed.count(kv.first))
      out.push_back(kv.first);
  return out;
}

} // namespace canopy::core
