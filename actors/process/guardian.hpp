#pragma once

// The guardian: a small child process that outlives nothing. Every process
// group a `subprocess` starts is registered with it; when this process dies,
// for any reason (SIGKILL included, and normal exit too), the guardian sees
// its end of a socket close and SIGKILLs every group still registered, so no
// host is left running orphaned steps. Plain C++, no CAF actors.
//
// Guarantees and limits:
// - A group registered, not yet unregistered, and still alive when this
//   process dies is SIGKILLed within milliseconds of the death (the time the
//   kernel takes to close the dead process's descriptors).
// - Not covered: a group started but not yet registered when this process
//   dies (the window between posix_spawn returning and the register call),
//   and any group when the guardian itself was killed or could not start
//   (steps run all the same; `guardian_running` says so).
// - The guardian is started lazily, by the first registration, with fork().
//   It holds no descriptor of this process except its socket (no pipes of
//   running steps, no store file, no stdout), lives in a process group of its
//   own (a signal to this process's group spares it), ignores SIGINT,
//   SIGTERM, SIGHUP, SIGQUIT and SIGPIPE, and is named `canopy-guard`.
// - A process forked from this one (without exec) does not share it: its
//   first registration starts a guardian of its own.
//
// Threading: every function may be called from any thread.

#include <sys/types.h>

#include <cstddef>

namespace canopy::core {

/// Registers process group `pgid` (> 1) with the guardian, starting the
/// guardian first if this process has none. @returns nothing; when the
/// guardian cannot be started or has died, the call does nothing (the group
/// is not protected) and `guardian_running` answers false. Blocks only while
/// the guardian's socket buffer is full. Threading: any thread.
void guard_process_group(pid_t pgid);

/// Forgets one registration of `pgid` (registered twice, it stays registered
/// once). Call it once the group is known to be empty, or once its members
/// were sent SIGKILL, and before the number can be reused by another group.
/// @returns nothing; does nothing for a group that was never registered or
/// when there is no guardian (it never starts one). Threading: any thread.
void unguard_process_group(pid_t pgid);

/// @returns the pid of this process's guardian (also once it died: see
/// `guardian_running`), or -1 when none was started (no registration yet, or
/// the start failed). Threading: any thread.
pid_t guardian_pid();

/// @returns true while this process has a guardian that accepted the last
/// record sent to it; false before the first registration, after a failed
/// start, and once a send found the guardian dead. Threading: any thread.
bool guardian_running();

/// @returns the number of registrations this process sent and has not yet
/// withdrawn (for tests: a finished subprocess must not stay registered).
/// Threading: any thread.
size_t guarded_group_count();

} // namespace canopy::core
