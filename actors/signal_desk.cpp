#include "actors/signal_desk.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

bool may_take(const armed_wait& w, const signal_record& s) {
  return s.state == signal_state::buffered && s.root_id == w.root && s.name == w.name
         && (s.target.empty() || s.target == w.root || s.target == w.execution_id)
         && (s.step.empty() || s.step == w.step_path) && w.declined.count(s.id) == 0;
}

namespace {

struct desk_state {
  std::vector<armed_wait> waits;
  std::set<std::string> on_offer; ///< signal ids offered and not answered yet
  /// `deliver` answers waiting for the offer of their signal to end.
  std::map<std::string, std::vector<caf::response_promise>> answers;
  std::set<caf::actor_addr> watched; ///< executions monitored
  std::shared_ptr<std::atomic<size_t>> armed; ///< waits.size(), for the metrics
  bool ticking = false;
  static const char* name;
};

const char* desk_state::name = "signal_desk";

using desk = caf::stateful_actor<desk_state>;

void offer_round(desk* self, const std::shared_ptr<const store>& db, const std::string& root,
                 const std::string& name);

/// Answers the `deliver` requests of signal `id` with `who` (empty: buffered).
void answer(desk* self, const std::string& id, const std::vector<std::string>& who) {
  auto i = self->state.answers.find(id);
  if (i == self->state.answers.end())
    return;
  for (auto& rp : i->second)
    rp.deliver(who);
  self->state.answers.erase(i);
}

/// Publishes how many waits are armed here.
void count(desk* self) {
  self->state.armed->store(self->state.waits.size(), std::memory_order_relaxed);
}

armed_wait* find_wait(desk* self, const std::string& execution_id, uint32_t idx) {
  for (auto& w : self->state.waits)
    if (w.execution_id == execution_id && w.idx == idx)
      return &w;
  return nullptr;
}

/// Offers `sig` to wait `w`; the answer ends the offer.
void offer(desk* self, const std::shared_ptr<const store>& db, armed_wait& w,
           const signal_record& sig) {
  w.offered = true;
  self->state.on_offer.insert(sig.id);
  auto exec = w.execution_id;
  auto idx = w.idx;
  auto attempt = w.attempt;
  auto root = w.root;
  auto name = w.name;
  auto step = w.step_path;
  auto id = sig.id;
  self->request(w.execution, caf::infinite, offer_atom::value, uint64_t{idx}, attempt, sig)
    .then(
      [=](bool taken) {
        self->state.on_offer.erase(id);
        auto* w = find_wait(self, exec, idx);
        if (taken) {
          auto slash = step.rfind('/');
          answer(self, id, {exec, slash == std::string::npos ? step : step.substr(slash + 1)});
          if (w != nullptr && w->attempt == attempt)
            self->state.waits.erase(self->state.waits.begin() + (w - self->state.waits.data()));
          count(self);
        } else {
          if (w != nullptr) {
            w->offered = false;
            w->declined.insert(id);
          }
          answer(self, id, {});
        }
        offer_round(self, db, root, name);
      },
      [=](caf::error&) {
        // The execution is gone: its waits go (the down message says so too).
        self->state.on_offer.erase(id);
        answer(self, id, {});
        auto& ws = self->state.waits;
        ws.erase(std::remove_if(ws.begin(), ws.end(),
                                [&](const armed_wait& x) { return x.execution_id == exec; }),
                 ws.end());
        count(self);
        offer_round(self, db, root, name);
      });
}

/// Offers the buffered signals of (`root`, `name`) to the waits armed for
/// them that have no offer out, oldest signal to the earliest armed wait;
/// tells each wait that got nothing on its first round.
void offer_round(desk* self, const std::shared_ptr<const store>& db, const std::string& root,
                 const std::string& name) {
  auto& st = self->state;
  bool any = std::any_of(st.waits.begin(), st.waits.end(), [&](const armed_wait& w) {
    return w.root == root && w.name == name && !w.offered;
  });
  if (!any)
    return;
  std::vector<signal_record> buffered;
  if (auto all = db->signals(root))
    for (auto& s : *all)
      if (s.state == signal_state::buffered && s.name == name && st.on_offer.count(s.id) == 0)
        buffered.push_back(std::move(s));
  for (size_t i = 0; i < st.waits.size(); ++i) {
    auto& w = st.waits[i];
    if (w.root != root || w.name != name || w.offered)
      continue;
    auto s = std::find_if(buffered.begin(), buffered.end(),
                          [&](const signal_record& x) { return may_take(w, x); });
    if (s != buffered.end()) {
      auto sig = std::move(*s);
      buffered.erase(s);
      offer(self, db, st.waits[i], sig);
      continue;
    }
    if (!w.told) {
      w.told = true;
      self->send(w.execution, armed_atom::value, uint64_t{w.idx}, w.attempt);
    }
  }
}

caf::behavior signal_desk(desk* self, std::shared_ptr<const store> db,
                          std::shared_ptr<std::atomic<size_t>> armed) {
  self->state.armed = std::move(armed);
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    st.watched.erase(msg.source);
    auto& ws = st.waits;
    ws.erase(std::remove_if(ws.begin(), ws.end(),
                            [&](const armed_wait& w) { return w.execution == msg.source; }),
             ws.end());
    count(self);
  });
  return {
    [=](arm_atom, const std::string& root, const std::string& name,
        const std::string& execution_id, const std::string& step_path, uint64_t idx,
        int attempt) {
      auto& st = self->state;
      auto exec = caf::actor_cast<caf::actor>(self->current_sender());
      if (!exec)
        return;
      if (st.watched.insert(exec.address()).second)
        self->monitor(exec);
      if (auto* old = find_wait(self, execution_id, static_cast<uint32_t>(idx)))
        st.waits.erase(st.waits.begin() + (old - st.waits.data()));
      armed_wait w;
      w.root = root;
      w.name = name;
      w.execution_id = execution_id;
      w.step_path = step_path;
      w.idx = static_cast<uint32_t>(idx);
      w.attempt = attempt;
      w.execution = exec;
      st.waits.push_back(std::move(w));
      count(self);
      offer_round(self, db, root, name);
      if (!st.ticking) {
        st.ticking = true;
        self->delayed_send(self, signal_poll_interval, tick_atom::value);
      }
    },
    [=](disarm_atom, const std::string& execution_id, uint64_t idx) {
      auto& st = self->state;
      if (auto* w = find_wait(self, execution_id, static_cast<uint32_t>(idx)); w && !w->offered)
        st.waits.erase(st.waits.begin() + (w - st.waits.data()));
      count(self);
    },
    [=](deliver_atom, const signal_record& sig) -> caf::result<std::vector<std::string>> {
      auto& st = self->state;
      auto rp = self->make_response_promise<std::vector<std::string>>();
      st.answers[sig.id].push_back(rp);
      offer_round(self, db, sig.root_id, sig.name);
      if (st.on_offer.count(sig.id) == 0)
        answer(self, sig.id, {}); // no wait here took it up: buffered
      return rp;
    },
    [=](tick_atom) {
      auto& st = self->state;
      if (st.waits.empty()) {
        st.ticking = false;
        return;
      }
      self->delayed_send(self, signal_poll_interval, tick_atom::value);
      std::set<std::pair<std::string, std::string>> keys;
      for (auto& w : st.waits)
        if (!w.offered)
          keys.emplace(w.root, w.name);
      for (auto& k : keys)
        offer_round(self, db, k.first, k.second);
    },
  };
}

} // namespace

caf::actor spawn_signal_desk(caf::actor_system& sys, std::shared_ptr<const store> db,
                             std::shared_ptr<std::atomic<size_t>> armed) {
  return sys.spawn(signal_desk, std::move(db), std::move(armed));
}

} // namespace canopy::core
