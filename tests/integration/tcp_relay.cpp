#include "tests/integration/tcp_relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <vector>

namespace canopy::core::test {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

} // namespace

tcp_relay::tcp_relay(int target_port) : target_port_(target_port) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto a = loopback(0);
  socklen_t len = sizeof(a);
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
      || ::listen(listener_, 16) != 0
      || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0
      || ::pipe2(wake_, O_CLOEXEC) != 0)
    throw std::runtime_error("tcp_relay: cannot listen on 127.0.0.1");
  port_ = ntohs(a.sin_port);
  thread_ = std::thread{[this] { loop(); }};
}

tcp_relay::~tcp_relay() {
  char c = 0;
  if (::write(wake_[1], &c, 1) < 0) {
    // The loop ends at its next wake-up anyway.
  }
  thread_.join();
  ::close(listener_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::string tcp_relay::captured() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return captured_;
}

size_t tcp_relay::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return captured_.size();
}

void tcp_relay::loop() {
  // Pairs of sockets: fds[2k] (accepted) <-> fds[2k+1] (to the target); -1
  // once closed.
  std::vector<int> fds;
  for (;;) {
    std::vector<pollfd> p{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (int fd : fds)
      p.push_back({fd, static_cast<short>(fd >= 0 ? POLLIN : 0), 0});
    if (::poll(p.data(), p.size(), -1) < 0)
      continue;
    if (p[0].revents != 0)
      break;
    if (p[1].revents & POLLIN) {
      int in = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (in >= 0) {
        int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        auto a = loopback(target_port_);
        if (out >= 0 && ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
          fds.push_back(in);
          fds.push_back(out);
        } else {
          ::close(in);
          if (out >= 0)
            ::close(out);
        }
      }
    }
    // Only the sockets that were polled: a pair accepted just now has no
    // entry in `p` (reading p[i + 2] for it was out of bounds).
    for (size_t i = 0; i + 2 < p.size(); ++i) {
      if (fds[i] < 0 || p[i + 2].revents == 0)
        continue;
      size_t peer = i ^ 1;
      char buf[16 * 1024];
      auto n = ::read(fds[i], buf, sizeof(buf));
      if (n > 0 && fds[peer] >= 0) {
        {
          std::lock_guard<std::mutex> guard{mtx_};
          captured_.append(buf, static_cast<size_t>(n));
        }
        for (ssize_t done = 0; done < n;) {
          auto w = ::write(fds[peer], buf + done, static_cast<size_t>(n - done));
          if (w <= 0)
            break;
          done += w;
        }
        continue;
      }
      // Closed (or failed): close both sides of the pair.
      for (auto j : {i, peer})
        if (fds[j] >= 0) {
          ::close(fds[j]);
          fds[j] = -1;
        }
    }
  }
  for (int fd : fds)
    if (fd >= 0)
      ::close(fd);
}

} // namespace canopy::core::test
