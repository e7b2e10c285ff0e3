#include "actors/stop_watcher.hpp"

#include <set>
#include <string>

#include <caf/all.hpp>

#include "actors/execution/execution_actor.hpp"
#include "actors/messages.hpp"
#include "actors/stop_protocol.hpp"

namespace canopy::core {

namespace {

struct watcher_state {
  std::set<std::string> delivered;
  bool ticking = false; ///< a tick is scheduled
  static const char* name;
};

const char* watcher_state::name = "stop_watcher";

caf::behavior stop_watcher(caf::stateful_actor<watcher_state>* self,
                           std::shared_ptr<const execution_services> svc) {
  auto& st = self->state;
  if (svc->directory->size() > 0) {
    st.ticking = true;
    self->send(self, tick_atom::value);
  }
  return {
    [=](wake_atom) {
      if (self->state.ticking)
        return;
      self->state.ticking = true;
      self->send(self, tick_atom::value);
    },
    [=](tick_atom) {
      if (svc->directory->size() == 0) {
        self->state.ticking = false;
        self->state.delivered.clear();
        return;
      }
      self->delayed_send(self, stop_poll_interval, tick_atom::value);
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
  auto directory = svc->directory;
  auto w = sys.spawn(stop_watcher, std::move(svc));
  // Sleeps while no execution lives here: an idle node wakes no one. Weak,
  // so that the directory does not keep the watcher alive.
  directory->on_first([addr = w.address()] {
    if (auto a = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(a, wake_atom::value);
  });
  return w;
}

} // namespace canopy::core
