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

/// Two nodes per pending timer (a live `sleep` holds one for its execution).
struct timer_state {
  using due_map = std::multimap<clock_type::time_point, timer_entry>;
  /// Due time → entry, in due order.
  due_map due;
  /// Receiver → its entries, to cancel them all when it quits.
  std::unordered_multimap<caf::actor_addr, due_map::iterator> by_receiver;
  /// Wake-ups already requested from CAF's clock.
  std::multiset<clock_type::time_point> armed;
  static const char* name;
};

const char* timer_state::name = "timer";

using timer_actor = caf::stateful_actor<timer_state>;

/// Drops the entry `i` (and its index entry).
void forget(timer_actor* self, timer_state::due_map::iterator i) {
  auto& st = self->state;
  auto range = st.by_receiver.equal_range(i->second.receiver);
  for (auto r = range.first; r != range.second; ++r)
    if (r->second == i) {
      st.by_receiver.erase(r);
      break;
    }
  st.due.erase(i);
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
      auto at = st.due.emplace(clock_type::now() + millis{delay_ms},
                               timer_entry{receiver, std::move(msg)});
      st.by_receiver.emplace(receiver, at);
      arm(self);
    },
    [=](cancel_atom, const caf::actor_addr& receiver) {
      auto& st = self->state;
      auto range = st.by_receiver.equal_range(receiver);
      for (auto r = range.first; r != range.second; ++r)
        st.due.erase(r->second);
      st.by_receiver.erase(range.first, range.second);
    },
    [=](tick_atom, int64_t armed_for) {
      auto& st = self->state;
      auto a = st.armed.find(clock_type::time_point{clock_type::duration{armed_for}});
      if (a != st.armed.end())
        st.armed.erase(a);
      auto now = clock_type::now();
      while (!st.due.empty() && st.due.begin()->first <= now) {
        auto i = st.due.begin();
        auto& e = i->second;
        if (auto dest = caf::actor_cast<caf::actor>(e.receiver))
          dest->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {},
                                                  std::move(e.msg)),
                        nullptr);
        forget(self, i);
      }
      arm(self);
    },
  };
}

} // namespace

caf::actor spawn_timer(caf::actor_system& sys) {
  return sys.spawn(timer);
}

void schedule(caf::event_based_actor* self, const caf::actor& timer, millis delay,
              caf::message msg) {
  self->send(timer, schedule_atom::value, static_cast<int64_t>(delay.count()), self->address(),
             std::move(msg));
}

} // namespace canopy
