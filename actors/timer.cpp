#include "actors/timer.hpp"

#include <chrono>
#include <map>
#include <set>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace canopy {

namespace {

using clock_type = std::chrono::steady_clock;

struct timer_entry {
  caf::actor_addr receiver;
  caf::message msg;
};

struct timer_state {
  /// Due time → entry id, in due order.
  std::multimap<clock_type::time_point, uint64_t> due;
  std::unordered_map<uint64_t, std::pair<timer_entry, decltype(due)::iterator>> entries;
  /// Receiver → its entry ids, to cancel them all when it quits.
  std::map<caf::actor_addr, std::set<uint64_t>> by_receiver;
  /// Wake-ups already requested from CAF's clock.
  std::multiset<clock_type::time_point> armed;
  uint64_t next_id = 0;
  static const char* name;
};

const char* timer_state::name = "timer";

using timer_actor = caf::stateful_actor<timer_state>;

void forget(timer_actor* self, uint64_t id) {
  auto& st = self->state;
  auto i = st.entries.find(id);
  if (i == st.entries.end())
    return;
  st.due.erase(i->second.second);
  auto r = st.by_receiver.find(i->second.first.receiver);
  if (r != st.by_receiver.end()) {
    r->second.erase(id);
    if (r->second.empty())
      st.by_receiver.erase(r);
  }
  st.entries.erase(i);
}

/// Makes sure CAF's clock wakes us no later than the earliest due time.
void arm(timer_actor* self) {
  auto& st = self->state;
  if (st.due.empty())
    return;
  auto first = st.due.begin()->first;
  if (!st.armed.empty() && *st.armed.begin() <= first)
    return;
  st.armed.insert(first);
  auto delay = std::chrono::duration_cast<millis>(first - clock_type::now());
  self->delayed_send(self, std::max(delay, millis{0}) + millis{1}, tick_atom::value,
                     first.time_since_epoch().count());
}

caf::behavior timer(timer_actor* self) {
  return {
    [=](schedule_atom, int64_t delay_ms, const caf::actor_addr& receiver, caf::message& msg) {
      auto& st = self->state;
      auto id = ++st.next_id;
      auto at = st.due.emplace(clock_type::now() + millis{delay_ms}, id);
      st.entries.emplace(id, std::make_pair(timer_entry{receiver, std::move(msg)}, at));
      st.by_receiver[receiver].insert(id);
      arm(self);
    },
    [=](cancel_atom, const caf::actor_addr& receiver) {
      auto& st = self->state;
      auto r = st.by_receiver.find(receiver);
      if (r == st.by_receiver.end())
        return;
      auto ids = r->second;
      for (auto id : ids)
        forget(self, id);
    },
    [=](tick_atom, int64_t armed_for) {
      auto& st = self->state;
      auto a = st.armed.find(clock_type::time_point{clock_type::duration{armed_for}});
      if (a != st.armed.end())
        st.armed.erase(a);
      auto now = clock_type::now();
      while (!st.due.empty() && st.due.begin()->first <= now) {
        auto id = st.due.begin()->second;
        auto& e = st.entries.at(id).first;
        if (auto dest = caf::actor_cast<caf::actor>(e.receiver))
          dest->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {},
                                                  std::move(e.msg)),
                        nullptr);
        forget(self, id);
      }
      arm(self);
    },
  };
}

} // namespace

caf::actor spawn_timer(caf::actor_system& sys) {
  return sys.spawn<caf::detached>(timer);
}

void schedule(caf::event_based_actor* self, const caf::actor& timer, millis delay,
              caf::message msg) {
  self->send(timer, schedule_atom::value, static_cast<int64_t>(delay.count()), self->address(),
             std::move(msg));
}

} // namespace canopy
