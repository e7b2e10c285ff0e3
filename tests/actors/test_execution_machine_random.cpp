// The execution machine under random interleavings: steps finishing and
// failing, graceful and forced stops at any point, children settling, downs,
// timeouts, retries, limits, runners' signals, conditional steps, a wait
// offered signals and reaching its deadline, and a loop's iterations, with
// invariants checked after every input.

#include <csignal>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

namespace {

const json random_graph = {
  {"steps",
   {{"a", {{"run", {"true"}}, {"retries", 1}, {"retry_delay", "10ms"}}},
    {"b", {{"fn", "sleep"}, {"with", {{"ms", 5}}}, {"timeout", "1s"}}},
    {"c", {{"graph", {{"steps", {{"x", {{"fn", "noop"}}}}}}}}},
    {"d", {{"fn", "noop"}, {"needs", {"a"}}}},
    {"e", {{"run", {"true"}}, {"needs", {"c", "b"}}}},
    // Conditional: g is skipped (its condition is false), k with it (it
    // needs g); h runs once d completed (after any_completed).
    {"f", {{"fn", "echo"}, {"with", {{"go", false}}}}},
    {"g", {{"run", {"true"}}, {"needs", {"f"}}, {"when", "${steps.f.go}"}}},
    {"k", {{"fn", "noop"}, {"needs", {"g"}}}},
    {"h", {{"run", {"true"}}, {"needs", {"g", "d"}}, {"after", "any_completed"}}},
    // A wait: offered signals (some too late), its deadline, stops.
    {"w",
     {{"wait", {{"signal", "go"}, {"timeout", "10ms"}, {"on_timeout", "default"}, {"default", 0}}}}},
    // A loop: iterations end with `done` true or false; at most 3.
    {"r",
     {{"graph",
       {{"inputs", {"n"}}, {"steps", {{"y", {{"fn", "echo"}, {"with", {{"n", "${inputs.n}"}}}}}}}}},
      {"with", {{"n", 0}}},
      {"retries", 1},
      {"retry_delay", "10ms"},
      {"repeat",
       {{"until", "${steps.y.done}"}, {"max", 3}, {"carry", {{"n", "${steps.y.n}"}}}}}}}}}};

/// Everything in flight around one machine, as its shell and the world see it.
struct world {
  machine_fixture f;
  std::mt19937 rng;
  std::deque<fx::write> writes;
  std::vector<uint32_t> tickets;
  std::set<uint32_t> runners;  ///< steps with a live runner
  std::set<uint32_t> children; ///< steps with a live child
  std::set<uint32_t> exiting;  ///< workers told to stop
  std::vector<fx::timer> timers;
  bool admission = false;
  bool quit = false;
  size_t terminal_records = 0;
  size_t snapshots = 0;
  uint64_t child_events = 0;  ///< compact events children reported
  uint64_t passed_on = 0;     ///< compact events in its subtree records and report
  bool compact = false;       ///< it ended in a compact report (no record of its own)
  size_t signals_written = 0; ///< `step.signalled` events written
  std::map<uint32_t, int32_t> armed; ///< waits registered with the desk: idx → attempt
  size_t offers_taken = 0;    ///< signals the wait took
  size_t consumed_written = 0; ///< consumed signal records written
  uint32_t next_signal = 0;
  std::vector<bool> completed;
  std::vector<bool> skipped;
  std::set<std::string> completed_iterations; ///< children of `r` that completed
  int32_t iteration = 0;                      ///< the iteration `r` runs

  world(uint32_t seed, bool parent, uint64_t max_steps)
    : f(random_graph, parent, {}, max_steps), rng(seed) {
    f.env->has_admission = !parent && seed % 3 == 0;
    completed.assign(f.m->size(), false);
    skipped.assign(f.m->size(), false);
  }

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

  /// What a runner's signal may not change: every phase, reason and attempt.
  std::string state_print() const {
    auto& m = *f.m;
    std::string out = std::to_string(static_cast<int>(m.phase())) + " "
                      + to_string(m.record().status);
    for (uint32_t i = 0; i < m.size(); ++i)
      out += std::string{" "} + to_string(m.step(i).phase) + "/" + to_string(m.step(i).reason)
             + "/" + std::to_string(m.step(i).attempt);
    return out;
  }

  /// A runner's escalation signal for step `idx` (its current attempt, or a
  /// stale one): at most one write of one `step.signalled` event, no record,
  /// nothing after quit, no state changed.
  void signal(uint32_t idx, int64_t now) {
    auto& m = *f.m;
    static const int sigs[] = {SIGINT, SIGTERM, SIGKILL};
    auto k = pick(3);
    auto attempt = m.step(idx).attempt - static_cast<int32_t>(pick(4) == 0 ? 1 : 0);
    auto before = state_print();
    m.signalled(idx, attempt, sigs[k], k < 2 ? sigs[k + 1] : 0, k < 2 ? 100 : -1, now);
    REQUIRE(state_print() == before);
    auto xs = f.fx();
    if (quit) {
      INFO("effects after quit");
      REQUIRE(xs.empty());
    }
    REQUIRE(xs.size() <= 1);
    for (auto& e : xs) {
      auto w = effect_as<fx::write>(e);
      REQUIRE(w);
      REQUIRE(w->then == after_write::none);
      REQUIRE(w->batch.steps.empty());
      REQUIRE(w->batch.executions.empty());
      REQUIRE(w->batch.events.size() == 1);
      REQUIRE(w->batch.events[0].type == event_type::step_signalled);
      ++signals_written;
      writes.push_back(std::move(*w));
    }
  }

  void count_terminal(const write_batch& b) {
    for (auto& ss : b.subtree_stops) {
      REQUIRE(ss.target == "e1");
      passed_on += ss.events;
    }
    for (auto& r : b.executions)
      if (r.id == "e1"
          && (r.status == execution_status::completed || r.status == execution_status::failed
              || r.status == execution_status::stopped))
        ++terminal_records;
    for (auto& n : b.nested)
      count_terminal(n);
  }

  /// Takes the machine's effects and checks them against the invariants.
  void absorb() {
    auto xs = f.fx();
    if (quit) {
      INFO("effects after quit");
      REQUIRE(xs.empty());
    }
    for (auto& e : xs) {
      if (auto w = effect_as<fx::write>(e)) {
        count_terminal(w->batch);
        for (auto& ev : w->batch.events) // a skipped step never starts
          REQUIRE((ev.type != event_type::step_started || (ev.step != "g" && ev.step != "k")));
        for (auto& sig : w->batch.signals) {
          REQUIRE(sig.state == signal_state::consumed);
          REQUIRE(sig.wait_step == "w");
          ++consumed_written;
        }
        snapshots += w->then == after_write::report ? 1 : 0;
        writes.push_back(std::move(*w));
      } else if (auto a = std::get_if<fx::acquire_slot>(&e)) {
        if (a->pool.kind == fx::pool_ref::of::node)
          tickets.push_back(a->ticket);
      } else if (auto r = effect_as<fx::spawn_runner>(e)) {
        REQUIRE_FALSE(completed[r->idx]);
        REQUIRE_FALSE(skipped[r->idx]);
        runners.insert(r->idx);
      } else if (auto c = effect_as<fx::spawn_child>(e)) {
        REQUIRE_FALSE(completed[c->idx]);
        children.insert(c->idx);
        if (c->idx == f.idx("r")) {
          // An iteration that completed never runs again; the next one
          // follows the last that completed.
          REQUIRE(completed_iterations.count(c->record.id) == 0);
          REQUIRE(c->record.iteration == static_cast<int32_t>(completed_iterations.size()) + 1);
          REQUIRE(c->record.iteration <= 3);
          iteration = c->record.iteration;
        }
      } else if (auto s = std::get_if<fx::start_fn>(&e)) {
        REQUIRE_FALSE(completed[s->idx]);
        REQUIRE_FALSE(skipped[s->idx]);
      } else if (auto t = std::get_if<fx::timer>(&e)) {
        timers.push_back(*t);
      } else if (auto a = std::get_if<fx::arm_wait>(&e)) {
        REQUIRE(a->idx == f.idx("w"));
        REQUIRE(a->signal == "go");
        armed[a->idx] = a->attempt;
      } else if (auto d = std::get_if<fx::disarm_wait>(&e)) {
        REQUIRE(armed.count(d->idx) == 1);
        armed.erase(d->idx);
      } else if (auto x = std::get_if<fx::send_exit>(&e)) {
        exiting.insert(x->idx);
      } else if (std::holds_alternative<fx::acquire_admission>(e)) {
        admission = true;
      } else if (auto rep = effect_as<fx::report>(e)) {
        auto before = terminal_records;
        count_terminal(rep->snapshot);
        passed_on += rep->stopped_events;
        if (terminal_records == before && rep->status == execution_status::stopped
            && rep->stopped_events > child_events) {
          // Stopped from above compactly: the parent counts it, no record.
          compact = true;
          ++terminal_records;
          ++snapshots;
        } else {
          snapshots += rep->snapshot.empty() ? 0 : 1;
        }
      } else if (std::holds_alternative<fx::quit>(e)) {
        quit = true;
      }
    }
    // A completed step stays completed, a skipped one skipped; only the
    // steps whose condition is false (or that need them) are ever skipped.
    for (uint32_t i = 0; i < f.m->size(); ++i) {
      if (completed[i])
        REQUIRE(f.m->step(i).phase == step_phase::completed);
      if (skipped[i])
        REQUIRE(f.m->step(i).phase == step_phase::skipped);
      completed[i] = f.m->step(i).phase == step_phase::completed;
      skipped[i] = f.m->step(i).phase == step_phase::skipped;
      if (skipped[i])
        REQUIRE((i == f.idx("g") || i == f.idx("k")));
    }

  }

  /// One random input.
  void input() {
    auto& m = *f.m;
    auto now = ++f.now;
    switch (pick(16)) {
      case 0:
      case 1:
        if (!writes.empty()) {
          auto w = std::move(writes.front());
          writes.pop_front();
          m.write_acknowledged(w.completed, w.then, now);
        }
        break;
      case 2:
        if (!tickets.empty()) {
          auto i = pick(tickets.size());
          auto t = tickets[i];
          tickets.erase(tickets.begin() + static_cast<long>(i));
          m.slot_granted(t, slot_from::node, now);
        } else if (admission) {
          admission = false;
          m.admitted(now);
        }
        break;
      case 3:
      case 4:
        if (!runners.empty()) {
          auto idx = *std::next(runners.begin(), static_cast<long>(pick(runners.size())));
          runners.erase(idx);
          exiting.erase(idx);
          if (pick(4) == 0)
            m.down(idx, "killed", now);
          else
            m.step_done(idx, m.step(idx).attempt, json::object(), pick(3) == 0 ? "boom" : "",
                        now);
        }
        break;
      case 5:
        if (!children.empty()) {
          auto idx = *std::next(children.begin(), static_cast<long>(pick(children.size())));
          children.erase(idx);
          bool stopped = exiting.erase(idx) > 0;
          write_batch snap;
          uint64_t events = 0;
          if (stopped && pick(2) == 0) {
            events = 1 + pick(4); // a child stopped compactly
          } else if (stopped) {
            execution_record r;
            r.id = "child";
            snap.executions.push_back(r);
          }
          child_events += events;
          auto status = stopped ? execution_status::stopped
                                : std::array<execution_status, 3>{execution_status::completed,
                                                                  execution_status::failed,
                                                                  execution_status::stopped}[pick(3)];
          if (idx == f.idx("r") && !stopped && pick(2) == 0)
            status = execution_status::completed; // iterations mostly complete
          json steps;
          if (idx == f.idx("r") && status == execution_status::completed) {
            if (m.step(idx).phase == step_phase::running_child)
              completed_iterations.insert(m.step(idx).child_id);
            steps = {{"y", {{"n", iteration}, {"done", pick(3) == 0}}}};
          }
          m.child_settled(idx, status, json::object(), {}, std::move(snap), now, events,
                          std::move(steps));
        }
        break;
      case 6:
      case 7:
        if (!timers.empty()) {
          auto i = pick(timers.size());
          auto t = timers[i];
          timers.erase(timers.begin() + static_cast<long>(i));
          switch (t.kind) {
            case timer_kind::retry: m.retry_due(t.idx, t.attempt, now); break;
            case timer_kind::wake: m.wake(t.idx, t.attempt, t.ms, now); break;
            case timer_kind::timeout: m.timeout(t.idx, t.attempt, now); break;
            case timer_kind::deadline: m.deadline(now); break;
            case timer_kind::abandon: m.abandon_fn(t.idx, t.attempt, now); break;
            case timer_kind::wait_due: m.wait_due(t.idx, t.attempt, now); break;
          }
        }
        break;
      case 8:
        m.stop(pick(2) ? step_reason::requested : step_reason::shutdown,
               pick(2) ? stop_mode::force : stop_mode::graceful, pick(2) == 0, now);
        break;
      case 9:
        m.deadline(now);
        break;
      case 10:
        m.node_lost("w1", now);
        break;
      case 11: {
        auto idx = static_cast<uint32_t>(pick(m.size()));
        if (runners.count(idx)) {
          m.runner_started(idx, m.step(idx).attempt, 42, 7);
          m.output(idx, m.step(idx).attempt, json::array({"line"}), now);
        } else {
          // A stale message for an old attempt changes nothing.
          m.step_done(idx, m.step(idx).attempt - 1, json::object(), {}, now);
        }
        break;
      }
      case 12: {
        // A down: a child gone without a report (it crashed), or a stale one.
        auto idx = static_cast<uint32_t>(pick(m.size()));
        children.erase(idx);
        m.down(idx, "stale", now);
        break;
      }
      case 13:
        // A runner's escalation (a stop's or a timeout's), or a stale one.
        if (!runners.empty() && pick(4) != 0)
          signal(*std::next(runners.begin(), static_cast<long>(pick(runners.size()))), now);
        else
          signal(static_cast<uint32_t>(pick(m.size())), now);
        break;
      case 14: {
        // The desk: nothing buffered for an armed wait, or a signal offered
        // (a stale attempt, one received after the deadline, or a good one).
        auto w = f.idx("w");
        auto attempt = m.step(w).attempt - static_cast<int32_t>(pick(5) == 0 ? 1 : 0);
        if (pick(3) == 0) {
          m.wait_armed(w, attempt, now);
          break;
        }
        signal_record sig;
        sig.id = "s" + std::to_string(++next_signal);
        sig.name = "go";
        sig.value = 1;
        sig.received_at = pick(4) == 0 ? m.step(w).deadline + 1 : now;
        bool waiting = m.step(w).phase == step_phase::waiting && attempt == m.step(w).attempt
                       && m.phase() == exec_phase::running
                       && (m.step(w).deadline == 0 || sig.received_at <= m.step(w).deadline);
        bool taken = m.signal_offered(w, attempt, sig, now);
        REQUIRE(taken == waiting);
        offers_taken += taken ? 1 : 0;
        REQUIRE(offers_taken <= 1); // a wait takes one signal, once
        break;
      }
      default:
        m.start(now);
        break;
    }
    absorb();
  }

  /// Stops the machine and lets the world answer until it quit.
  void drain() {
    f.m->stop(step_reason::shutdown, stop_mode::force, false, ++f.now);
    absorb();
    for (int i = 0; i < 10'000 && !quit; ++i) {
      auto& m = *f.m;
      auto now = ++f.now;
      if (!writes.empty()) {
        auto w = std::move(writes.front());
        writes.pop_front();
        m.write_acknowledged(w.completed, w.then, now);
      } else if (!runners.empty()) {
        auto idx = *runners.begin();
        if (pick(2) == 0)
          signal(idx, now); // its escalation, before the down
        runners.erase(idx);
        m.down(idx, "stopped", now);
      } else if (!children.empty()) {
        auto idx = *children.begin();
        children.erase(idx);
        write_batch snap;
        uint64_t events = 3;
        if (pick(2) == 0) {
          execution_record r;
          r.id = "child";
          snap.executions.push_back(r);
          events = 0;
        }
        child_events += events;
        m.child_settled(idx, execution_status::stopped, nullptr, {}, std::move(snap), now,
                        events);
      } else if (!timers.empty()) {
        auto t = timers.back();
        timers.pop_back();
        if (t.kind == timer_kind::abandon)
          m.abandon_fn(t.idx, t.attempt, now);
      } else if (admission) {
        admission = false;
        m.admitted(now);
      } else {
        m.start(now);
      }
      absorb();
    }
  }
};

} // namespace

TEST_CASE("the machine keeps its invariants under 100,000 random inputs",
          "[actors][machine]") {
  size_t inputs = 0;
  size_t signals = 0;
  size_t third_iterations = 0; ///< runs whose loop reached its third iteration
  size_t loops_at_max = 0;     ///< runs whose loop failed at `max`
  for (uint32_t seed = 1; inputs < 110'000; ++seed) {
    CAPTURE(seed);
    bool parent = seed % 2 == 0;
    world w{seed, parent, seed % 7 == 0 ? 3u : 1000u};
    w.f.m->start(++w.f.now);
    w.absorb();
    for (int i = 0; i < 55 && !w.quit; ++i, ++inputs)
      w.input();
    w.drain();
    REQUIRE(w.quit);
    REQUIRE(w.f.m->phase() == exec_phase::done);
    signals += w.signals_written;
    third_iterations += w.iteration == 3 ? 1 : 0;
    loops_at_max += w.f.step("r").reason == step_reason::max_iterations ? 1 : 0;
    // Exactly one terminal status, in exactly one final write or report.
    REQUIRE(w.terminal_records == 1);
    auto status = w.f.m->record().status;
    REQUIRE((status == execution_status::completed || status == execution_status::failed
             || status == execution_status::stopped));
    // A signal the wait took is written consumed once, with the step's end.
    REQUIRE(w.consumed_written == w.offers_taken);
    REQUIRE(w.armed.empty()); // nothing left registered with the desk
    if (status == execution_status::completed) {
      REQUIRE(w.f.step("w").phase == step_phase::completed);
      REQUIRE(w.f.step("g").phase == step_phase::skipped);
      REQUIRE(w.f.step("k").phase == step_phase::skipped);
      REQUIRE(w.f.step("h").phase == step_phase::completed);
    } else {
      // After a stop settles nothing runs, and one snapshot was written.
      for (uint32_t i = 0; i < w.f.m->size(); ++i)
        REQUIRE_FALSE(is_active(w.f.m->step(i).phase));
      REQUIRE(w.snapshots == 1);
    }
    // Every compact event a child reported is passed on exactly once (in its
    // subtree record or its report), plus its own when it ended compactly.
    if (w.compact)
      REQUIRE(w.passed_on > w.child_events);
    else
      REQUIRE(w.passed_on == w.child_events);
  }
  CHECK(inputs >= 100'000);
  CHECK(signals > 100); // signals of running runners were written (240 with these seeds)
  INFO("third iterations " << third_iterations << ", loops failed at max " << loops_at_max);
  CHECK(third_iterations > 10);
  CHECK(loops_at_max > 0);
}
