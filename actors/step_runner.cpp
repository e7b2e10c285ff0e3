#include "actors/step_runner.hpp"

#include <csignal>

#include <caf/all.hpp>

#include "actors/error.hpp"
#include "actors/messages.hpp"
#include "actors/process/process_watch.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

using namespace std::chrono_literals;

constexpr auto first_poll = std::chrono::milliseconds{1};
constexpr auto max_poll = std::chrono::milliseconds{20};

/// How often a watched process (process_watch.hpp) is polled all the same:
/// a safety net only, the watch wakes the runner when anything happens.
/// Polling every running process often costs a node with many of them a
/// large part of a CPU (reads, waitpid, timers, actor wake-ups;
/// measured: runtime/docs/benchmarks.md#design-measurements).
constexpr auto recheck_interval = std::chrono::seconds{1};

/// How long a runner that reported waits for its parent to acknowledge the
/// result before it quits all the same (a parent that is gone answers at
/// once with an error).
constexpr auto report_ack_bound = std::chrono::seconds{30};

struct runner_state {
  caf::actor parent;
  runner_spec spec;
  subprocess proc;
  /// Wakes the runner when `proc` needs a poll; declared after `proc`,
  /// which it watches, so that it stops first.
  process_watch watch;
  std::chrono::milliseconds poll_interval = first_poll;
  json lines = json::array();
  size_t lines_reported = 0;
  bool timed_out = false;
  /// Set once a stop or timeout began the signal escalation.
  bool terminating = false;
  /// The escalation's last stage sent: 0 none, 1 SIGINT, 2 SIGTERM, 3 SIGKILL.
  int stage = 0;
  /// The exit reason to quit with after a stop (none: deliver a result).
  caf::error stop_reason;
  /// The result is on its way to the parent: the runner only waits for the
  /// acknowledgement, then quits.
  bool reported = false;
  static const char* name;
};

const char* runner_state::name = "step_runner";

using runner_actor = caf::stateful_actor<runner_state>;

/// Sends stage `stage` of the escalation (1 SIGINT, 2 SIGTERM, 3 SIGKILL) to
/// the group, schedules the next one and tells the parent (`signalled`). A
/// stage already passed is not sent again (a forced stop overtook it).
void send_stage(runner_actor* self, int stage) {
  static constexpr int signals[] = {0, SIGINT, SIGTERM, SIGKILL};
  auto& st = self->state;
  if (stage <= st.stage || stage > 3)
    return;
  st.stage = stage;
  st.proc.signal_group(signals[stage]);
  int next = 0;
  int64_t next_in_ms = -1;
  if (stage < 3) {
    next = signals[stage + 1];
    auto delay = stage == 1 ? st.spec.grace.interrupt : st.spec.grace.terminate;
    next_in_ms = delay.count();
    self->delayed_send(self, delay, escalate_atom::value, stage + 1);
  }
  self->send(st.parent, signalled_atom::value, st.spec.step, st.spec.attempt, signals[stage],
             next, next_in_ms);
}

void escalate(runner_actor* self, bool force) {
  auto& st = self->state;
  if (st.terminating && !force)
    return;
  st.terminating = true;
  send_stage(self, force ? 3 : 1);
}

void flush_lines(runner_actor* self) {
  auto& st = self->state;
  if (st.lines.empty())
    return;
  if (st.spec.wire)
    self->send(st.parent, output_atom::value, st.spec.step, st.spec.attempt,
               dump_json(st.lines));
  else
    self->send(st.parent, output_atom::value, st.spec.step, st.spec.attempt,
               std::move(st.lines));
  st.lines = json::array();
}

/// What a runner that reported still accepts: the messages it may have
/// queued for itself, which it drops.
caf::behavior reported_behavior() {
  return {
    [](poll_atom) {},
    [](recheck_atom) {},
    [](timeout_atom) {},
    [](escalate_atom, int) {},
  };
}

/// Sends the attempt's outcome to the parent (in wire form to a remote one)
/// and quits once the parent has it. Quitting at once let the parent see the
/// runner's down before its result when they travelled apart (a remote
/// runner: the result through the connection's broker, the down from the
/// node's monitor): the parent then counted a finished step as lost and ran
/// it again (seen as a tool run twice under load).
void report_and_quit(runner_actor* self, step_outcome outcome) {
  auto& st = self->state;
  st.reported = true;
  self->become(reported_behavior());
  auto quit = [self] { self->quit(); };
  auto quit_anyway = [self](caf::error&) { self->quit(); };
  if (st.spec.wire)
    self
      ->request(st.parent, report_ack_bound, done_atom::value, st.spec.step, st.spec.attempt,
                dump_json(outcome.result), outcome.error)
      .then(quit, quit_anyway);
  else
    self
      ->request(st.parent, report_ack_bound, done_atom::value, st.spec.step, st.spec.attempt,
                std::move(outcome))
      .then(quit, quit_anyway);
}

void finish(runner_actor* self) {
  auto& st = self->state;
  st.watch.stop();
  // No orphans: whatever the leader left in its group goes with it.
  st.proc.signal_group(SIGKILL);
  flush_lines(self);
  if (st.stop_reason) {
    // Stopped: no result; the parent resets the step when it sees the down.
    self->quit();
    return;
  }
  auto& out = st.proc.out();
  auto& err = st.proc.err();
  json result = {{"exit_code", st.proc.exit_code()},
                 {"stdout", out.data},
                 {"stderr", err.data},
                 {"json", nullptr}};
  if (!out.truncated) {
    auto parsed = json::parse(out.data, nullptr, false);
    if (!parsed.is_discarded())
      result["json"] = std::move(parsed);
  }
  if (out.truncated || err.truncated)
    result["truncated"] = true;
  step_outcome outcome{std::move(result), {}};
  if (st.timed_out)
    outcome.error = "timeout";
  else if (st.proc.term_signal() != 0)
    outcome.error = "killed by signal " + std::to_string(st.proc.term_signal());
  else if (st.proc.exit_code() != 0)
    outcome.error = "exit code " + std::to_string(st.proc.exit_code());
  report_and_quit(self, std::move(outcome));
}

void poll(runner_actor* self) {
  auto& st = self->state;
  bool progressed = false;
  auto on_line = [&](int stream, const std::string& line) {
    progressed = true;
    if (st.lines_reported >= st.spec.max_output_events)
      return;
    ++st.lines_reported;
    st.lines.push_back({{"stream", stream == 1 ? "stdout" : "stderr"}, {"line", line}});
  };
  if (st.proc.poll(on_line)) {
    finish(self);
    return;
  }
  flush_lines(self);
  if (st.watch.active()) {
    st.watch.rearm();
    return;
  }
  // Unwatched: poll quickly while the process is young or talking, back off
  // when idle.
  st.poll_interval = progressed ? first_poll : std::min(st.poll_interval * 2, max_poll);
  self->delayed_send(self, st.poll_interval, poll_atom::value);
}

caf::behavior step_runner(runner_actor* self, caf::actor parent, runner_spec spec) {
  auto& st = self->state;
  st.parent = std::move(parent);
  st.spec = std::move(spec);
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& st = self->state;
    if (!msg.reason)
      return;
    stop_reason reason = stop_reason::requested;
    stop_mode mode = stop_mode::graceful;
    bool stop = is_stop(msg.reason, reason, mode);
    bool force = mode == stop_mode::force;
    if (st.reported) {
      // Its process is gone. A stop: the parent answers the result soon.
      // A parent that died or is unreachable never will.
      if (!stop)
        self->quit(msg.reason);
      return;
    }
    if (!stop)
      // The parent died: escalate gracefully all the same, unless it was on
      // another node (lost supervisor: kill at once) or its tree
      // was taken over by another process (which may run the step again).
      force = st.spec.wire || is(msg.reason, persistence_errc::fenced);
    st.stop_reason = msg.reason;
    escalate(self, force);
  });
  if (st.spec.wire)
    // Linked to the remote parent: a stop arrives as its exit, and a lost
    // parent ends the runner.
    self->link_to(st.parent);
  auto proc = subprocess::start(st.spec.process);
  if (!proc) {
    report_and_quit(self, step_outcome{nullptr, message_of(proc.error())});
    return reported_behavior();
  }
  st.proc = std::move(*proc);
  self->send(st.parent, started_atom::value, st.spec.step, st.spec.attempt,
             static_cast<int64_t>(st.proc.pid()), process_start_time(st.proc.pid()));
  if (st.spec.timeout)
    self->delayed_send(self, *st.spec.timeout, timeout_atom::value);
  if (st.watch.start(self->address(), st.proc))
    self->delayed_send(self, recheck_interval, recheck_atom::value);
  self->send(self, poll_atom::value);
  return {
    [=](poll_atom) { poll(self); },
    [=](recheck_atom) {
      poll(self);
      if (!self->state.proc.done())
        self->delayed_send(self, recheck_interval, recheck_atom::value);
    },
    [=](timeout_atom) {
      auto& st = self->state;
      if (st.terminating)
        return;
      st.timed_out = true;
      escalate(self, false);
    },
    [=](escalate_atom, int stage) { send_stage(self, stage); },
  };
}

} // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    default: return "SIG" + std::to_string(sig);
  }
}

caf::actor spawn_remote_step_runner(caf::event_based_actor* node, caf::actor parent,
                                    runner_spec spec) {
  spec.wire = true;
  return node->spawn<caf::monitored>(step_runner, parent, std::move(spec));
}

caf::actor spawn_step_runner(caf::local_actor* parent, runner_spec spec) {
  return parent->spawn<caf::linked + caf::monitored>(step_runner,
                                                     caf::actor_cast<caf::actor>(parent),
                                                     std::move(spec));
}

} // namespace canopy::core
