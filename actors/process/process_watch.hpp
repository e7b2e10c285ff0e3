#pragma once

// The process watch: wakes an actor when its subprocess needs a poll (output
// to read, stdin to feed, or the leader exited), so that a runner does not
// poll a quiet process on a timer. One thread per process runs an epoll set
// over every watched subprocess's pipes and a pidfd of its leader; a ready
// descriptor sends `poll_atom` to the actor that watches it, once per arm.
//
// Guarantees and limits:
// - The actor is woken at most once until `rearm`, however many descriptors
//   became ready; a descriptor that is ready when re-armed wakes it again at
//   once (no lost wakeups). No wake is sent once `stop` has returned.
// - Only descriptors the subprocess still holds are re-armed or withdrawn:
//   one it closed (its number may belong to another subprocess by then) is
//   forgotten, never touched.
// - Without epoll or pidfd (a kernel before 5.3), `start` answers false and
//   the caller polls on a timer as before.
//
// Threading: a `process_watch` belongs to one actor and is used from its
// handlers only; the shared epoll thread is started lazily and lives until
// the process ends.

#include <array>
#include <cstdint>

#include <caf/actor_addr.hpp>

namespace canopy::core {

class subprocess;

/// Wakes the actor that owns it when `proc` needs a poll. Neither copyable
/// nor movable: it holds the address of the subprocess it watches, which
/// must outlive it (declare it after the subprocess in the same state).
class process_watch {
public:
  process_watch() = default;
  process_watch(const process_watch&) = delete;
  process_watch& operator=(const process_watch&) = delete;
  ~process_watch();

  /// Watches `proc` (started, not yet reaped) for `who`, armed.
  /// @returns false when this host cannot watch (no epoll, no pidfd, out of
  ///          descriptors): nothing is watched, the caller polls on a timer.
  bool start(caf::actor_addr who, const subprocess& proc);

  /// Arms every descriptor `proc` still holds for one more wake-up. Call
  /// after each poll that left the process running.
  void rearm();

  /// Stops watching; idempotent. Call before the subprocess closes the
  /// descriptors it still holds (the destructor does it too).
  void stop();

  /// True between a successful `start` and `stop`.
  bool active() const { return token_ != 0; }

private:
  /// The descriptors of `proc_` now: stdout, stderr, stdin (-1: closed).
  std::array<int, 3> current() const;

  uint64_t token_ = 0;
  int pid_fd_ = -1;
  const subprocess* proc_ = nullptr;
  std::array<int, 3> fds_{{-1, -1, -1}}; ///< as registered: stdout, stderr, stdin
};

} // namespace canopy::core
