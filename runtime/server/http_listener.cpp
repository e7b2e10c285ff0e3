#include "runtime/server/http_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <utility>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

namespace canopy::core {

namespace {

using clock_type = std::chrono::steady_clock;

// -- thread pool ------------------------------------------------------------------

/// A task queue that starts a thread whenever a job finds no idle one, up to
/// `max_threads`; a thread idle for `idle_exit` ends unless it is one of the
/// `warm` ones, started with the pool. shutdown() runs the queued jobs, then
/// waits for every thread.
class elastic_pool : public httplib::TaskQueue {
public:
  elastic_pool(size_t max_threads, size_t warm, size_t stack_bytes)
    : max_threads_(max_threads), warm_(std::min(warm, max_threads)), stack_bytes_(stack_bytes) {
    std::lock_guard<std::mutex> guard{mtx_};
    for (size_t i = 0; i < warm_ && start_thread(); ++i)
      ++threads_;
  }

  ~elastic_pool() override {
    shutdown();
  }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock{mtx_};
    jobs_.push_back(std::move(fn));
    if (idle_ >= jobs_.size() || threads_ >= max_threads_) {
      lock.unlock();
      cv_.notify_one();
      return;
    }
    ++threads_;
    lock.unlock();
    if (!start_thread()) {
      // No thread could start (out of memory or threads): the job waits for
      // a running one; with none at all it runs here, as httplib's accept
      // loop would otherwise never serve it.
      lock.lock();
      --threads_;
      bool none = threads_ == 0;
      lock.unlock();
      if (none)
        run_queued();
    }
  }

  void shutdown() override {
    std::unique_lock<std::mutex> lock{mtx_};
    closing_ = true;
    cv_.notify_all();
    done_.wait(lock, [this] { return threads_ == 0; });
  }

private:
  static constexpr auto idle_exit = std::chrono::seconds{5};

  bool start_thread() {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_bytes_);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t tid;
    int rc = pthread_create(
      &tid, &attr,
      [](void* self) -> void* {
        static_cast<elastic_pool*>(self)->work();
        return nullptr;
      },
      this);
    pthread_attr_destroy(&attr);
    if (rc != 0)
      spdlog::warn("event=http.thread error=\"{}\"", std::strerror(rc));
    return rc == 0;
  }

  /// Runs the jobs queued now (the fallback when no thread starts).
  void run_queued() {
    std::unique_lock<std::mutex> lock{mtx_};
    while (!jobs_.empty()) {
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  void work() {
    pthread_setname_np(pthread_self(), "canopy-http"); // what ps, top and gdb show
    std::unique_lock<std::mutex> lock{mtx_};
    for (;;) {
      ++idle_;
      bool woke = cv_.wait_for(lock, idle_exit, [this] { return !jobs_.empty() || closing_; });
      --idle_;
      if (jobs_.empty() && (closing_ || (!woke && threads_ > warm_)))
        break;
      if (jobs_.empty())
        continue;
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      fn = nullptr;
      lock.lock();
    }
    if (--threads_ == 0)
      done_.notify_all();
  }

  const size_t max_threads_;
  const size_t warm_;
  const size_t stack_bytes_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::condition_variable done_;
  std::deque<std::function<void()>> jobs_;
  size_t threads_ = 0;
  size_t idle_ = 0;
  bool closing_ = false;
};

// -- socket stream ----------------------------------------------------------------

/// The numeric address and port of a socket address.
void address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf));
    port = ntohs(a.sin6_port);
  }
  ip = buf;
}

/// Waits up to `ms` for `events` on `sock`. @returns poll's result.
int wait_for(int sock, short events, long ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, static_cast<int>(std::max(ms, 0L)));
    if (rc < 0 && errno == EINTR)
      continue;
    return rc;
  }
}

/// A connection's stream for httplib's request parser. Reads are buffered
/// and end (return -1) at the request's deadlines: the header deadline until
/// the blank line after the headers has been consumed (or past
/// `max_header_bytes`), then the request deadline. With an OpenSSL session
/// (on a non-blocking socket) the bytes go through it.
class deadline_stream : public httplib::Stream {
public:
  /// Reads of `sock` end when `server_sock` (the listening socket) becomes
  /// INVALID_SOCKET, as httplib's stop() makes it. `ssl`: the connection's
  /// TLS session after its handshake, or null.
  deadline_stream(int sock, SSL* ssl, const std::atomic<socket_t>& server_sock,
                  const http_limits& limits, std::chrono::milliseconds read_timeout,
                  std::chrono::milliseconds write_timeout)
    : sock_(sock),
      ssl_(ssl),
      server_sock_(server_sock),
      limits_(limits),
      read_timeout_(read_timeout),
      write_timeout_(write_timeout) {
  }

  /// True when bytes of a next request are buffered already (here or in
  /// the TLS session), so that no poll of the socket would announce them.
  bool buffered() const {
    return off_ < size_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  }

  /// True once a read failed for a deadline, the read timeout or the header
  /// budget: the connection is not used for another request.
  bool expired() const {
    return expired_;
  }

  /// Starts the deadlines of the next request.
  void begin_request() {
    auto now = clock_type::now();
    header_end_ = now + limits_.header_deadline;
    request_end_ = now + limits_.request_deadline;
    in_headers_ = true;
    header_bytes_ = 0;
    tail_ = 0;
  }

  /// Waits for bytes up to the read timeout and the current deadline, in
  /// slices of 100 ms so that a stopping server is noticed.
  bool is_readable() const override {
    return buffered() || await(POLLIN, read_end());
  }

  bool is_writable() const override {
    if (wait_for(sock_, POLLOUT, write_timeout_.count()) <= 0)
      return false;
    // Alive: nothing to read, or data rather than the end of the stream.
    if (wait_for(sock_, POLLIN, 0) <= 0)
      return true;
    char byte;
    return ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (in_headers_ && header_bytes_ >= limits_.max_header_bytes) {
      expired_ = true;
      return -1;
    }
    if (off_ >= size_) {
      if (!is_readable())
        return -1;
      ssize_t n = receive(buf_.data(), buf_.size());
      if (n <= 0)
        return n;
      off_ = 0;
      size_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, size_ - off_);
    if (in_headers_) {
      n = std::min(n, limits_.max_header_bytes - header_bytes_);
      consume_header_bytes(buf_.data() + off_, n);
    }
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable())
      return -1;
    if (ssl_ != nullptr)
      return size == 0 ? 0 : tls_io(clock_type::now() + write_timeout_, [&] {
        return SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
      });
    ssize_t n;
    do
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  /// The peer's address and port: asked of the socket once per connection
  /// (httplib asks for every request).
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    answer(remote_, ::getpeername, ip, port);
  }

  /// This end's address and port, asked once per connection as above.
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    answer(local_, ::getsockname, ip, port);
  }

  socket_t socket() const override {
    return sock_;
  }

private:
  /// An end of the connection, once asked.
  struct endpoint {
    bool known = false;
    std::string ip;
    int port = 0;
  };

  /// Fills `ip` and `port` from `e`, asking `query` (getpeername or
  /// getsockname) the first time.
  void answer(endpoint& e, int (*query)(int, sockaddr*, socklen_t*), std::string& ip,
              int& port) const {
    if (!e.known) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      if (query(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        address_of(addr, e.ip, e.port);
      e.known = true;
    }
    ip = e.ip;
    port = e.port;
  }

  /// The end of the current read: the request's deadline, or the read
  /// timeout when it comes first.
  clock_type::time_point read_end() const {
    return std::min(in_headers_ ? header_end_ : request_end_, clock_type::now() + read_timeout_);
  }

  /// Waits until the socket has `events` or `end` passed, in slices of
  /// 100 ms so that a stopping server is noticed. @returns false on the
  /// deadline (marking the stream expired) or a poll error.
  bool await(short events, clock_type::time_point end) const {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now());
      if (left.count() <= 0 || server_sock_ == INVALID_SOCKET) {
        expired_ = true;
        return false;
      }
      int rc = wait_for(sock_, events, std::min(left.count(), 100L));
      if (rc != 0)
        return rc > 0;
    }
  }

  /// One read into `buf`: from the socket, or decrypted by the TLS session
  /// (waiting for the rest of a record until the read's end). @returns the
  /// bytes, 0 at the end of the stream, -1 on an error or a deadline.
  ssize_t receive(char* buf, size_t size) {
    if (ssl_ != nullptr)
      return tls_io(read_end(), [&] { return SSL_read(ssl_, buf, static_cast<int>(size)); });
    ssize_t n;
    do
      n = ::recv(sock_, buf, size, 0);
    while (n < 0 && errno == EINTR);
    return n;
  }

  /// Runs `op` (SSL_read or SSL_write) until it moves bytes, waiting for
  /// the socket as OpenSSL asks, until `end`. @returns op's count, 0 when
  /// the peer closed the session, -1 on an error or the deadline.
  template <class Op>
  ssize_t tls_io(clock_type::time_point end, Op op) {
    for (;;) {
      ERR_clear_error(); // SSL_get_error reads this thread's queue
      int n = op();
      if (n > 0)
        return n;
      switch (SSL_get_error(ssl_, n)) {
        case SSL_ERROR_WANT_READ:
          if (!await(POLLIN, end))
            return -1;
          continue;
        case SSL_ERROR_WANT_WRITE:
          if (!await(POLLOUT, end))
            return -1;
          continue;
        case SSL_ERROR_ZERO_RETURN:
          return 0;
        default:
          ERR_clear_error();
          return -1;
      }
    }
  }

  /// Counts header bytes handed to the parser and notices the blank line
  /// (CRLF CRLF) that ends them.
  void consume_header_bytes(const char* p, size_t n) {
    for (size_t i = 0; i < n && in_headers_; ++i) {
      ++header_bytes_;
      char c = p[i];
      tail_ = (c == '\r' && (tail_ == 0 || tail_ == 2))   ? tail_ + 1
              : (c == '\n' && (tail_ == 1 || tail_ == 3)) ? tail_ + 1
              : c == '\r'                                 ? 1
                                                          : 0;
      if (tail_ == 4)
        in_headers_ = false;
    }
  }

  int sock_;
  SSL* ssl_;
  mutable endpoint remote_;
  mutable endpoint local_;
  const std::atomic<socket_t>& server_sock_;
  const http_limits& limits_;
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
  std::array<char, 4096> buf_{};
  size_t off_ = 0;
  size_t size_ = 0;
  clock_type::time_point header_end_;
  clock_type::time_point request_end_;
  bool in_headers_ = true;
  size_t header_bytes_ = 0;
  int tail_ = 0; ///< how much of "\r\n\r\n" the last bytes matched
  mutable bool expired_ = false;
};

/// The OpenSSL session of one connection; end() it before closing the socket.
struct tls_session {
  SSL* ssl = nullptr;
  tls_session() = default;
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;
  ~tls_session() { end(false); }

  /// Frees the session; with `notify`, after sending close_notify (without
  /// waiting for the peer's: the socket closes next).
  void end(bool notify) {
    if (ssl == nullptr)
      return;
    ERR_clear_error();
    if (notify)
      SSL_shutdown(ssl);
    SSL_free(std::exchange(ssl, nullptr));
    ERR_clear_error();
  }
};

/// Runs the server side of the TLS handshake on `sock` (made non-blocking)
/// until `end`, or until the listening socket closes. @returns false when
/// it failed or ran out of time.
bool accept_tls(SSL* ssl, int sock, clock_type::time_point end,
                const std::atomic<socket_t>& server_sock) {
  ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL, 0) | O_NONBLOCK);
  if (SSL_set_fd(ssl, sock) != 1)
    return false;
  for (;;) {
    ERR_clear_error();
    int rc = SSL_accept(ssl);
    if (rc == 1)
      return true;
    int err = SSL_get_error(ssl, rc);
    short events = err == SSL_ERROR_WANT_READ ? POLLIN : err == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (events == 0) {
      ERR_clear_error();
      return false;
    }
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now());
      if (left.count() <= 0 || server_sock == INVALID_SOCKET)
        return false;
      int ready = wait_for(sock, events, std::min(left.count(), 100L));
      if (ready < 0)
        return false;
      if (ready > 0)
        break;
    }
  }
}

bool is_loopback_exempt(const std::string& address) {
  return address == "127.0.0.1" || address == "::1" || address == "::ffff:127.0.0.1";
}

} // namespace

// -- listener ---------------------------------------------------------------------

http_listener::http_listener(http_limits limits, tls_server_context tls)
  : limits_(limits), tls_(std::move(tls)) {
  new_task_queue = [this] { return new elastic_pool(limits_.max_threads, limits_.warm_threads,
                                                      limits_.stack_bytes); };
  set_keep_alive_max_count(limits_.keep_alive_requests);
}

int http_listener::bind(const std::string& host, int port) {
  int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound >= 0)
    ::listen(svr_sock_, SOMAXCONN);
  return bound;
}

bool http_listener::admit(const std::string& address) {
  if (is_loopback_exempt(address))
    return true;
  std::lock_guard<std::mutex> guard{mtx_};
  auto& n = open_[address]; // never 0 once past the check: per_address >= 1
  if (n >= limits_.per_address)
    return false;
  ++n;
  return true;
}

void http_listener::release(const std::string& address) {
  if (is_loopback_exempt(address))
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto i = open_.find(address); i != open_.end() && --i->second == 0)
    open_.erase(i);
}

bool http_listener::process_and_close_socket(socket_t sock) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  using std::chrono::microseconds;
  auto read_timeout = std::chrono::duration_cast<milliseconds>(seconds{read_timeout_sec_}
                                                               + microseconds{read_timeout_usec_});
  auto write_timeout = std::chrono::duration_cast<milliseconds>(
    seconds{write_timeout_sec_} + microseconds{write_timeout_usec_});
  int on = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  tls_session session;
  if (tls_) {
    session.ssl = SSL_new(tls_.get());
    if (session.ssl == nullptr
        || !accept_tls(session.ssl, sock, clock_type::now() + limits_.header_deadline,
                       svr_sock_)) {
      // Not TLS, too slow, or no common protocol: nothing to answer.
      spdlog::debug("event=http.tls_handshake error=failed");
      session.end(false);
      ::close(sock);
      return false;
    }
  }
  deadline_stream strm{sock, session.ssl, svr_sock_, limits_, read_timeout, write_timeout};
  std::string address;
  int port = 0;
  strm.get_remote_ip_and_port(address, port);
  bool ret = false;
  if (!admit(address)) {
    static const std::string body
      = "{\"error\":{\"code\":\"too_many_connections\",\"message\":\"too many open "
        "connections from this address\",\"path\":\"\"}}\n";
    static const std::string busy
      = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: "
        "application/json\r\nContent-Length: "
        + std::to_string(body.size()) + "\r\n\r\n" + body;
    strm.write(busy.data(), busy.size());
  } else {
    // Keep-alive: up to keep_alive_max_count_ requests, each one announced
    // by readable bytes within limits_.keep_alive.
    auto idle_end = clock_type::now() + limits_.keep_alive;
    for (size_t count = keep_alive_max_count_; count > 0 && svr_sock_ != INVALID_SOCKET;) {
      auto left = std::chrono::duration_cast<milliseconds>(idle_end - clock_type::now());
      if (left.count() <= 0)
        break;
      // In slices, so that stop() is noticed; bytes already buffered (a
      // pipelined request, a TLS record holding it) need no wait.
      int rc = strm.buffered() ? 1 : wait_for(sock, POLLIN, std::min(left.count(), 100L));
      if (rc < 0)
        break;
      if (rc == 0)
        continue;
      strm.begin_request();
      bool closed = false;
      ret = process_request(strm, count == 1, closed, nullptr);
      if (!ret || closed || strm.expired())
        break;
      --count;
      idle_end = clock_type::now() + limits_.keep_alive;
    }
    release(address);
  }
  session.end(!strm.expired());
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

} // namespace canopy::core
