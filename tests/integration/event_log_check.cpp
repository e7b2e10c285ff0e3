#include "tests/integration/event_log_check.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "persistence/error.hpp"

namespace canopy::core::test {

using json = nlohmann::json;

namespace {

/// How many events of a broken log a failure message shows.
constexpr size_t shown_events = 200;

/// False while an unchecked_event_logs lives on this thread.
thread_local bool checking = true;

/// Where one execution stands in the log read so far.
enum class phase { none, queued, running, stopping, ended };

/// What the checker remembers of one execution.
struct execution_state {
  phase at = phase::none;
  bool ever_started = false;
  uint64_t run_seq = 0;         ///< its latest `started` / `resumed` (0: none)
  std::string ended_by;         ///< its latest terminal event's type
  uint64_t ended_seq = 0;
  std::vector<uint64_t> stop_requests; ///< seqs of the `stop.requested` targeting it
};

std::string text_of(const json& e, const char* key) {
  auto i = e.find(key);
  return i != e.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

bool is_terminal_type(const std::string& type) {
  return type == "execution.completed" || type == "execution.failed"
         || type == "execution.stopped";
}

const char* name_of(phase p) {
  switch (p) {
    case phase::none: return "before its first event";
    case phase::queued: return "queued";
    case phase::running: return "running";
    case phase::stopping: return "stopping";
    case phase::ended: return "ended";
  }
  return "?";
}

/// Walks the log once, in reader order, collecting violations.
class checker {
public:
  std::vector<std::string> run(const std::vector<json>& events) {
    for (size_t i = 0; i < events.size(); ++i)
      event(i, events[i]);
    return std::move(out_);
  }

private:
  void event(size_t i, const json& e) {
    if (!e.is_object()) {
      note("event #" + std::to_string(i) + " is not a JSON object: " + e.dump());
      return;
    }
    auto s = e.find("seq");
    if (s == e.end() || !s->is_number_integer() || s->get<int64_t>() < 0) {
      note("event #" + std::to_string(i) + " has no seq: " + e.dump());
      return;
    }
    seq_ = s->get<uint64_t>();
    type_ = text_of(e, "type");
    id_ = text_of(e, "execution_id");
    step_ = text_of(e, "step");
    reason_ = text_of(e, "reason");
    // 1. Strictly increasing seqs.
    if (i > 0 && seq_ <= last_seq_)
      note(here() + " follows seq " + std::to_string(last_seq_)
           + ": seqs must strictly increase");
    last_seq_ = seq_;
    auto& x = executions_[id_];
    after_terminal(x, e);
    if (type_.rfind("execution.", 0) == 0)
      status_event(x);
    else if (type_ == "stop.requested" || type_ == "stop.handled")
      stop_event(x, e);
    else if (type_ == "step.completed" || type_ == "step.skipped")
      settled_.emplace(std::make_pair(id_, step_), seq_);
    else if (type_ == "step.started")
      step_started();
    else if (type_ == "signal.received" || type_ == "signal.consumed")
      signal_event(e);
  }

  // -- 6. a signal is consumed once -------------------------------------------------------

  void signal_event(const json& e) {
    std::string sid;
    if (auto d = e.find("data"); d != e.end() && d->is_object())
      sid = text_of(*d, "signal_id");
    if (type_ == "signal.received") {
      signals_.emplace(sid, 0);
      return;
    }
    auto s = signals_.find(sid);
    if (sid.empty() || s == signals_.end())
      note(here() + " consumes signal " + (sid.empty() ? std::string{"(no signal_id)"} : sid)
           + ", which no earlier signal.received stored");
    else if (s->second != 0)
      note(here() + " consumes signal " + sid + " again (consumed at seq "
           + std::to_string(s->second) + ")");
    else
      s->second = seq_;
  }

  // -- 2. nothing after the end ---------------------------------------------------------

  void after_terminal(const execution_state& x, const json& e) {
    if (x.at != phase::ended)
      return;
    bool allowed = type_ == "stop.requested" || type_ == "stop.handled"
                   || type_ == "agent.cancelled" || type_ == "execution.resumed"
                   || type_ == "signal.received"
                   || (type_ == "execution.started" && !x.ever_started)
                   || (type_ == "agent.reply" && x.ended_by == "execution.completed");
    if (!allowed)
      note(here() + " comes after its terminal " + x.ended_by + " (seq "
           + std::to_string(x.ended_seq) + ") without an execution.resumed between"
           + (e.contains("status") ? " (status " + text_of(e, "status") + ")" : ""));
  }

  // -- 5. status sequence ---------------------------------------------------------------

  void status_event(execution_state& x) {
    auto illegal = [&] {
      note(here() + " is not a legal transition from " + name_of(x.at)
           + (x.at == phase::ended ? " (" + x.ended_by + ", seq " + std::to_string(x.ended_seq)
                                       + ")"
                                   : std::string{}));
    };
    if (type_ == "execution.queued") {
      if (x.at != phase::none)
        illegal();
      x.at = phase::queued;
    } else if (type_ == "execution.started") {
      bool ok = x.at == phase::none || x.at == phase::queued
                || (x.at == phase::ended && !x.ever_started);
      if (!ok)
        illegal();
      x.at = phase::running;
      x.ever_started = true;
      x.run_seq = seq_;
    } else if (type_ == "execution.resumed") {
      bool ok = x.at == phase::ended && x.ended_by != "execution.completed";
      if (!ok)
        illegal();
      x.at = phase::running;
      x.ever_started = true;
      x.run_seq = seq_;
    } else if (type_ == "execution.stopping") {
      if (x.at != phase::queued && x.at != phase::running)
        illegal();
      requested_stop(x);
      x.at = phase::stopping;
    } else if (is_terminal_type(type_)) {
      bool ok = x.at == phase::running || x.at == phase::stopping
                || (x.at == phase::queued && type_ != "execution.completed");
      if (!ok)
        illegal();
      if (type_ == "execution.stopped")
        requested_stop(x);
      x.at = phase::ended;
      x.ended_by = type_;
      x.ended_seq = seq_;
    }
  }

  // -- 3. causal stops ------------------------------------------------------------------

  /// A stop with reason `requested` needs a request of this execution
  /// since its run began.
  void requested_stop(const execution_state& x) {
    if (reason_ != "requested")
      return;
    for (auto r : x.stop_requests)
      if (r > x.run_seq)
        return;
    note(here() + " has reason requested, but no stop.requested of " + id_
         + (x.run_seq != 0 ? " since its run began (seq " + std::to_string(x.run_seq) + ")"
                           : std::string{})
         + " precedes it");
  }

  void stop_event(execution_state& x, const json& e) {
    std::string sid;
    if (auto d = e.find("data"); d != e.end() && d->is_object())
      sid = text_of(*d, "stop_id");
    if (type_ == "stop.requested") {
      x.stop_requests.push_back(seq_);
      if (!sid.empty())
        requests_.emplace(sid, std::make_pair(seq_, id_));
      return;
    }
    auto r = requests_.find(sid);
    if (sid.empty() || r == requests_.end())
      note(here() + " answers stop " + (sid.empty() ? std::string{"(no stop_id)"} : sid)
           + ", which no earlier stop.requested asked");
    else if (r->second.second != id_)
      note(here() + " answers stop " + sid + " of " + r->second.second + " (seq "
           + std::to_string(r->second.first) + ") for another execution");
  }

  // -- 4. completed steps stay completed ------------------------------------------------

  void step_started() {
    auto c = settled_.find({id_, step_});
    if (c != settled_.end())
      note(here() + " starts a step recorded completed or skipped at seq "
           + std::to_string(c->second));
  }

  // -- output ---------------------------------------------------------------------------

  std::string here() const {
    std::string out = "seq " + std::to_string(seq_) + ": " + type_ + " of " + id_;
    if (!step_.empty())
      out += " step " + step_;
    if (!reason_.empty())
      out += " (" + reason_ + ")";
    return out;
  }

  void note(std::string text) { out_.push_back(std::move(text)); }

  std::vector<std::string> out_;
  std::map<std::string, execution_state> executions_;
  std::map<std::pair<std::string, std::string>, uint64_t> settled_;
  std::map<std::string, std::pair<uint64_t, std::string>> requests_; ///< stop id → seq, target
  std::map<std::string, uint64_t> signals_; ///< signal id → seq of its consumption (0: none yet)
  uint64_t last_seq_ = 0;
  uint64_t seq_ = 0;
  std::string type_, id_, step_, reason_;
};

} // namespace

std::vector<std::string> event_log_violations(const std::vector<json>& events) {
  return checker{}.run(events);
}

std::vector<std::string> event_log_violations(const std::vector<event_record>& events) {
  std::vector<json> docs;
  docs.reserve(events.size());
  for (auto& e : events)
    docs.push_back(event_document(e));
  return event_log_violations(docs);
}

std::vector<json> parse_event_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    auto e = json::parse(line, nullptr, false);
    if (e.is_object())
      out.push_back(std::move(e));
  }
  return out;
}

void check_event_log(const std::vector<json>& events, const std::string& source) {
#ifdef CANOPY_EVENT_LOG_CHECK
  if (!checking)
    return;
  auto v = event_log_violations(events);
  if (v.empty())
    return;
  std::string text = "the event log read by " + source + " (" + std::to_string(events.size())
                     + " events) breaks " + std::to_string(v.size()) + " invariant"
                     + (v.size() == 1 ? "" : "s") + " (tests/integration/event_log_check.hpp):";
  for (auto& s : v)
    text += "\n  " + s;
  text += "\nthe log:";
  for (size_t i = 0; i < events.size() && i < shown_events; ++i)
    text += "\n  " + events[i].dump();
  if (events.size() > shown_events)
    text += "\n  ... " + std::to_string(events.size() - shown_events) + " more";
  throw std::runtime_error(text);
#else
  (void) events, (void) source;
#endif
}

void check_event_log(const std::vector<event_record>& events, const std::string& source) {
#ifdef CANOPY_EVENT_LOG_CHECK
  std::vector<json> docs;
  docs.reserve(events.size());
  for (auto& e : events)
    docs.push_back(event_document(e));
  check_event_log(docs, source);
#else
  (void) events, (void) source;
#endif
}

unchecked_event_logs::unchecked_event_logs() : was_(checking) {
  checking = false;
}

unchecked_event_logs::~unchecked_event_logs() {
  checking = was_;
}

std::vector<event_record> checked_tree_events(const store& db, const std::string& root) {
  auto events = db.tree_events(root);
  if (!events)
    throw std::runtime_error("cannot read the event log of " + root + ": "
                             + message_of(events.error()));
  check_event_log(*events, "the store's tree_events(" + root + ")");
  return std::move(*events);
}

} // namespace canopy::core::test
