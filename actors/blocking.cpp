#include "actors/blocking.hpp"

#include <caf/all.hpp>

namespace canopy::core {

bool await_down(caf::actor_system& sys, const caf::actor& who, std::optional<millis> timeout,
                caf::error* reason) {
  auto done = std::make_shared<std::promise<caf::error>>();
  auto down = done->get_future();
  auto watcher = sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
    self->set_down_handler([=](caf::down_msg& msg) {
      done->set_value(std::move(msg.reason));
      self->quit();
    });
    // Given up on: the monitor in `who` would keep this actor's memory for
    // as long as `who` lives.
    self->set_exit_handler([=](caf::exit_msg&) {
      self->demonitor(who);
      self->quit();
    });
    self->monitor(who);
    return {[](caf::flush_atom) {}};
  });
  if (timeout && down.wait_for(*timeout) != std::future_status::ready) {
    caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
    return false;
  }
  auto why = down.get();
  if (reason)
    *reason = std::move(why);
  return true;
}

} // namespace canopy::core
