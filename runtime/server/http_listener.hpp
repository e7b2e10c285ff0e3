#pragma once

// The HTTP server's connection model: httplib's request parsing and response
// writing, with the connection handling replaced so that slow or numerous
// clients cannot starve the others.
//
// - One thread per open connection, started on demand, up to `max_threads`;
//   idle threads end after a few seconds, except `warm_threads` that start
//   with the listener and stay, so that a request after a long idle does not
//   pay for a thread's start (its stack and allocator cache faulted in, a
//   few milliseconds on a busy machine). Connections beyond the cap wait,
//   accepted, until a thread frees up.
// - Every request must arrive within deadlines that a trickle of bytes does
//   not extend: the request line and headers within `header_deadline` (and
//   at most `max_header_bytes`), the whole request within `request_deadline`,
//   each read within httplib's read timeout. A request that misses one is
//   answered 400 when its request line arrived, and its connection closes.
//   An idle kept-alive connection closes after `keep_alive`; a connection
//   serves up to `keep_alive_requests` requests (the last one says
//   `Connection: close`). Every accepted socket sets TCP_NODELAY: an answer
//   written in two parts (head, body) is not held back by Nagle's algorithm
//   waiting for the client's delayed ACK.
// - At most `per_address` connections at once from one client address;
//   127.0.0.1 and ::1 are exempt, so a local health check is never refused.
//   A connection over the cap is answered 503 at once and closed.
// - With a TLS context, every connection is HTTPS: the handshake must end
//   within `header_deadline`, and reads and writes keep the same deadlines
//   (the socket is non-blocking under OpenSSL, so a partial TLS record
//   cannot hold a thread past them).
//
// Threads keep an 8 MiB stack: httplib 0.11 parses the Range header (up to
// 8 KiB, before any handler runs) with a std::regex whose matching recurses
// per byte and needs several MiB of stack at that size
// (measured: runtime/docs/benchmarks.md#design-measurements).

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <httplib.h>

#include "runtime/server/http_tls.hpp"

namespace canopy::core {

/// Bounds of the connection model (see the file comment).
struct http_limits {
  size_t max_threads = 2048;
  size_t warm_threads = 4;
  size_t per_address = 128;
  size_t stack_bytes = size_t{8} << 20;
  std::chrono::milliseconds header_deadline{10000};
  std::chrono::milliseconds request_deadline{60000};
  std::chrono::milliseconds keep_alive{5000};
  size_t keep_alive_requests = 1000;
  size_t max_header_bytes = 128 * 1024;
};

/// An httplib::Server with the connection model above. Configure handlers
/// and timeouts as on httplib::Server; do not replace `new_task_queue`.
/// Thread-safe as httplib::Server is: stop() from any thread.
class http_listener : public httplib::Server {
public:
  /// With `tls` (not null) every connection speaks HTTPS.
  explicit http_listener(http_limits limits = {}, tls_server_context tls = nullptr);

  /// Binds `host:port` (port 0: a free port) and widens the queue of
  /// connections waiting for accept() to SOMAXCONN (httplib listens with a
  /// backlog of 5). @returns the bound port, or -1.
  int bind(const std::string& host, int port);

private:
  /// Serves one accepted connection: admission by address, then up to the
  /// keep-alive count of requests, each read within its deadlines.
  bool process_and_close_socket(socket_t sock) override;

  /// Takes a slot for `address`. @returns false when it is over the cap.
  bool admit(const std::string& address);
  void release(const std::string& address);

  http_limits limits_;
  tls_server_context tls_;
  mutable std::mutex mtx_;
  std::map<std::string, size_t> open_; ///< client address → open connections
};

} // namespace canopy::core
