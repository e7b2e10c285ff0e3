#include "actors/slot_pool.hpp"

#include <deque>
#include <set>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace canopy::core {

namespace {

struct holder {
  caf::actor_addr who;
  uint64_t ticket;
  bool operator<(const holder& x) const {
    return std::tie(who, ticket) < std::tie(x.who, x.ticket);
  }
  bool operator==(const holder& x) const { return who == x.who && ticket == x.ticket; }
};

struct slot_pool_state {
  size_t slots = 1;
  std::set<holder> busy;
  std::deque<std::pair<holder, caf::actor>> queue;
  std::set<caf::actor_addr> monitored;
  static const char* name;
};

const char* slot_pool_state::name = "slot_pool";

void grant(caf::stateful_actor<slot_pool_state>* self) {
  auto& st = self->state;
  while (st.busy.size() < st.slots && !st.queue.empty()) {
    auto [h, who] = std::move(st.queue.front());
    st.queue.pop_front();
    st.busy.insert(h);
    self->send(who, grant_atom::value, h.ticket);
  }
}

caf::behavior slot_pool(caf::stateful_actor<slot_pool_state>* self, size_t slots) {
  self->state.slots = std::max<size_t>(1, slots);
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    st.monitored.erase(msg.source);
    for (auto i = st.busy.begin(); i != st.busy.end();)
      i = i->who == msg.source ? st.busy.erase(i) : std::next(i);
    st.queue.erase(std::remove_if(st.queue.begin(), st.queue.end(),
                                  [&](auto& q) { return q.first.who == msg.source; }),
                   st.queue.end());
    grant(self);
  });
  return {
    [=](acquire_atom, uint64_t ticket) {
      auto& st = self->state;
      auto who = caf::actor_cast<caf::actor>(self->current_sender());
      if (!who)
        return;
      if (st.monitored.insert(who.address()).second)
        self->monitor(who);
      st.queue.emplace_back(holder{who.address(), ticket}, who);
      grant(self);
    },
    [=](release_atom, uint64_t ticket) {
      auto& st = self->state;
      holder h{self->current_sender() ? caf::actor_cast<caf::actor_addr>(self->current_sender())
                                      : caf::actor_addr{},
               ticket};
      if (st.busy.erase(h) == 0)
        st.queue.erase(std::remove_if(st.queue.begin(), st.queue.end(),
                                      [&](auto& q) { return q.first == h; }),
                       st.queue.end());
      grant(self);
    },
  };
}

} // namespace

caf::actor spawn_slot_pool(caf::actor_system& sys, size_t slots) {
  return sys.spawn(slot_pool, slots);
}

} // namespace canopy::core
