#pragma once

// Helpers shared by the subprocess's source files (subprocess.cpp,
// subprocess_spawn.cpp, subprocess_output.cpp). Internal: not installed.

#include <unistd.h>

namespace canopy::core::subprocess_detail {

/// Closes `fd` (if open) and sets it to -1.
inline void close_fd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

} // namespace canopy::core::subprocess_detail
