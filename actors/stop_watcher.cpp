#include "actors/stop_watcher.hpp"

#include <set>
#include <string>

#include <caf/all.hpp>

#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/stop_protocol.hpp"

namespace canopy {

namespace {

struct watcher_state {
  std::set<std::string> delivered;
  static const char* name;
};

const char* watcher_state::name = "stop_watcher";

caf::behavior stop_watcher(caf::stateful_actor<watcher_state>* self,
                           std::shared_ptr<const execution_services> svc) {
  self->send(self, tick_atom::value);
  return {
    [=](tick_atom) {
      self->delayed_send(self, stop_poll_interval, tick_atom::value);
      if (svc->directory->size() == 0)
        return;
      auto pending = svc->db->pending_stops();
      if (!pending)
        return;
      std::set<std::string> still;
      for (auto& r : *pending) {
        still.insert(r.id);
        if (self->state.delivered.count(r.id))
          continue;
        if (deliver_stop(*svc->directory, r))
          self->state.delivered.insert(r.id);
      }
      // Forget requests that were handled meanwhile.
      for (auto i = self->state.delivered.begin(); i != self->state.delivered.end();)
        i = still.count(*i) ? std::next(i) : self->state.delivered.erase(i);
    },
  };
}

} // namespace

caf::actor spawn_stop_watcher(caf::actor_system& sys,
                              std::shared_ptr<const execution_services> svc) {
  return sys.spawn(stop_watcher, std::move(svc));
}

} // namespace canopy
