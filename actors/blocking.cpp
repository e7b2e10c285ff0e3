#include "actors/blocking.hpp"

#include <condition_variable>
#include <mutex>

#include <caf/all.hpp>

namespace canopy::core {

namespace {

/// What a waiting thread and the actor it waits for share.
struct down_state {
  std::mutex mtx;
  std::condition_variable cv;
  bool down = false;
  caf::error reason;
};

/// Attached to the awaited actor: tells the waiting thread when it is down.
/// Its token (the shared state's address) lets a thread that gave up take it
/// back out of the actor.
class down_signal : public caf::attachable {
public:
  explicit down_signal(std::shared_ptr<down_state> st) : st_(std::move(st)) {
  }

  void actor_exited(const caf::error& reason, caf::execution_unit*) override {
    std::lock_guard<std::mutex> guard{st_->mtx};
    st_->down = true;
    st_->reason = reason;
    st_->cv.notify_all();
  }

  bool matches(const token& what) override {
    return what.subtype == token::anonymous && what.ptr == st_.get();
  }

private:
  std::shared_ptr<down_state> st_;
};

} // namespace

caf::error await_ticket(std::future<caf::error>& answer, std::optional<millis> bound) {
  if (bound && answer.wait_for(*bound) != std::future_status::ready)
    return caf::make_error(caf::sec::request_timeout);
  try {
    return answer.get();
  } catch (const std::future_error&) { // broken: dropped unanswered
    return caf::make_error(caf::sec::request_receiver_down);
  }
}

bool await_down(const caf::actor& who, std::optional<millis> timeout,
                caf::error* reason) {
  auto st = std::make_shared<down_state>();
  // Attaching to an actor that is already down calls `actor_exited` at once.
  auto target = caf::actor_cast<caf::abstract_actor*>(who);
  target->attach(caf::attachable_ptr{new down_signal(st)});
  std::unique_lock<std::mutex> guard{st->mtx};
  auto is_down = [&] { return st->down; };
  if (timeout) {
    if (!st->cv.wait_for(guard, *timeout, is_down)) {
      guard.unlock();
      // Given up on: the signal would stay in `who` for as long as it lives.
      target->detach(caf::attachable::token{caf::attachable::token::anonymous, st.get()});
      return false;
    }
  } else {
    st->cv.wait(guard, is_down);
  }
  if (reason)
    *reason = st->reason;
  return true;
}

} // namespace canopy::core
