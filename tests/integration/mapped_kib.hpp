#pragma once

// How much of a file this process has in its RSS through its mappings: the
// store's tests and `bench_stop` both read it for the store's `data.mdb`.

#include <cstdlib>
#include <fstream>
#include <string>

namespace canopy::core::test {

/// KiB of the file whose path ends with `file` that this process has in its
/// RSS through its mappings (the `Rss:` lines of /proc/self/smaps). Reads the
/// whole smaps: not for a hot loop.
inline long mapped_kib(const std::string& file) {
  std::ifstream in{"/proc/self/smaps"};
  std::string line;
  bool ours = false;
  long total = 0;
  while (std::getline(in, line)) {
    auto first_space = line.find(' ');
    // A mapping's first line: "start-end perms offset dev inode [path]".
    if (first_space != std::string::npos && line.find('-') < first_space
        && line.find(':') > first_space)
      ours = line.size() >= file.size()
             && line.compare(line.size() - file.size(), file.size(), file) == 0;
    else if (ours && line.rfind("Rss:", 0) == 0)
      total += std::atol(line.c_str() + 4);
  }
  return total;
}

} // namespace canopy::core::test
