#include "actors/event_forwarder.hpp"

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace canopy::core {

namespace {

using event_fn = std::function<void(const event_record&)>;

struct forwarder_state {
  bool ready = false;
  uint64_t replayed_upto = 0;
  std::vector<event_record> early;
  /// Flushes asked for before the replay: answered once it is done.
  std::vector<caf::response_promise> flushes;
  static const char* name;
};

const char* forwarder_state::name = "event_forwarder";

caf::behavior event_forwarder(caf::stateful_actor<forwarder_state>* self, store_writer_actor writer,
                              std::shared_ptr<store> db, event_fn f, std::string root_id) {
  auto deliver = [=](const event_record& e) {
    if ((root_id.empty() || e.root_id == root_id) && e.seq > self->state.replayed_upto)
      f(e);
  };
  self->request(writer, caf::infinite, subscribe_atom::value, caf::actor_cast<caf::actor>(self))
    .then([=](uint64_t last) {
      auto& st = self->state;
      if (!root_id.empty())
        if (auto past = db->tree_events(root_id, 0); past)
          for (auto& e : *past)
            if (e.seq <= last)
              f(e);
      st.replayed_upto = root_id.empty() ? 0 : last;
      st.ready = true;
      for (auto& e : st.early)
        deliver(e);
      st.early.clear();
      for (auto& rp : st.flushes)
        rp.deliver(true);
      st.flushes.clear();
    });
  return {
    [=](events_atom, const event_list& events) {
      auto& st = self->state;
      for (auto& e : *events) {
        if (!st.ready)
          st.early.push_back(e);
        else
          deliver(e);
      }
    },
    // Answered after every event queued before it was delivered (once the
    // replay is done: events that came early wait for it).
    [=](flush_atom) -> caf::result<bool> {
      if (self->state.ready)
        return true;
      self->state.flushes.push_back(self->make_response_promise());
      return caf::delegated<bool>{};
    },
  };
}

} // namespace

caf::actor spawn_event_forwarder(caf::actor_system& sys, store_writer_actor writer,
                                 std::shared_ptr<store> db,
                                 std::function<void(const event_record&)> f,
                                 std::string root_id) {
  return sys.spawn(event_forwarder, std::move(writer), std::move(db), std::move(f),
                   std::move(root_id));
}

} // namespace canopy::core
