#include "actors/agent_actor.hpp"

#include <algorithm>
#include <deque>
#include <set>

#include <caf/all.hpp>

#include "actors/agent_runs.hpp"
#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/stop_protocol.hpp"
#include "actors/timer.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

// -- state -----------------------------------------------------------------------

/// A message waiting for its turn.
struct waiter {
  uint64_t turn = 0;
  bool user = false;          ///< a user's message (else an `agent` step)
  json message;               ///< user only
  std::string who;            ///< user only
  std::string root_id;        ///< step only: the asking tree
  caf::actor_addr requester;  ///< step only
  caf::response_promise rp;
};

/// The turn granted last, until its run is down.
struct holder {
  uint64_t turn = 0;
  bool user = false;
  std::string root_id;        ///< the tree the run belongs to
  caf::actor_addr requester;  ///< step only
  caf::actor run;             ///< null until the run started
  std::string run_id;
  bool cancel = false;        ///< superseded before its run started: stop it then
  caf::response_promise rp;   ///< user only: answered when the run ended
};

struct agent_state {
  std::string owner;
  std::string agent;  ///< the agent's name
  std::shared_ptr<const execution_services> svc;
  std::optional<holder> current;
  std::deque<waiter> queue;
  std::set<std::string> cancelled; ///< runs this agent stopped (cancel_previous)
  uint64_t next_turn = 1;
  bool polling = false;  ///< a tick is scheduled (busy with another tree's run)
  bool closing = false;
  static inline const char* name = "agent";
};

using agent_pointer = agent_actor::stateful_pointer<agent_state>;

agent_reply refused(reply_status status, std::string error) {
  agent_reply r;
  r.status = status;
  r.error = std::move(error);
  return r;
}

/// Live runs in the store that belong to another tree than `root_id`
/// (empty: a user's message, every run counts).
std::vector<std::string> foreign_runs(agent_pointer self, const std::string& root_id) {
  auto& st = self->state;
  std::vector<std::string> out;
  auto runs = st.svc->db->agent_runs(st.owner, st.agent);
  if (!runs)
    return out;
  for (auto& r : *runs)
    if (root_id.empty() || r.second != root_id)
      out.push_back(r.first);
  return out;
}

/// True when tree `root_id` holds the current turn or a live run of this agent.
bool in_tree(agent_pointer self, const std::string& root_id) {
  auto& st = self->state;
  if (root_id.empty())
    return false;
  if (st.current && st.current->root_id == root_id)
    return true;
  auto runs = st.svc->db->agent_runs(st.owner, st.agent);
  return runs && std::any_of(runs->begin(), runs->end(),
                             [&](const auto& r) { return r.second == root_id; });
}

/// True when a message of tree `root_id` must wait (or be refused, or cancel).
bool busy_for(agent_pointer self, const std::string& root_id) {
  auto& st = self->state;
  if (st.current && (root_id.empty() || st.current->root_id != root_id))
    return true;
  return !foreign_runs(self, root_id).empty();
}

/// Stops run `id` (a stop request, like `canopy stop`) and records
/// `agent.cancelled`.
void cancel_run(agent_pointer self, const std::string& id) {
  auto& st = self->state;
  if (st.cancelled.count(id) != 0)
    return;
  auto rec = st.svc->db->execution(id);
  if (!rec || !is_stoppable(rec->status))
    return;
  st.cancelled.insert(id);
  write_batch cancelled;
  cancelled.events.push_back(make_agent_event(*rec, event_type::agent_cancelled,
                                              {{"agent", st.agent}, {"by", "cancel_previous"}}));
  request_stop_async(self, stop_context{st.svc->db, st.svc->writer, st.svc->directory}, *rec,
                     stop_mode::graceful, "agent:" + st.agent, std::move(cancelled));
}

void next(agent_pointer self);

/// A user's turn: commit the run `queued`, then start it as a root.
void start_user_run(agent_pointer self, waiter w) {
  auto& st = self->state;
  holder h;
  h.turn = w.turn;
  h.user = true;
  h.rp = w.rp;
  auto fail = [&](std::string error) {
    h.rp.deliver(refused(reply_status::failed, std::move(error)));
    st.current.reset();
    next(self);
  };
  auto ag = st.svc->db->agent(st.owner, st.agent);
  if (!ag)
    return fail(message_of(ag.error()));
  auto parsed = parse_agent_graph(*ag, *st.svc, 0, default_max_depth);
  if (!parsed) {
    std::string msg = "the graph of agent '" + st.agent + "' no longer validates:";
    for (auto& e : parsed.errors)
      msg += " " + to_string(e) + ";";
    return fail(msg);
  }
  auto inputs = make_agent_inputs(*parsed.value, w.message, *st.svc->db, st.owner, st.agent);
  if (!inputs)
    return fail(message_of(inputs.error()));
  execution_init init;
  auto& r = init.record;
  r.id = make_execution_id();
  r.graph = parsed.value->name; // `agent` names the agent
  r.root_id = r.id;
  r.inputs = std::move(*inputs);
  r.created_at = now_ms();
  r.owner_pid = st.svc->owner_pid;
  r.owner_start = st.svc->owner_start;
  r.owner = st.owner;
  r.agent = st.agent;
  r.node = ag->node;
  init.graph = parsed.value;
  h.root_id = r.id;
  h.run_id = r.id;
  auto batch = make_queued_batch(r, *init.graph);
  batch.events.push_back(
    make_agent_event(r, event_type::agent_message, {{"agent", st.agent}, {"message", w.message},
                                          {"who", w.who}}));
  st.current = std::move(h);
  auto turn = st.current->turn;
  // Durable before the run starts; the turn is held meanwhile.
  self->request(st.svc->writer, caf::infinite, write_atom::value, std::move(batch))
    .then(
      [=](bool) mutable {
        auto& st = self->state;
        if (!st.current || st.current->turn != turn)
          return;
        if (st.closing) {
          // Stored `queued`: the next start of the node recovers it.
          st.current->rp.deliver(refused(reply_status::stopped, "the node is shutting down"));
          st.current.reset();
          return;
        }
        // Monitored, tracked and stopped like any root: untyped.
        auto run = caf::actor_cast<caf::actor>(
          spawn_execution(self->system(), std::move(init), st.svc));
        if (st.svc->track_root)
          st.svc->track_root(run);
        self->monitor(run);
        st.current->run = run;
        if (st.current->cancel)
          cancel_run(self, st.current->run_id);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (!st.current || st.current->turn != turn)
          return;
        st.current->rp.deliver(refused(reply_status::failed, message_of(err)));
        st.current.reset();
        next(self);
      });
}

/// Gives the turn to the next waiter, when the agent is free for it.
void next(agent_pointer self) {
  auto& st = self->state;
  if (!st.current && st.queue.empty())
    st.cancelled.clear();
  while (!st.current && !st.queue.empty()) {
    auto& w = st.queue.front();
    if (st.closing) {
      if (w.user)
        w.rp.deliver(refused(reply_status::stopped, "the node is shutting down"));
      else
        w.rp.deliver(turn_verdict::busy, w.turn);
      st.queue.pop_front();
      continue;
    }
    if (busy_for(self, w.user ? std::string{} : w.root_id)) {
      // Another tree's run (another process, or a resumed run): look again soon.
      if (!st.polling && st.svc->timer) {
        st.polling = true;
        schedule(self, st.svc->timer, millis{20}, caf::make_message(tick_atom::value));
      }
      return;
    }
    auto w2 = std::move(w);
    st.queue.pop_front();
    if (w2.user) {
      start_user_run(self, std::move(w2));
    } else {
      holder h;
      h.turn = w2.turn;
      h.root_id = w2.root_id;
      h.requester = w2.requester;
      st.current = std::move(h);
      w2.rp.deliver(turn_verdict::granted, w2.turn);
    }
  }
}

/// A message arrives while the agent is busy: apply the agent's policy.
/// @returns true when `w` was queued (else it was answered).
bool on_busy(agent_pointer self, waiter& w, busy_policy policy) {
  auto& st = self->state;
  switch (policy) {
    case busy_policy::reject:
      if (w.user)
        w.rp.deliver(refused(reply_status::busy, "agent '" + st.agent + "' is busy (on_busy: reject)"));
      else
        w.rp.deliver(turn_verdict::busy, w.turn);
      return false;
    case busy_policy::queue:
      return true;
    case busy_policy::cancel_previous:
      // Messages still waiting are superseded; live runs are stopped.
      for (auto& old : st.queue) {
        if (old.user)
          old.rp.deliver(refused(reply_status::cancelled, "superseded by a newer message"));
        else
          old.rp.deliver(turn_verdict::cancelled, old.turn);
      }
      st.queue.clear();
      if (st.current && st.current->run)
        cancel_run(self, st.current->run_id);
      else if (st.current)
        st.current->cancel = true; // its run is not started yet
      for (auto& id : foreign_runs(self, w.user ? std::string{} : w.root_id))
        cancel_run(self, id);
      return true;
  }
  return true;
}

/// The run of the current turn ended: answer a user, then the next turn.
void end_turn(agent_pointer self) {
  auto& st = self->state;
  if (!st.current)
    return;
  auto h = std::move(*st.current);
  st.current.reset();
  if (h.user) {
    agent_reply r;
    r.execution_id = h.run_id;
    auto rec = st.svc->db->execution(h.run_id);
    if (!rec) {
      r.status = reply_status::failed;
      r.error = message_of(rec.error());
    } else {
      r.status = reply_status_of(rec->status);
      r.reason = rec->reason;
      r.error = rec->error;
      if (rec->status == execution_status::completed && rec->outputs.is_object())
        r.reply = rec->outputs.value("reply", json{});
    }
    h.rp.deliver(std::move(r));
  }
  st.cancelled.erase(h.run_id);
  next(self);
}

// -- handlers --------------------------------------------------------------------

/// Quitting: every caller still waiting gets an answer, then the agent quits.
void answer_all_and_quit(agent_pointer self, caf::exit_msg& msg) {
  auto& st = self->state;
  st.closing = true;
  if (st.current && st.current->user) {
    agent_reply r = refused(reply_status::stopped, "the agent quit: " + caf::to_string(msg.reason));
    r.execution_id = st.current->run_id;
    st.current->rp.deliver(std::move(r));
  }
  st.current.reset();
  next(self);
  self->quit(msg.reason);
}

/// A monitored actor went away: the current run ended, or a requester's
/// turn and waiting messages are dropped.
void run_or_requester_down(agent_pointer self, caf::down_msg& msg) {
  auto& st = self->state;
  if (st.current && st.current->run && st.current->run.address() == msg.source) {
    end_turn(self);
    return;
  }
  // A requester went away: its turn (if no run started) and its waiting
  // messages go with it.
  st.queue.erase(std::remove_if(st.queue.begin(), st.queue.end(),
                                [&](const waiter& w) {
                                  return !w.user && w.requester == msg.source;
                                }),
                 st.queue.end());
  if (st.current && !st.current->user && !st.current->run
      && st.current->requester == msg.source) {
    st.current.reset();
    next(self);
  }
}

/// A user's message: queued (or answered by the busy policy); the reply
/// comes when its run ended.
caf::result<agent_reply> take_user_message(agent_pointer self, json& message, std::string& who) {
  auto& st = self->state;
  if (st.closing)
    return refused(reply_status::stopped, "the node is shutting down");
  auto ag = st.svc->db->agent(st.owner, st.agent);
  if (!ag)
    return refused(reply_status::failed, message_of(ag.error()));
  waiter w;
  w.turn = st.next_turn++;
  w.user = true;
  w.message = std::move(message);
  w.who = std::move(who);
  auto rp = self->make_response_promise<agent_reply>();
  w.rp = rp;
  if ((st.current || !st.queue.empty() || busy_for(self, {}))
      && !on_busy(self, w, ag->on_busy))
    return rp;
  st.queue.push_back(std::move(w));
  next(self);
  return rp;
}

/// An `agent` step of tree `root_id` asks for a turn: nested, queued (or
/// answered by the busy policy), or busy.
caf::result<turn_verdict, uint64_t> take_turn_request(agent_pointer self,
                                                      const std::string& root_id) {
  auto& st = self->state;
  auto turn = st.next_turn++;
  if (st.closing)
    return {turn_verdict::busy, turn};
  // A message from the tree of one of this agent's runs is nested: it
  // never waits (an agent messaging itself; `max_depth` bounds it).
  if (in_tree(self, root_id))
    return {turn_verdict::nested, turn};
  auto ag = st.svc->db->agent(st.owner, st.agent);
  if (!ag)
    return {turn_verdict::busy, turn};
  waiter w;
  w.turn = turn;
  w.root_id = root_id;
  w.requester = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto rp = self->make_response_promise<turn_verdict, uint64_t>();
  w.rp = rp;
  if (auto req = caf::actor_cast<caf::actor>(w.requester))
    self->monitor(req);
  if ((st.current || !st.queue.empty() || busy_for(self, root_id))
      && !on_busy(self, w, ag->on_busy))
    return rp;
  st.queue.push_back(std::move(w));
  next(self);
  return rp;
}

/// The run of granted turn `turn` started: watch it (and stop it when superseded).
void attach_run(agent_pointer self, uint64_t turn, caf::actor& run, const std::string& run_id) {
  auto& st = self->state;
  if (!st.current || st.current->turn != turn)
    return;
  st.current->run = run;
  st.current->run_id = run_id;
  self->monitor(run);
  if (st.current->cancel)
    cancel_run(self, run_id);
}

/// Granted turn `turn` is given back before its run started.
void release_turn(agent_pointer self, uint64_t turn) {
  auto& st = self->state;
  if (st.current && st.current->turn == turn && !st.current->run) {
    st.current.reset();
    next(self);
  }
}

agent_actor::behavior_type agent(agent_pointer self, std::string owner, std::string name,
                    std::shared_ptr<const execution_services> svc) {
  auto& st = self->state;
  st.owner = std::move(owner);
  st.agent = std::move(name);
  st.svc = std::move(svc);
  self->set_exit_handler([=](caf::exit_msg& msg) { answer_all_and_quit(self, msg); });
  self->set_down_handler([=](caf::down_msg& msg) { run_or_requester_down(self, msg); });
  return {
    [=](message_atom, json& message, std::string& who) -> caf::result<agent_reply> {
      return take_user_message(self, message, who);
    },
    [=](acquire_atom, const std::string& root_id) -> caf::result<turn_verdict, uint64_t> {
      return take_turn_request(self, root_id);
    },
    [=](run_atom, uint64_t turn, caf::actor& run, const std::string& run_id) {
      attach_run(self, turn, run, run_id);
    },
    [=](release_atom, uint64_t turn) { release_turn(self, turn); },
    [=](tick_atom) {
      self->state.polling = false;
      next(self);
    },
    [=](close_atom) {
      auto& st = self->state;
      st.closing = true;
      next(self);
    },
  };
}

} // namespace

agent_actor spawn_agent(caf::actor_system& sys, std::string owner, std::string name,
                       std::shared_ptr<const execution_services> svc) {
  return sys.spawn(agent, std::move(owner), std::move(name), std::move(svc));
}

} // namespace canopy::core
