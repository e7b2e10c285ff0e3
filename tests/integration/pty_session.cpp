#include "tests/integration/pty_session.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace canopy::core::test {

// -- screen_model ----------------------------------------------------------------------------

screen_model::screen_model(size_t rows, size_t cols)
  : rows_(rows), cols_(cols), cells_(rows, std::vector<std::string>(cols, " ")) {
}

void screen_model::feed(const std::string& bytes) {
  auto data = partial_ + bytes;
  partial_.clear();
  size_t i = 0;
  while (i < data.size()) {
    auto c = static_cast<unsigned char>(data[i]);
    if (c == 0x1B) {
      if (i + 1 >= data.size())
        break; // cut: completed by the next feed
      if (data[i + 1] != '[') {
        unknown_.push_back("ESC " + std::string(1, data[i + 1]));
        i += 2;
        continue;
      }
      size_t j = i + 2;
      while (j < data.size() && static_cast<unsigned char>(data[j]) >= 0x20
             && static_cast<unsigned char>(data[j]) <= 0x3F)
        ++j;
      if (j >= data.size())
        break;
      csi(data.substr(i + 2, j - i - 2), data[j]);
      i = j + 1;
      continue;
    }
    if (c == '\r') {
      col_ = 0;
      wrap_pending_ = false;
      ++i;
      continue;
    }
    if (c == '\n') {
      wrap_pending_ = false;
      line_feed();
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      unknown_.push_back("control " + std::to_string(c));
      ++i;
      continue;
    }
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + len > data.size())
      break;
    put(data.substr(i, len));
    i += len;
  }
  partial_ = data.substr(i);
}

void screen_model::put(const std::string& glyph) {
  if (wrap_pending_) {
    wrap_pending_ = false;
    col_ = 0;
    line_feed();
  }
  cells_[row_][col_] = glyph;
  if (col_ + 1 == cols_)
    wrap_pending_ = true;
  else
    ++col_;
}

void screen_model::line_feed() {
  if (row_ + 1 < rows_) {
    ++row_;
    return;
  }
  std::string top;
  for (auto& cell : cells_.front())
    top += cell;
  while (!top.empty() && top.back() == ' ')
    top.pop_back();
  scrollback_.push_back(std::move(top));
  cells_.erase(cells_.begin());
  cells_.emplace_back(cols_, " ");
}

void screen_model::csi(const std::string& params, char final) {
  bool none = params.empty() || params == "0";
  if (final == 'm')
    return;
  if (final == 'F' && params.find_first_not_of("0123456789") == std::string::npos) {
    size_t n = params.empty() ? 1 : std::max<size_t>(std::stoul(params), 1);
    row_ = row_ >= n ? row_ - n : 0;
    col_ = 0;
    wrap_pending_ = false;
    ++cursor_ups_;
    return;
  }
  if (final == 'J' && none) {
    for (size_t c = col_; c < cols_; ++c)
      cells_[row_][c] = " ";
    for (size_t r = row_ + 1; r < rows_; ++r)
      cells_[r].assign(cols_, " ");
    scrolled_at_erase_ = scrollback_.size();
    return;
  }
  if (final == 'K' && none) {
    for (size_t c = col_; c < cols_; ++c)
      cells_[row_][c] = " ";
    return;
  }
  unknown_.push_back("CSI " + params + final);
}

std::vector<std::string> screen_model::lines() const {
  std::vector<std::string> out;
  for (auto& row : cells_) {
    std::string line;
    for (auto& cell : row)
      line += cell;
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out.push_back(std::move(line));
  }
  return out;
}

std::vector<std::string> screen_model::transcript() const {
  auto out = scrollback_;
  for (auto& l : lines())
    out.push_back(l);
  return out;
}

// -- pty_session -----------------------------------------------------------------------------

pty_session::pty_session(const std::vector<std::string>& argv, unsigned short rows,
                         unsigned short cols, const std::map<std::string, std::string>& env)
  : screen_(rows, cols) {
  // Everything the child needs is made before fork: after it, in a process
  // with threads, the child calls only async-signal-safe functions.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (env.count(kv.substr(0, kv.find('='))) == 0)
      env_strings.push_back(kv);
  }
  for (auto& kv : env)
    env_strings.push_back(kv.first + "=" + kv.second);
  std::vector<char*> args, envp;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env_strings)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  pid_ = ::forkpty(&master_, nullptr, nullptr, &ws);
  if (pid_ < 0)
    throw std::runtime_error(std::string{"forkpty: "} + std::strerror(errno));
  if (pid_ == 0) {
    // A new session led by the child, the pty its controlling terminal and
    // it the terminal's foreground process group (forkpty's login_tty).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
      ::sigaction(sig, &dfl, nullptr);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::fcntl(master_, F_SETFD, FD_CLOEXEC);
  reader_ = std::thread([this] { read_loop(); });
}

pty_session::~pty_session() {
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    std::lock_guard<std::mutex> lock{mtx_};
    reaped_ = true;
  }
  {
    std::lock_guard<std::mutex> lock{mtx_};
    stop_ = true;
  }
  reader_.join();
  ::close(master_);
}

void pty_session::read_loop() {
  char buf[4096];
  for (;;) {
    pollfd p{master_, POLLIN, 0};
    int r = ::poll(&p, 1, 20);
    {
      std::lock_guard<std::mutex> lock{mtx_};
      // Once the program is reaped, what it wrote is already buffered: a
      // quiet pty then means everything was read.
      if (stop_ || (r == 0 && reaped_)) {
        eof_ = true;
        changed_.notify_all();
        return;
      }
    }
    if (r <= 0)
      continue;
    auto n = ::read(master_, buf, sizeof(buf));
    std::lock_guard<std::mutex> lock{mtx_};
    if (n <= 0) { // EIO: no process holds the terminal any more
      eof_ = true;
      changed_.notify_all();
      return;
    }
    output_.append(buf, static_cast<size_t>(n));
    screen_.feed(std::string(buf, static_cast<size_t>(n)));
    changed_.notify_all();
  }
}

void pty_session::send(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::write(master_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw std::runtime_error(std::string{"write to the pty: "} + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

std::string pty_session::output() const {
  std::lock_guard<std::mutex> lock{mtx_};
  return output_;
}

bool pty_session::wait_for(
  const std::function<bool(const std::string&, const screen_model&)>& pred,
  std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock{mtx_};
  return changed_.wait_for(lock, timeout, [&] { return pred(output_, screen_) || eof_; })
         && pred(output_, screen_);
}

bool pty_session::wait_for_text(const std::string& text, std::chrono::milliseconds timeout) {
  return wait_for(
    [&](const std::string& out, const screen_model&) {
      return out.find(text) != std::string::npos;
    },
    timeout);
}

void pty_session::with_screen(const std::function<void(const screen_model&)>& f) const {
  std::lock_guard<std::mutex> lock{mtx_};
  f(screen_);
}

bool pty_session::wait_exit(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    int status = 0;
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::lock_guard<std::mutex> lock{mtx_};
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    // Polls the child's state: there is no wait with a deadline for it.
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  std::unique_lock<std::mutex> lock{mtx_};
  return changed_.wait_until(lock, deadline, [&] { return eof_; });
}

} // namespace canopy::core::test
