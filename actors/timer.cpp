#include "actors/timer.hpp"

#include <chrono>
#include <iterator>
#include <map>
#include <set>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace canopy::core {

namespace {

using clock_type = std::chrono::steady_clock;

struct timer_entry {
  caf::actor_addr receiver;
  caf::message msg;
};

/// One node per pending timer. Timers of receivers that ended are not
/// cancelled one by one (a stopped tree of 111,111 sleeping executions would
/// send as many messages); `sweep` drops them in one pass.
struct timer_state {
  using due_map = std::multimap<clock_type::time_point, timer_entry>;
  /// Due time → entry, in due order.
  due_map due;
  /// Wake-ups already requested from CAF's clock.
  std::multiset<clock_type::time_point> armed;
  /// Pending timers after the last sweep: the next one runs once they doubled.
  size_t swept_size = 0;
  /// A periodic sweep is on its way.
  bool sweep_armed = false;
  static const char* name;
};

const char* timer_state::name = "timer";

using timer_actor = caf::stateful_actor<timer_state>;

/// The smallest table that a schedule sweeps before it grows further.
constexpr size_t min_sweep_size = 1024;

/// Drops every timer whose receiver has ended (or, with `only`, every timer
/// of `only`).
void sweep(timer_actor* self, const caf::actor_addr* only = nullptr) {
  auto& st = self->state;
  for (auto i = st.due.begin(); i != st.due.end();) {
    auto& r = i->second.receiver;
    bool gone = only ? r == *only : caf::actor_cast<caf::actor>(r) == nullptr;
    i = gone ? st.due.erase(i) : std::next(i);
  }
  st.swept_size = st.due.size();
}

/// Makes sure CAF's clock wakes us no later than the earliest due time, and
/// that a periodic sweep comes while timers are pending.
void arm(timer_actor* self) {
  auto& st = self->state;
  if (st.due.empty())
    return;
  if (!st.sweep_armed) {
    st.sweep_armed = true;
    self->delayed_send(self, sweep_interval, sweep_atom::value);
  }
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
      // Amortised O(1): a sweep each time the table doubled since the last.
      if (st.due.size() >= std::max(min_sweep_size, 2 * st.swept_size))
        sweep(self);
      st.due.emplace(clock_type::now() + millis{delay_ms},
                     timer_entry{receiver, std::move(msg)});
      arm(self);
    },
    [=](cancel_atom, const caf::actor_addr& receiver) { sweep(self, &receiver); },
    [=](sweep_atom) {
      auto& st = self->state;
      st.sweep_armed = false;
      sweep(self);
      arm(self);
    },
    [=](caf::get_atom) { return static_cast<uint64_t>(self->state.due.size()); },
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
        st.due.erase(i);
      }
      arm(self);
    },
  };
}

} // namespace

caf::actor spawn_timer(caf::actor_system& sys) {
  return sys.spawn(timer);
}

void schedule(caf::local_actor* self, const caf::actor& timer, millis delay,
              caf::message msg) {
  // The receiver travels in the message (typed actors cannot `send` to the
  // untyped timer); the timer's mailbox keeps this thread's order.
  caf::anon_send(timer, schedule_atom::value, static_cast<int64_t>(delay.count()),
                 self->address(), std::move(msg));
}

} // namespace canopy::core
