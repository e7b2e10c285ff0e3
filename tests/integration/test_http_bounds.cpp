// What an unauthenticated client can make `canopy serve` spend is bounded
//: route matching has constant stack whatever the path's length,
// slow clients cannot starve the others, and metric labels and log lines take
// request text only through closed sets and escapes; an Authorization header
// holding a control character is refused. Real servers on 127.0.0.1, raw
// sockets for requests no HTTP client would send.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/server/http_routes.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core;
using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

// -- helpers ----------------------------------------------------------------------

/// Runs `fn` on a thread with a stack of `bytes`. @returns false when the
/// thread could not start.
bool on_stack(size_t bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t tid;
  int rc = pthread_create(
    &tid, &attr,
    [](void* arg) -> void* {
      (*static_cast<std::function<void()>*>(arg))();
      return nullptr;
    },
    &fn);
  pthread_attr_destroy(&attr);
  if (rc != 0)
    return false;
  pthread_join(tid, nullptr);
  return true;
}

/// A TCP connection to 127.0.0.1:`port` from `source` (an address of the
/// loopback network). @returns the socket, or -1.
int connect_from(int port, const char* source = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0
      || ::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  for (size_t off = 0; off < bytes.size();) {
    auto n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

/// Reads until the peer closes or `timeout` passes.
std::string read_until_closed(int fd, std::chrono::milliseconds timeout = 10s) {
  std::string out;
  auto end = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return out;
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

/// Reads one HTTP answer: its head and a body of its Content-Length; stops
/// early when the peer closes or `timeout` passes.
std::string read_answer(int fd, std::chrono::milliseconds timeout = 10s) {
  std::string out;
  auto end = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto head = out.find("\r\n\r\n");
    if (head != std::string::npos) {
      size_t length = 0;
      auto at = out.find("Content-Length: ");
      if (at != std::string::npos && at < head)
        length = std::strtoul(out.c_str() + at + 16, nullptr, 10);
      if (out.size() >= head + 4 + length)
        return out;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return out;
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

/// Sends `bytes` on a new connection and reads the answer. @returns the
/// answer ("" when none came).
std::string exchange(int port, const std::string& bytes) {
  int fd = connect_from(port);
  if (fd < 0)
    return {};
  send_all(fd, bytes);
  auto out = read_answer(fd);
  ::close(fd);
  return out;
}

/// The status code of a raw HTTP answer; 0 when there is none.
int status_of(const std::string& answer) {
  if (answer.compare(0, 9, "HTTP/1.1 ") != 0 || answer.size() < 12)
    return 0;
  return std::atoi(answer.substr(9, 3).c_str());
}

/// The `canopy_http_requests_total` sample lines of a /metrics text.
std::vector<std::string> request_series(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, 27, "canopy_http_requests_total{") == 0)
      out.push_back(line.substr(0, line.rfind(' ')));
  return out;
}

/// The patterns of the API's routes (runtime/docs/reference/http.md).
const std::vector<std::pair<std::string, std::string>> api_routes{
  {"GET", "/healthz"},
  {"GET", "/metrics"},
  {"POST", "/v1/graphs"},
  {"GET", "/v1/graphs"},
  {"GET", "/v1/graphs/{id}"},
  {"POST", "/v1/graphs/{id}/executions"},
  {"POST", "/v1/graphs/{id}/stop"},
  {"GET", "/v1/executions"},
  {"GET", "/v1/executions/{id}"},
  {"GET", "/v1/executions/{id}/tree"},
  {"POST", "/v1/executions/{id}/stop"},
  {"GET", "/v1/agents/{name}"},
  {"POST", "/v1/agents/{name}/messages"},
};

route_table api_table() {
  route_table t;
  for (auto& [method, pattern] : api_routes)
    t.add(method, pattern);
  return t;
}

} // namespace

// -- route matching ---------------------------------------------------------------

TEST_CASE("the route table matches patterns segment by segment, HEAD as GET, and tells "
          "an unknown path from a known path with another method",
          "[runtime][http]") {
  auto t = api_table();
  auto m = t.match("POST", "/v1/executions/abc123/stop");
  REQUIRE(m);
  CHECK(t.pattern(m.index) == "/v1/executions/{id}/stop");
  CHECK(m.capture == "abc123");
  CHECK(t.match("HEAD", "/healthz"));
  CHECK(t.match("GET", "/v1/executions").capture.empty());
  auto wrong_method = t.match("PUT", "/v1/executions/abc");
  CHECK_FALSE(wrong_method);
  CHECK(wrong_method.path_known);
  for (auto path : {"/v1/graphs/", "/healthz/", "//healthz", "/v1//stop", "v1/graphs",
                    "", "/v1/executions/a/b/stop", "/v1/executions/abc/stop/"}) {
    INFO(path);
    auto x = t.match("GET", path);
    CHECK_FALSE(x);
    CHECK(t.label("GET", path) == "unknown");
  }
  CHECK(t.label("POST", "/v1/graphs/g/stop") == "/v1/graphs/{id}/stop");
  auto labels = t.labels();
  std::set<std::string> patterns;
  for (auto& route : api_routes)
    patterns.insert(route.second);
  CHECK(labels.size() == patterns.size() + 1);
  CHECK(labels.back() == "unknown");
}

TEST_CASE("route matching of 100,000-character paths runs on a 256 KiB thread stack",
          "[runtime][http]") {
  auto t = api_table();
  const std::string id(100000, 'a');
  std::vector<std::string> paths{
    "/v1/executions/" + id + "/stop", "/v1/executions/" + id, "/" + id,
    std::string(100000, '/'),         "/v1/graphs/" + id + "/executions/x"};
  std::string many_segments;
  for (int i = 0; i < 50000; ++i)
    many_segments += "/a";
  paths.push_back(many_segments);
  std::vector<std::string> labels;
  std::vector<size_t> captures;
  REQUIRE(on_stack(256 * 1024, [&] {
    for (auto& p : paths) {
      auto m = t.match("POST", p);
      labels.push_back(m ? t.pattern(m.index) : std::string{"unknown"});
      captures.push_back(m.capture.size());
      labels.push_back(t.label("GET", p));
    }
  }));
  REQUIRE(labels.size() == 2 * paths.size());
  CHECK(labels[0] == "/v1/executions/{id}/stop");
  CHECK(captures[0] == id.size());
  CHECK(labels[3] == "/v1/executions/{id}");
  for (size_t i = 4; i < labels.size(); ++i)
    CHECK(labels[i] == "unknown");
}

TEST_CASE("method labels and logged paths carry no byte of unknown text",
          "[runtime][http]") {
  CHECK(method_label("GET") == "GET");
  CHECK(method_label("OPTIONS") == "OPTIONS");
  CHECK(method_label("G\x04T") == "other");
  CHECK(method_label("get") == "other");
  CHECK(method_label(std::string(10000, 'X')) == "other");
  CHECK(log_text("/a\x04" "b\nc\"d\\") == "\"/a\\x04b\\x0ac\\\"d\\\\\"");
  CHECK(log_text("/\xff") == "\"/\\xff\"");
  auto long_text = log_text(std::string(1000, 'p'));
  CHECK(long_text.size() == 256 + 5);
  CHECK(long_text.substr(long_text.size() - 4) == "...\"");
}

TEST_CASE("a server started with a 1 MiB stack limit answers paths of 8,000 and 100,000 "
          "characters with 404 and 414, survives an 8 KiB Range header and keeps serving",
          "[integration][http]") {
  // The stack limit is inherited by the server and sizes its threads'
  // default stacks; restored at once for this process's own children.
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_STACK, &old) == 0);
  rlimit small = old;
  small.rlim_cur = 1024 * 1024;
  REQUIRE(::setrlimit(RLIMIT_STACK, &small) == 0);
  std::unique_ptr<server_process> srv;
  try {
    srv = std::make_unique<server_process>();
  } catch (...) {
    ::setrlimit(RLIMIT_STACK, &old);
    throw;
  }
  ::setrlimit(RLIMIT_STACK, &old);
  auto c = srv->client(alice_token);
  const std::string id(8000, 'a');
  const std::vector<std::pair<std::string, std::string>> requests{
    {"GET", "/v1/executions/" + id},
    {"POST", "/v1/executions/" + id + "/stop"},
    {"GET", "/" + id},
    {"POST", "/v1/graphs/" + id + "/executions"}};
  for (auto& [method, path] : requests) {
    auto answer = exchange(srv->port(), method + " " + path
                                          + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                          + alice_token + "\r\nContent-Length: 0\r\n\r\n");
    INFO(method << " " << path.size() << " characters");
    CHECK(status_of(answer) == 404);
    REQUIRE(srv->running());
  }
  auto huge = exchange(srv->port(), "GET /" + std::string(100000, 'b')
                                      + " HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(status_of(huge) == 414);
  REQUIRE(srv->running());
  // httplib parses a Range header with a recursive std::regex before any
  // handler runs: about 3 MiB of stack for 8 KiB, which the server's
  // threads must have whatever the process's default.
  auto ranged = exchange(srv->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nRange: bytes="
                                        + std::string(8100, '1') + "-\r\n\r\n");
  CHECK(status_of(ranged) != 0);
  REQUIRE(srv->running());
  CHECK(request(c, "GET", "/healthz").status == 200);
}

// -- metric labels and logs -------------------------------------------------------

TEST_CASE("2,000 requests with random bogus methods and paths leave the request series "
          "fixed, /metrics small and no control byte in the log",
          "[integration][http]") {
  server_process srv;
  auto anon = srv.client();
  std::mt19937 rng{13};
  auto pick = [&](const std::string& alphabet) {
    return alphabet[std::uniform_int_distribution<size_t>{0, alphabet.size() - 1}(rng)];
  };
  const std::string method_bytes = std::string{"ABCDEFGHIJKLMNOPQRSTUVWXYZ_-\x01\x04\x7f"};
  const std::string path_bytes = "abcxyz019-._~%";
  auto bogus = [&](int i) {
    std::string path = "/";
    auto len = std::uniform_int_distribution<int>{1, 40}(rng);
    for (int k = 0; k < len; ++k) {
      char ch = pick(path_bytes);
      path += ch == '%' ? std::string{k % 2 ? "%04" : "%0A"} : std::string(1, ch);
    }
    std::string method;
    switch (i % 4) {
      case 0: method = "GET"; break;
      case 1: method = "POST"; break;
      case 2: method = "DELETE"; break;
      default:
        for (int k = 0, n = std::uniform_int_distribution<int>{1, 16}(rng); k < n; ++k)
          method += pick(method_bytes);
    }
    return method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
  };
  auto send_batch = [&](int n) {
    std::set<int> codes;
    for (int i = 0; i < n; ++i)
      codes.insert(status_of(exchange(srv.port(), bogus(i))));
    return codes;
  };
  // Counted before `first` is read, so both reads see its series.
  REQUIRE(request(anon, "GET", "/metrics").status == 200);
  auto codes = send_batch(1000);
  CHECK(codes.count(0) == 0);
  auto first = request(anon, "GET", "/metrics");
  REQUIRE(first.status == 200);
  auto series = request_series(first.text);
  send_batch(1000);
  auto second = request(anon, "GET", "/metrics");
  REQUIRE(second.status == 200);
  auto after = request_series(second.text);
  CHECK(after == series);
  CHECK(second.text.size() < 16 * 1024);
  std::set<std::string> methods{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS",
                                "other"};
  for (auto& s : after) {
    INFO(s);
    auto m = s.find("method=\"") + 8;
    CHECK(methods.count(s.substr(m, s.find('"', m) - m)) == 1);
    bool known_route = s.find("route=\"unknown\"") != std::string::npos
                       || s.find("route=\"/metrics\"") != std::string::npos;
    CHECK(known_route);
  }
  // A path with control bytes is logged escaped.
  auto answer = exchange(srv.port(), "GET /esc%04aped%0Apath HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(status_of(answer) == 404);
  CHECK(eventually([&] {
    return srv.log().find("path=\"/esc\\x04aped\\x0apath\"") != std::string::npos;
  }, 10s));
  auto log = srv.log();
  auto raw = std::count_if(log.begin(), log.end(), [](char ch) {
    auto u = static_cast<unsigned char>(ch);
    return (u < 0x20 && u != '\n') || u == 0x7f;
  });
  CHECK(raw == 0);
}

// -- the Authorization header -----------------------------------------------------

TEST_CASE("an Authorization header holding a control character answers 400 on the routes "
          "that take a token, HTAB is no control character there, and /healthz and /metrics "
          "still need no token",
          "[integration][http]") {
  server_process srv;
  auto get = [&](const std::string& path, const std::string& authorization) {
    return exchange(srv.port(), "GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                  + authorization + "\r\n\r\n");
  };
  auto body_of = [](const std::string& answer) {
    auto head = answer.find("\r\n\r\n");
    return head == std::string::npos ? json{} : json::parse(answer.substr(head + 4), nullptr, false);
  };
  const std::string bearer = "Bearer " + alice_token;
  REQUIRE(status_of(get("/v1/executions", bearer)) == 200);
  const std::vector<std::string> values{bearer + std::string{"\0zzz", 4},
                                        bearer + std::string{"\0", 1},
                                        bearer + "\x01",
                                        "Bearer \x1f" + alice_token,
                                        bearer + "\x7f"};
  for (auto& value : values) {
    INFO("Authorization: " << log_text(value));
    for (auto path : {"/v1/executions", "/v1/graphs/g"}) {
      INFO(path);
      auto answer = get(path, value);
      CHECK(status_of(answer) == 400);
      auto body = body_of(answer);
      INFO(answer);
      REQUIRE(body.is_object());
      CHECK(body["error"]["code"] == "bad_request");
      CHECK_THAT(body["error"].value("message", ""), Catch::Contains("control character"));
      CHECK(body["error"]["path"] == "");
    }
    CHECK(status_of(get("/healthz", value)) == 200);
    CHECK(status_of(get("/metrics", value)) == 200);
  }
  // HTAB may stand in a field value: this one is only a wrong token.
  CHECK(status_of(get("/v1/executions", bearer + "\tzz")) == 401);
  CHECK(status_of(get("/v1/executions", bearer)) == 200);
}

// -- slow clients -----------------------------------------------------------------

namespace {

/// Opens `n` connections from `source` that send a request line and one
/// header, and nothing more. @returns their sockets.
std::vector<int> partial_connections(int port, size_t n, const char* source) {
  std::vector<int> fds;
  for (size_t i = 0; i < n; ++i) {
    int fd = connect_from(port, source);
    if (fd < 0)
      break;
    send_all(fd, "GET / HTTP/1.1\r\nHost: x\r\n");
    fds.push_back(fd);
  }
  return fds;
}

/// The time one `GET /healthz` on a new connection from 127.0.0.1 takes to
/// be answered in full; its status in `status`.
std::chrono::milliseconds timed_healthz(int port, int& status) {
  auto t0 = std::chrono::steady_clock::now();
  auto answer = exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  auto t1 = std::chrono::steady_clock::now();
  status = status_of(answer);
  return std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0);
}

/// How many partial connections the two tests below hold: 500, or 200 in a
/// ThreadSanitizer build, where the server takes over 10 s to accept 500
/// (a thread each) and the first ones reach the 10 s header deadline.
constexpr size_t held_connections = slow_build > 1 ? 200 : 500;

/// The bound on a `/healthz` answer while they are held.
constexpr auto healthz_bound = std::chrono::milliseconds{100} * slow_build;

} // namespace

TEST_CASE("with 500 partial-header connections open from 127.0.0.1, /healthz answers "
          "within 100 ms",
          "[integration][http]") {
  server_process srv;
  auto fds = partial_connections(srv.port(), held_connections, "127.0.0.1");
  REQUIRE(fds.size() == held_connections);
  // The first request queues behind the burst of 500 accepts (a thread each);
  // it must be answered, though not within the bound: on the 2-vCPU VM it
  // took 65-280 ms. Once the server has taken up the 500 held connections,
  // a client is answered at once.
  int status = 0;
  auto first = timed_healthz(srv.port(), status);
  INFO("first GET /healthz, behind the accept burst, took " << first.count() << " ms");
  REQUIRE(status == 200);
  auto took = timed_healthz(srv.port(), status);
  INFO("GET /healthz with 500 partial connections held took " << took.count() << " ms");
  CHECK(status == 200);
  CHECK(took < healthz_bound);
  // The partial connections are still open: none was answered.
  size_t answered = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    answered += ::poll(&p, 1, 0) > 0 ? 1 : 0;
    ::close(fd);
  }
  CHECK(answered == 0);
  CHECK(srv.running());
}

/// How many of `pid`'s threads are HTTP connection threads (named
/// `canopy-http`).
size_t http_threads(pid_t pid) {
  size_t n = 0;
  std::error_code ec;
  for (auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec))
    n += read_file(task.path() / "comm") == "canopy-http\n" ? 1 : 0;
  return n;
}

/// Polls `http_threads(pid)` until it equals `n` or `limit` passes.
/// @returns the last count.
size_t await_http_threads(pid_t pid, size_t n, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  size_t now = http_threads(pid);
  while (now != n && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
    now = http_threads(pid);
  }
  return now;
}

TEST_CASE("the server keeps four warm HTTP threads: a burst of 100 connections starts more, "
          "and once they close the pool shrinks back to the four",
          "[integration][http]") {
  server_process srv;
  REQUIRE(await_http_threads(srv.pid(), 4, 10s) == 4);
  auto fds = partial_connections(srv.port(), 100, "127.0.0.1");
  REQUIRE(fds.size() == 100);
  // A thread per open connection: the four warm ones and 96 more.
  CHECK(await_http_threads(srv.pid(), 100, 20s) == 100);
  for (int fd : fds)
    ::close(fd);
  // The 96 end after their idle time (5 s); the warm four stay.
  CHECK(await_http_threads(srv.pid(), 4, 30s) == 4);
  int status = 0;
  timed_healthz(srv.port(), status);
  CHECK(status == 200);
  CHECK(http_threads(srv.pid()) == 4);
}

TEST_CASE("one client address holds at most 128 connections, the rest answer 503, and "
          "/healthz from 127.0.0.1 answers within 100 ms",
          "[integration][http]") {
  server_process srv;
  auto fds = partial_connections(srv.port(), held_connections, "127.0.0.2");
  REQUIRE(fds.size() == held_connections);
  // As above: the first request queues behind the accept burst and must be
  // answered; the next one is bounded.
  int status = 0;
  auto first = timed_healthz(srv.port(), status);
  INFO("first GET /healthz, behind the accept burst, took " << first.count() << " ms");
  REQUIRE(status == 200);
  auto took = timed_healthz(srv.port(), status);
  INFO("GET /healthz with 128 partial connections held took " << took.count() << " ms");
  CHECK(status == 200);
  CHECK(took < healthz_bound);
  // Connections over the cap are answered 503 and closed at once; the
  // others wait for the rest of their headers.
  std::vector<pollfd> waiting;
  for (int fd : fds)
    waiting.push_back({fd, POLLIN, 0});
  size_t refused = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (refused < held_connections - 128 && std::chrono::steady_clock::now() < deadline) {
    if (::poll(waiting.data(), waiting.size(), 100) <= 0)
      continue;
    for (auto& p : waiting) {
      if (p.fd < 0 || (p.revents & (POLLIN | POLLHUP)) == 0)
        continue;
      refused += status_of(read_until_closed(p.fd, 1s)) == 503 ? 1 : 0;
      p.fd = -1; // poll skips it from now on
    }
  }
  CHECK(refused == held_connections - 128);
  // The admitted ones got nothing.
  CHECK(::poll(waiting.data(), waiting.size(), 0) == 0);
  for (int fd : fds)
    ::close(fd);
  CHECK(srv.running());
}

TEST_CASE("a client trickling header bytes is cut off at the 10 s header deadline",
          "[integration][http]") {
  server_process srv;
  int fd = connect_from(srv.port());
  REQUIRE(fd >= 0);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(send_all(fd, "GET /healthz HTTP/1.1\r\n"));
  // One header byte every 200 ms (each read well within the 30 s read
  // timeout) until the server closes the connection, for at most 20 s.
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() - t0 < 20s) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      // An answer (400) and the end of the connection.
      read_until_closed(fd, 2s);
      closed = true;
      break;
    }
    closed = !send_all(fd, "x");
  }
  auto took = std::chrono::steady_clock::now() - t0;
  pollfd p{fd, POLLIN, 0};
  char byte;
  bool ended = ::poll(&p, 1, 0) > 0 && ::recv(fd, &byte, 1, 0) == 0;
  ::close(fd);
  CHECK(ended);
  CHECK(closed);
  CHECK(took >= 9s);
  CHECK(took < 30s);
}

// -- keep-alive ---------------------------------------------------------------------

TEST_CASE("one kept-alive connection answers 150 requests in a row and announces a maximum "
          "of 1,000",
          "[integration][http]") {
  server_process srv;
  int fd = connect_from(srv.port());
  REQUIRE(fd >= 0);
  for (int i = 0; i < 150; ++i) {
    INFO("request " << i + 1);
    REQUIRE(send_all(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    auto answer = read_answer(fd);
    REQUIRE(status_of(answer) == 200);
    CHECK(answer.find("Connection: close") == std::string::npos);
    if (i == 0)
      CHECK(answer.find("max=1000") != std::string::npos);
  }
  ::close(fd);
}
