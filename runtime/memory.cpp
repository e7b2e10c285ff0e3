#include "runtime/memory.hpp"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace canopy {

void fix_malloc_thresholds() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr)
      return;
    if (auto t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "mmap_threshold"))
      return;
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  });
}

} // namespace canopy
