// Reading the regular files that hold outside text (persistence/json_text.hpp).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"

namespace canopy::core {

// -- files ---------------------------------------------------------------------

caf::expected<std::string> read_regular_file(const std::string& path, size_t max_bytes,
                                             const char* what) {
  auto fail = [&](const std::string& why) {
    return make_error(persistence_errc::io_error,
                      std::string{"cannot read "} + what + " '" + path + "': " + why);
  };
  auto not_regular = [&](mode_t mode) {
    const char* kind = S_ISFIFO(mode)   ? "a FIFO"
                       : S_ISDIR(mode)  ? "a folder"
                       : S_ISCHR(mode)  ? "a character device"
                       : S_ISBLK(mode)  ? "a block device"
                       : S_ISSOCK(mode) ? "a socket"
                                        : "not a file";
    return fail(std::string{"not a regular file ("} + kind + ")");
  };
  // stat first: opening a FIFO would wait for a writer, a device may block.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return not_regular(st.st_mode);
  // Non-blocking, in case the path became something else since.
  int fd = ::open(path.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(std::strerror(errno));
  auto too_large = [&] {
    ::close(fd);
    return make_error(persistence_errc::invalid_graph,
                      std::string{what} + " '" + path + "' is larger than "
                        + std::to_string(max_bytes >> 20) + " MiB");
  };
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return not_regular(st.st_mode);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return too_large();
  std::string result;
  char chunk[64 * 1024];
  for (;;) {
    auto n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      auto err = errno;
      ::close(fd);
      return fail(std::strerror(err));
    }
    if (n == 0)
      break;
    result.append(chunk, static_cast<size_t>(n));
    if (result.size() > max_bytes)
      return too_large();
  }
  ::close(fd);
  return result;
}

} // namespace canopy::core
