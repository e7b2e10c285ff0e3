#include "runtime/node/secrets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/node/error.hpp"

namespace canopy::core {

namespace {

// -- helpers -------------------------------------------------------------------

caf::error invalid(std::string why) {
  return make_error(runtime_errc::invalid_input, std::move(why));
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

/// Closes a file descriptor on scope exit.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

// -- checks --------------------------------------------------------------------

std::string token_problem(const std::string& token) {
  if (token.empty())
    return "the token is empty";
  if (token.size() > max_token_bytes)
    return "the token is longer than " + std::to_string(max_token_bytes) + " bytes";
  for (auto c : token) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      return "the token holds a control character or a line break (only trailing line "
             "breaks of a token file are trimmed)";
  }
  if (token.front() == ' ' || token.back() == ' ')
    return "the token starts or ends with a blank";
  return {};
}

// -- sources -------------------------------------------------------------------

caf::expected<std::string> read_token_file(const std::string& path) {
  auto where = "token file '" + path + "'";
  // O_NONBLOCK: opening a FIFO returns at once (and fstat refuses it).
  fd_guard f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (f.fd < 0)
    return invalid("cannot read " + where + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    return invalid("cannot read " + where + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return invalid(where + " is not a regular file");
  if ((st.st_mode & (S_IRWXO | S_IWGRP)) != 0)
    return invalid(where + " has mode " + octal_mode(st.st_mode)
                   + ": other users may read or change it; make it private to the server's "
                     "user (chmod 600) or its group read-only (chmod 640)");
  if (st.st_size > static_cast<off_t>(max_token_bytes + 2))
    return invalid(where + " is larger than " + std::to_string(max_token_bytes)
                   + " bytes: it must hold one token");
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    auto n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return invalid("cannot read " + where + ": " + std::strerror(errno));
    if (n == 0)
      break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  if (auto why = token_problem(text); !why.empty())
    return invalid(where + ": " + why);
  return text;
}

caf::expected<std::string> read_token_env(const std::string& name) {
  bool valid = !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) == 0;
  for (auto c : name)
    valid = valid && (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_');
  if (!valid)
    return invalid("'" + name + "' is no environment variable name (letters, digits and _, "
                   "not starting with a digit)");
  auto value = std::getenv(name.c_str());
  if (value == nullptr)
    return invalid("the environment variable " + name + " is not set");
  std::string token{value};
  if (token.empty())
    return invalid("the environment variable " + name + " is empty");
  if (auto why = token_problem(token); !why.empty())
    return invalid("the environment variable " + name + ": " + why);
  return token;
}

} // namespace canopy::core
