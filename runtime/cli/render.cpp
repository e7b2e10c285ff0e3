#include "runtime/cli/render.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "persistence/duration.hpp"
#include "runtime/client/client.hpp"

namespace canopy::core {

namespace {

std::string clock_of(int64_t ms) {
  auto t = to_rfc3339(ms);
  return t.substr(11, 12); // HH:MM:SS.mmm
}

/// The string at `key` of object `data`, else "".
std::string text_at(const nlohmann::json& data, const char* key) {
  auto i = data.find(key);
  return i != data.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

/// `SIGTERM (SIGKILL in 5s)`, or `SIGKILL`: a `step.signalled` event's data.
std::string signal_text(const nlohmann::json& data) {
  auto out = text_at(data, "signal");
  auto next = text_at(data, "next");
  auto in = data.find("next_in_ms");
  if (!next.empty() && in != data.end() && in->is_number_integer())
    out += " (" + next + " in " + to_duration_string(millis{in->get<int64_t>()}) + ")";
  return out;
}

std::string shorten(std::string s, size_t n) {
  if (s.size() > n)
    s = s.substr(0, n - 1) + "…";
  return s;
}

} // namespace

std::string output_text(const json& data) {
  if (!data.is_object())
    return {};
  if (data.value("stream", std::string{}) != "model")
    return data.value("line", std::string{});
  // A piece of a model's answer: on one line.
  auto text = data.value("text", std::string{});
  for (auto& c : text)
    if (c == '\n' || c == '\r')
      c = ' ';
  return text;
}

std::string status_text(const execution_record& rec) {
  std::string out = to_string(rec.status);
  if (rec.reason != step_reason::none)
    out += std::string{" ("} + to_string(rec.reason) + ")";
  return out;
}

std::string event_line(const event_record& e, const std::string& label) {
  std::string type = to_string(e.type);
  std::string status = to_string(e.status);
  std::string out = clock_of(e.time) + " " + type;
  out.append(type.size() < 20 ? 20 - type.size() : 1, ' ');
  out += label;
  if (!e.step.empty())
    out += "/" + e.step;
  if (e.type == event_type::step_output && e.data.is_object())
    out += " | " + output_text(e.data);
  else if (e.type == event_type::step_signalled && e.data.is_object())
    out += " " + signal_text(e.data);
  else if (!status.empty())
    out += " " + status;
  if (e.reason != step_reason::none)
    out += std::string{" ("} + to_string(e.reason) + ")";
  if (e.data.is_object() && e.data.contains("error") && e.data["error"].is_string())
    out += ": " + e.data["error"].get<std::string>();
  return out;
}

tree_source store_source(const store& db) {
  tree_source out;
  out.execution = [&db](const std::string& id) -> std::optional<execution_record> {
    auto rec = db.execution(id);
    if (!rec)
      return std::nullopt;
    return std::move(*rec);
  };
  out.graph_document = [&db](const std::string& id) -> std::optional<nlohmann::json> {
    auto g = db.graph(id);
    if (!g)
      return std::nullopt;
    return std::move(g->document);
  };
  return out;
}

tree_view::tree_view(tree_source source, std::string root_id, bool colour)
  : source_(std::move(source)), root_id_(std::move(root_id)), colour_(colour) {
}

tree_view::tree_view(const store& db, std::string root_id, bool colour)
  : tree_view(store_source(db), std::move(root_id), colour) {
}

std::vector<tree_view::lookup> tree_view::look_up(const std::string& execution_id) const {
  std::vector<lookup> out;
  auto met = [&](const std::string& id) {
    return execs_.count(id) > 0
           || std::any_of(out.begin(), out.end(), [&](const lookup& l) { return l.id == id; });
  };
  for (auto id = execution_id; !id.empty() && !met(id);) {
    lookup l{id, source_.execution(id), source_.graph_document(id)};
    id = l.record ? l.record->parent_id : std::string{};
    out.push_back(std::move(l));
  }
  return out;
}

void tree_view::learn(std::vector<lookup> found) {
  for (auto l = found.rbegin(); l != found.rend(); ++l) {
    if (execs_.count(l->id) > 0)
      continue;
    auto& v = execs_[l->id];
    if (l->record) {
      v.graph = l->record->graph;
      v.status = to_string(l->record->status);
      v.parent_id = l->record->parent_id;
      v.parent_step = l->record->parent_step;
      v.label = child_label(*l->record);
      if (!v.parent_id.empty())
        get(v.parent_id).child_of_step[v.parent_step] = l->id;
    }
    if (l->graph_document && l->graph_document->contains("steps"))
      for (auto& step : steps_in_order((*l->graph_document)["steps"])) {
        v.order.push_back(step);
        v.steps[step] = "pending";
      }
  }
}

tree_view::exec_view& tree_view::get(const std::string& id) {
  auto i = execs_.find(id);
  if (i != execs_.end())
    return i->second;
  learn(look_up(id));
  return execs_[id];
}

std::string tree_view::label(const std::string& execution_id) {
  get(execution_id);
  return label_of(execution_id);
}

std::string tree_view::label_of(const std::string& id) const {
  auto i = execs_.find(id);
  if (i == execs_.end())
    return id.substr(0, 10);
  auto& v = i->second;
  // A child is named by where it hangs: `team/researcher`, `team/review#2`.
  if (!v.parent_id.empty() && id != root_id_)
    return label_of(v.parent_id) + "/" + v.label;
  return v.graph.empty() ? id.substr(0, 10) : v.graph;
}

void tree_view::apply(const event_record& e) {
  auto& v = get(e.execution_id);
  auto status = std::get_if<step_status>(&e.status);
  if (family_of(e.type) == event_family::execution) {
    if (auto s = std::get_if<execution_status>(&e.status))
      v.status = to_string(*s);
    v.reason = to_string(e.reason);
    return;
  }
  if (e.step.empty())
    return;
  if (e.type == event_type::step_signalled) {
    // The escalation of its running attempt: shown with it, no status.
    if (!v.steps.count(e.step) || !e.data.is_object())
      return;
    auto& sig = v.signals[e.step];
    sig.signal = text_at(e.data, "signal");
    sig.next = text_at(e.data, "next");
    auto in = e.data.find("next_in_ms");
    sig.next_at = !sig.next.empty() && in != e.data.end() && in->is_number_integer()
                    ? e.time + in->get<int64_t>()
                    : 0;
    return;
  }
  if (!v.steps.count(e.step)) {
    // A step the graph document did not list (e.g. a plan's): it prints,
    // so it runs; a status event below says more.
    v.order.push_back(e.step);
    v.steps[e.step] = to_string(e.type == event_type::step_output ? step_status::running
                                                                  : step_status::pending);
  }
  if (e.type == event_type::step_output) {
    if (!e.data.is_object())
      return;
    auto line = output_text(e.data);
    v.last_line[e.step] = line;
    if (e.data.value("stream", std::string{}) == "stderr") {
      auto& tail = v.stderr_tail[e.step];
      tail.push_back(std::move(line));
      if (tail.size() > stderr_lines)
        tail.pop_front();
    }
    return;
  }
  if (e.type == event_type::step_started)
    v.stderr_tail.erase(e.step); // a new attempt: the lines of the last one go
  if (e.type == event_type::step_started || (status && *status != step_status::running))
    v.signals.erase(e.step); // its attempt ended (or a new one began)
  if (e.type == event_type::step_waiting && e.data.is_object())
    v.waits[e.step] = {text_at(e.data, "signal"),
                       ms_of_rfc3339(e.data.value("deadline", nlohmann::json()))};
  else if (status)
    v.waits.erase(e.step);
  if (status)
    v.steps[e.step] = to_string(*status);
}

std::string tree_view::signal_view::text(int64_t now) const {
  auto out = signal + " sent";
  if (next_at != 0) {
    auto left = std::max<int64_t>(next_at - now, 0);
    out += " · " + next + " in " + std::to_string((left + 999) / 1000) + "s";
  }
  return out;
}

std::optional<int64_t> tree_view::next_change(int64_t now) const {
  std::optional<int64_t> first;
  for (auto& kv : execs_)
    for (auto& w : kv.second.waits) {
      // A wait's countdown: the next whole second (enough for `23h59m`).
      auto left = w.second.second - now;
      if (w.second.second == 0 || left <= 0 || kv.second.steps.at(w.first) != "waiting")
        continue;
      auto at = now + (left - 1) % 1000 + 1;
      if (!first || at < *first)
        first = at;
    }
  for (auto& kv : execs_)
    for (auto& sig : kv.second.signals) {
      auto left = sig.second.next_at - now;
      if (sig.second.next_at == 0 || left <= 0)
        continue; // no countdown, or it shows 0s from now on
      // The shown seconds round up: they change when `left` reaches the
      // next lower multiple of a second.
      auto at = now + (left - 1) % 1000 + 1;
      if (!first || at < *first)
        first = at;
    }
  return first;
}

void tree_view::notice(std::string text) {
  notice_ = std::move(text);
}

void tree_view::add_steps(const std::string& id, bool stopping, int64_t now,
                          std::vector<frame_step>& out) const {
  auto i = execs_.find(id);
  if (i == execs_.end())
    return;
  auto& v = i->second;
  stopping = stopping || v.status == "stopping";
  // A step still running in a stopping tree is being stopped.
  auto shown = [&](const std::string& status) {
    return stopping && status == "running" ? std::string{"stopping"} : status;
  };
  for (auto& step : v.order) {
    frame_step s;
    s.name = printable(step);
    s.status = shown(v.steps.at(step));
    if (auto ll = v.last_line.find(step); ll != v.last_line.end())
      s.last_line = printable(ll->second);
    if (auto sig = v.signals.find(step); sig != v.signals.end())
      s.signal = printable(sig->second.text(now));
    if (auto w = v.waits.find(step); w != v.waits.end() && s.status == "waiting")
      s.signal = printable(w->second.first) + " · " + time_left(w->second.second, now);
    if (auto t = v.stderr_tail.find(step); t != v.stderr_tail.end())
      for (auto& l : t->second)
        s.stderr_tail.push_back(printable(l));
    if (auto child = v.child_of_step.find(step); child != v.child_of_step.end()) {
      if (auto c = execs_.find(child->second); c != execs_.end()) {
        s.child_graph = printable(c->second.graph);
        s.child_status = shown(c->second.status);
      }
      add_steps(child->second, stopping, now, s.children);
    }
    out.push_back(std::move(s));
  }
}

frame_model tree_view::frame(int64_t now) const {
  frame_model m;
  auto i = execs_.find(root_id_);
  if (i == execs_.end())
    return m;
  auto& v = i->second;
  m.graph = printable(v.graph);
  m.id = root_id_;
  m.status = v.status;
  m.reason = v.reason;
  if (!notice_.empty())
    m.notices.push_back(notice_);
  add_steps(root_id_, false, now, m.steps);
  return m;
}

std::vector<std::string> tree_view::render(screen_size size, int64_t now) const {
  if (execs_.find(root_id_) == execs_.end())
    return {};
  return layout_frame(frame(now), size, colour_);
}

void tree_view::add_failures(const std::string& id, std::vector<failure>& out) const {
  auto i = execs_.find(id);
  if (i == execs_.end())
    return;
  auto& v = i->second;
  for (auto& step : v.order) {
    auto t = v.stderr_tail.find(step);
    if (v.steps.at(step) == "failed" && t != v.stderr_tail.end() && !t->second.empty()) {
      failure f{printable(label_of(id) + "/" + step), {}};
      for (auto& l : t->second)
        f.stderr_tail.push_back(printable(l));
      out.push_back(std::move(f));
    }
    if (auto child = v.child_of_step.find(step); child != v.child_of_step.end())
      add_failures(child->second, out);
  }
}

std::vector<tree_view::failure> tree_view::failures() const {
  std::vector<failure> out;
  add_failures(root_id_, out);
  return out;
}

// -- agents -----------------------------------------------------------------------------

std::string content_text(const nlohmann::json& v) {
  if (v.is_string())
    return v.get<std::string>();
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string render_agents(const nlohmann::json& docs) {
  auto text = [](const nlohmann::json& doc, const char* key) {
    if (!doc.is_object())
      return std::string{"-"};
    auto i = doc.find(key);
    return i != doc.end() && i->is_string() && !i->get<std::string>().empty()
             ? i->get<std::string>()
             : std::string{"-"};
  };
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%-24s  %-16s  %-16s  %s\n", "NAME", "ON_BUSY", "NODE",
                "GRAPH");
  out += buf;
  if (!docs.is_array())
    return out;
  for (auto& d : docs) {
    std::snprintf(buf, sizeof(buf), "%-24s  %-16s  %-16s  %s\n", text(d, "name").c_str(),
                  text(d, "on_busy").c_str(), text(d, "node").c_str(),
                  shorten(text(d, "graph"), 40).c_str());
    out += buf;
  }
  return out;
}

std::string render_history(const nlohmann::json& docs) {
  std::string out;
  if (!docs.is_array())
    return out;
  for (auto& d : docs) {
    if (!d.is_object())
      continue;
    auto role = d.value("role", nlohmann::json());
    // One line per entry: a reply's trailing newlines (a step's stdout) go.
    auto text = content_text(d.value("content", nlohmann::json()));
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    out += (role.is_string() ? role.get<std::string>() : std::string{"?"}) + ": " + text + "\n";
  }
  return out;
}

// -- cluster ------------------------------------------------------------------------------

std::string render_nodes(const nlohmann::json& docs) {
  auto number = [](const nlohmann::json& doc, const char* key) {
    auto i = doc.find(key);
    return i != doc.end() && i->is_number_unsigned() ? std::to_string(i->get<uint64_t>())
           : i != doc.end() && i->is_number_integer() ? std::to_string(i->get<int64_t>())
                                                      : std::string{"-"};
  };
  std::string out;
  char buf[1024];
  std::snprintf(buf, sizeof(buf), "%-24s  %5s  %7s  %-40s  %s\n", "NAME", "SLOTS", "RUNNING",
                "TOOLS", "SUPERVISOR");
  out += buf;
  if (!docs.is_array())
    return out;
  for (auto& d : docs) {
    if (!d.is_object())
      continue;
    auto name = d.value("name", nlohmann::json());
    std::string tools;
    if (auto i = d.find("tools"); i != d.end() && i->is_array())
      for (auto& t : *i)
        if (t.is_string())
          tools += (tools.empty() ? "" : ",") + t.get<std::string>();
    auto sup = d.value("supervisor", nlohmann::json());
    std::snprintf(buf, sizeof(buf), "%-24s  %5s  %7s  %-40s  %s\n",
                  name.is_string() && !name.get<std::string>().empty()
                    ? name.get<std::string>().c_str()
                    : "-",
                  number(d, "slots").c_str(), number(d, "running").c_str(),
                  tools.empty() ? "-" : shorten(tools, 40).c_str(),
                  sup.is_boolean() && sup.get<bool>() ? "yes" : "no");
    out += buf;
  }
  return out;
}

} // namespace canopy::core
