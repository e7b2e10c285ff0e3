#pragma once

// A TCP relay for tests that must see what crosses a connection: it listens
// on 127.0.0.1 (an ephemeral port), forwards every connection to a target
// port on 127.0.0.1 and records every byte it forwards, both directions,
// the way a capture of the target port would show them.

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace canopy::core::test {

/// Forwards connections from port() to `target_port`; records the traffic.
/// The destructor closes every connection. Not copyable; its members may be
/// called from any thread.
class tcp_relay {
public:
  explicit tcp_relay(int target_port);
  ~tcp_relay();
  tcp_relay(const tcp_relay&) = delete;
  tcp_relay& operator=(const tcp_relay&) = delete;

  /// The port it listens on (127.0.0.1).
  int port() const { return port_; }

  /// Every byte forwarded so far, both directions, in arrival order.
  std::string captured() const;

  /// Bytes forwarded so far (both directions).
  size_t size() const;

private:
  void loop();

  int target_port_;
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1}; ///< a pipe that ends the loop
  mutable std::mutex mtx_;
  std::string captured_;
  std::thread thread_;
};

} // namespace canopy::core::test
