#include "tests/integration/server_process.hpp"
#include "tests/integration/event_log_check.hpp"
#include "tests/integration/openapi_check.hpp"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace canopy::core::test {

namespace {

/// How often the reader thread drains the server's pipes.
constexpr auto drain_interval = std::chrono::milliseconds{2};

/// How often wait_until re-reads an execution.
constexpr auto poll_interval = std::chrono::milliseconds{10};

/// How long kill_group() waits for the worker to be reaped.
constexpr auto kill_timeout = std::chrono::seconds{30};

json parse_or_null(const std::string& text) {
  auto doc = json::parse(text, nullptr, false);
  return doc.is_discarded() ? json(nullptr) : doc;
}

/// The port of `line` when it is `PREFIX...:PORT`; 0 otherwise.
int port_of_line(const std::string& line, const std::string& prefix) {
  auto colon = line.rfind(':');
  if (line.compare(0, prefix.size(), prefix) != 0 || colon == std::string::npos)
    return 0;
  try {
    return std::stoi(line.substr(colon + 1));
  } catch (const std::exception&) {
    return 0;
  }
}

/// True when `path` is `/v1/executions/{id}/events` without a query: a
/// read of a whole event log (or its first page).
bool is_event_log_path(const std::string& path) {
  static const std::string prefix = "/v1/executions/";
  static const std::string suffix = "/events";
  if (path.size() <= prefix.size() + suffix.size() || path.compare(0, prefix.size(), prefix) != 0
      || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  auto id = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  return id.find_first_of("/?") == std::string::npos;
}

/// Checks the log of a 200 answer to `GET /v1/executions/{id}/events` when
/// it is whole (its only page).
void check_log_answer(const std::string& method, const std::string& path, const http_answer& a) {
  if (method != "GET" || a.status != 200 || !is_event_log_path(path) || !a.body.is_object())
    return;
  auto items = a.body.find("items");
  auto next = a.body.find("next");
  if (items == a.body.end() || !items->is_array() || (next != a.body.end() && !next->is_null()))
    return;
  check_event_log(items->get<std::vector<json>>(), "GET " + path);
}

/// Number of occurrences of `needle` in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size()))
    ++n;
  return n;
}

} // namespace

json default_server_config() {
  return {{"listen", "127.0.0.1:0"},
          {"users", {{"alice", {{"token", alice_token}}}, {"bob", {{"token", bob_token}}}}}};
}

// -- server_process ------------------------------------------------------------------

server_process::server_process() : server_process(options{}) {
}

server_process::server_process(options opts) : dir_(std::make_unique<temp_dir>()) {
  config_ = default_server_config();
  config_.merge_patch(opts.config);
  home_ = opts.home.empty() ? dir_->path + "/home" : opts.home;
  auto config_file = dir_->write("server.json", config_.dump(2));
  launch(config_file, opts.args, opts.env, opts.start_timeout);
}

server_process::server_process(const std::string& home, const std::string& config_file,
                               std::vector<std::string> args,
                               std::map<std::string, std::string> env)
  : dir_(std::make_unique<temp_dir>()), home_(home) {
  config_ = json::parse(read_file(config_file), nullptr, false);
  launch(config_file, args, env, std::chrono::seconds{30});
}

void server_process::launch(const std::string& config_file,
                            const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env,
                            std::chrono::seconds timeout) {
  subprocess_options so;
  so.argv = {canopy_binary(), "--home", home_, "serve", "--config", config_file};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  so.env = env;
  add_tsan_log_path(so.env, dir_->path);
  auto p = subprocess::start(so);
  if (!p)
    throw std::runtime_error("cannot start " + canopy_binary());
  proc_ = std::move(*p);
  pid_ = proc_.pid();
  reader_ = std::thread{[this] { read_loop(); }};
  std::string line;
  {
    std::unique_lock<std::mutex> lock{mtx_};
    cv_.wait_for(lock, timeout,
                 [&] { return exited_ || proc_.out().data.find('\n') != std::string::npos; });
    auto& out = proc_.out().data;
    auto nl = out.find('\n');
    if (nl != std::string::npos)
      line = out.substr(0, nl);
  }
  port_ = port_of_line(line, "listening on ");
  if (port_ <= 0) {
    ::kill(pid_, SIGKILL);
    wait_exited(std::chrono::seconds{10});
    quit_ = true;
    reader_.join();
    throw std::runtime_error("canopy serve did not print 'listening on HOST:PORT' (stdout: '"
                             + proc_.out().data + "', stderr: '" + proc_.err().data + "')");
  }
}

server_process::~server_process() {
  // A graceful shutdown first, so the server stops the steps it runs and
  // snapshots them; SIGKILL when that takes too long (its guardian then
  // kills the steps' groups).
  for (int sig : {SIGTERM, SIGKILL}) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (exited_)
        break;
      ::kill(pid_, sig);
    }
    wait_exited(std::chrono::seconds{10});
  }
  quit_ = true;
  if (reader_.joinable())
    reader_.join();
  // proc_'s destructor reaps a leader that is somehow still there.
  echo_tsan_reports("canopy serve (pid " + std::to_string(pid_) + ")", dir_->path);
}

void server_process::read_loop() {
  while (!quit_) {
    bool done;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      done = proc_.poll();
      if (done)
        exited_ = true;
    }
    cv_.notify_all();
    if (done)
      return;
    std::this_thread::sleep_for(drain_interval);
  }
}

bool server_process::wait_exited(std::chrono::steady_clock::duration timeout) {
  std::unique_lock<std::mutex> lock{mtx_};
  return cv_.wait_for(lock, timeout, [&] { return exited_; });
}

int server_process::cluster_port(std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // Complete lines only: the last one may still be being written.
    auto text = out();
    for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos;
         start = nl + 1)
      if (auto port = port_of_line(text.substr(start, nl - start), "cluster on "); port > 0)
        return port;
    if (std::chrono::steady_clock::now() > deadline)
      return 0;
    std::this_thread::sleep_for(poll_interval);
  }
}

httplib::Client server_process::client(const std::string& token) const {
  httplib::Client c{url()};
  if (tls()) {
    c.enable_server_certificate_verification(true);
    c.set_ca_cert_path(config_.at("tls_cert").get<std::string>());
  }
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(60, 0);
  c.set_write_timeout(60, 0);
  c.set_tcp_nodelay(true); // a POST's body is not held back by Nagle
  if (!token.empty())
    c.set_bearer_token_auth(token.c_str());
  return c;
}

int server_process::stop(int sig, std::chrono::seconds timeout) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!exited_)
      ::kill(pid_, sig);
  }
  if (!wait_exited(timeout))
    throw std::runtime_error("canopy serve did not exit within "
                             + std::to_string(timeout.count()) + " s of signal "
                             + std::to_string(sig) + "; log:\n" + log());
  std::lock_guard<std::mutex> guard{mtx_};
  return proc_.exit_code();
}

int server_process::terminate(std::chrono::seconds timeout) {
  return stop(SIGTERM, timeout);
}

int server_process::kill() {
  return stop(SIGKILL, std::chrono::seconds{30});
}

bool server_process::running() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return !exited_;
}

std::string server_process::out() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return proc_.out().data;
}

std::string server_process::log() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return proc_.err().data;
}

// -- worker_process -------------------------------------------------------------------

worker_process::worker_process(std::vector<std::string> args,
                               std::map<std::string, std::string> env)
  : worker_process(options{std::move(args), {}, std::move(env)}) {
}

worker_process::worker_process(options opts) : stop_timeout_(opts.stop_timeout) {
  subprocess_options so;
  so.argv = opts.prefix;
  so.argv.push_back(canopy_binary());
  so.argv.push_back("worker");
  so.argv.insert(so.argv.end(), opts.args.begin(), opts.args.end());
  so.env = std::move(opts.env);
  add_tsan_log_path(so.env, tsan_dir_.path);
  so.cwd = cwd_.path;
  auto p = subprocess::start(so);
  if (!p)
    throw std::runtime_error("cannot start " + so.argv.front());
  proc_ = std::move(*p);
  pid_ = proc_.pid();
  reader_ = std::thread{[this] { read_loop(); }};
}

worker_process::~worker_process() {
  for (int sig : {SIGTERM, SIGKILL}) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (exited_)
        break;
      ::kill(pid_, sig);
    }
    wait_exit(stop_timeout_);
  }
  quit_ = true;
  if (reader_.joinable())
    reader_.join();
  // proc_'s destructor reaps a leader that is somehow still there.
  echo_tsan_reports("canopy worker (pid " + std::to_string(pid_) + ")", tsan_dir_.path);
}

void worker_process::read_loop() {
  while (!quit_) {
    bool done;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      done = proc_.poll();
      if (done)
        exited_ = true;
    }
    cv_.notify_all();
    if (done)
      return;
    std::this_thread::sleep_for(drain_interval);
  }
}

std::string worker_process::out() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return proc_.out().data;
}

std::string worker_process::err() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return proc_.err().data;
}

bool worker_process::running() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return !exited_;
}

int worker_process::exit_code() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return exited_ ? proc_.exit_code() : -1;
}

bool worker_process::wait_for(
  const std::function<bool(const std::string&, const std::string&)>& pred,
  std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock{mtx_};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred(proc_.out().data, proc_.err().data))
      return true;
    if (exited_ || std::chrono::steady_clock::now() > deadline)
      return false;
    cv_.wait_for(lock, poll_interval);
  }
}

bool worker_process::wait_joined(const std::string& supervisor, const std::string& name,
                                  size_t n, std::chrono::milliseconds timeout) {
  auto line = "joined " + supervisor + " as " + name + "\n";
  return wait_for(
    [&](const std::string& out, const std::string&) { return count_of(out, line) >= n; },
    timeout);
}

bool worker_process::wait_joined(int port, const std::string& name, size_t n,
                                  std::chrono::milliseconds timeout) {
  return wait_joined("127.0.0.1:" + std::to_string(port), name, n, timeout);
}

bool worker_process::wait_exit(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock{mtx_};
  return cv_.wait_for(lock, timeout, [&] { return exited_; });
}

int worker_process::stop(int sig, std::chrono::seconds timeout) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!exited_)
      ::kill(pid_, sig);
  }
  if (!wait_exit(timeout))
    throw std::runtime_error("canopy worker did not exit within "
                             + std::to_string(timeout.count()) + " s of signal "
                             + std::to_string(sig) + "; stderr:\n" + err());
  return exit_code();
}

bool worker_process::kill_group() {
  ::kill(-pid_, SIGKILL);
  return wait_exit(kill_timeout);
}

// -- HTTP helpers ----------------------------------------------------------------------

void check_answer(const std::string& method, const std::string& path, int status,
                  const std::string& content_type, const std::string& body) {
#ifdef CANOPY_OPENAPI_CHECK
  auto why = openapi_mismatch(method, path, status, content_type, body);
  if (!why.empty())
    throw std::runtime_error(method + " " + path + " answered " + std::to_string(status) + " ("
                             + content_type + ") unlike runtime/server/openapi.json: " + why
                             + "\nbody: " + body.substr(0, 2000));
#else
  (void) method, (void) path, (void) status, (void) content_type, (void) body;
#endif
}

http_answer request(httplib::Client& c, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& content_type,
                    const httplib::Headers& headers) {
  auto res = [&] {
    if (method == "GET")
      return c.Get(path.c_str(), headers);
    if (method == "POST")
      return c.Post(path.c_str(), headers, body, content_type.c_str());
    if (method == "PUT")
      return c.Put(path.c_str(), headers, body, content_type.c_str());
    if (method == "PATCH")
      return c.Patch(path.c_str(), headers, body, content_type.c_str());
    if (method == "DELETE")
      return c.Delete(path.c_str(), headers, body, content_type.c_str());
    if (method == "OPTIONS")
      return c.Options(path.c_str(), headers);
    throw std::invalid_argument("unsupported method " + method);
  }();
  http_answer a;
  if (!res) {
    a.text = httplib::to_string(res.error());
    return a;
  }
  a.status = res->status;
  a.text = res->body;
  a.body = parse_or_null(res->body);
  a.content_type = res->get_header_value("Content-Type");
  a.www_authenticate = res->get_header_value("WWW-Authenticate");
  a.allow = res->get_header_value("Allow");
  check_answer(method, path, a.status, a.content_type, a.text);
  check_log_answer(method, path, a);
  return a;
}

std::string stop_result_of(const json& body, const std::string& fallback) {
  if (!body.is_object())
    return fallback;
  auto stop = body.find("stop");
  if (stop == body.end() || !stop->is_object())
    return fallback;
  auto result = stop->find("result");
  return result != stop->end() && result->is_string() ? result->get<std::string>() : fallback;
}

http_answer post_json(httplib::Client& c, const std::string& path, const json& body) {
  return request(c, "POST", path, body.dump());
}

http_answer get_json(httplib::Client& c, const std::string& path,
                     const httplib::Headers& headers) {
  return request(c, "GET", path, {}, {}, headers);
}

json wait_until(httplib::Client& c, const std::string& id,
                const std::function<bool(const json&)>& pred,
                std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  json last;
  for (;;) {
    auto a = get_json(c, "/v1/executions/" + id);
    if (a.status == 200) {
      last = a.body;
      if (pred(last))
        return last;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return last;
    std::this_thread::sleep_for(poll_interval);
  }
}

json wait_status(httplib::Client& c, const std::string& id, const std::string& status,
                 std::chrono::milliseconds timeout) {
  return wait_until(
    c, id, [&](const json& doc) { return doc.value("status", "") == status; }, timeout);
}

std::vector<uint64_t> event_log_seqs(httplib::Client& c, const std::string& id) {
  std::vector<uint64_t> out;
  std::vector<json> log;
  std::string cursor;
  for (;;) {
    auto path = "/v1/executions/" + id + "/events";
    if (!cursor.empty())
      path += "?cursor=" + cursor;
    auto a = get_json(c, path);
    if (a.status != 200 || !a.body.is_object() || !a.body["items"].is_array())
      throw std::runtime_error("cannot read the event log of " + id + ": " + a.text);
    for (auto& e : a.body["items"]) {
      out.push_back(e.at("seq").get<uint64_t>());
      log.push_back(e);
    }
    if (!a.body["next"].is_string()) {
      if (!cursor.empty()) // one page was checked as it came
        check_event_log(log, "GET /v1/executions/" + id + "/events, every page");
      return out;
    }
    cursor = a.body["next"].get<std::string>();
  }
}

// -- Server-Sent Events ----------------------------------------------------------------

json sse_event::json_data() const {
  return parse_or_null(data);
}

std::vector<uint64_t> sse_stream::seqs() const {
  std::vector<uint64_t> out;
  for (auto& e : events)
    if (e.id)
      out.push_back(*e.id);
  return out;
}

namespace {

/// An incremental parser of the text/event-stream format.
class sse_parser {
public:
  /// Feeds bytes; calls `on_event` per dispatched event. @returns false as
  /// soon as `on_event` returned false (the rest is dropped).
  bool feed(const char* data, size_t n, sse_stream& out,
            const std::function<bool(const sse_event&)>& on_event) {
    buf_.append(data, n);
    size_t start = 0;
    for (;;) {
      auto nl = buf_.find('\n', start);
      if (nl == std::string::npos)
        break;
      std::string line = buf_.substr(start, nl - start);
      start = nl + 1;
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (!this->line(line, out, on_event)) {
        buf_.clear();
        return false;
      }
    }
    buf_.erase(0, start);
    return true;
  }

private:
  bool line(const std::string& line, sse_stream& out,
            const std::function<bool(const sse_event&)>& on_event) {
    if (line.empty()) {
      if (!any_)
        return true;
      any_ = false;
      has_data_ = false;
      auto e = std::move(cur_);
      cur_ = sse_event{};
      if (e.event == "end") {
        // The stream's last word (the subtree settled), not a logged event.
        out.end = e.json_data();
        return true;
      }
      out.events.push_back(e);
      return !on_event || on_event(out.events.back());
    }
    if (line[0] == ':') {
      ++out.comments;
      return true;
    }
    auto colon = line.find(':');
    std::string field = line.substr(0, colon);
    std::string value;
    if (colon != std::string::npos) {
      value = line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ')
        value.erase(0, 1);
    }
    if (field == "retry") {
      out.retry_ms = std::atoi(value.c_str());
      return true;
    }
    any_ = true;
    if (field == "id") {
      try {
        size_t used = 0;
        auto v = std::stoull(value, &used);
        if (used == value.size())
          cur_.id = v;
      } catch (const std::exception&) {
      }
    } else if (field == "event") {
      cur_.event = value;
    } else if (field == "data") {
      if (has_data_)
        cur_.data += '\n';
      cur_.data += value;
      has_data_ = true;
    }
    return true;
  }

  std::string buf_;
  sse_event cur_;
  bool any_ = false;
  bool has_data_ = false;
};

} // namespace

sse_stream read_sse(httplib::Client& c, const std::string& path,
                    std::optional<uint64_t> last_event_id,
                    const std::function<bool(const sse_event&)>& keep_going) {
  sse_stream out;
  sse_parser parser;
  bool is_stream = false;
  httplib::Headers headers{{"Accept", "text/event-stream"}};
  if (last_event_id)
    headers.emplace("Last-Event-ID", std::to_string(*last_event_id));
  auto res = c.Get(
    path.c_str(), headers,
    httplib::ResponseHandler{[&](const httplib::Response& r) {
      out.status = r.status;
      out.content_type = r.get_header_value("Content-Type");
      is_stream = r.status == 200
                  && out.content_type.find("text/event-stream") != std::string::npos;
      return true;
    }},
    httplib::ContentReceiver{[&](const char* data, size_t n) {
      if (!is_stream) {
        out.text.append(data, n);
        return true;
      }
      if (!parser.feed(data, n, out, keep_going)) {
        out.stopped = true;
        return false;
      }
      return true;
    }});
  if (res) {
    out.ended = true;
    // httplib calls the response handler only for answers with a body (not 204).
    out.status = res->status;
    out.content_type = res->get_header_value("Content-Type");
  } else if (!out.stopped) {
    out.error = httplib::to_string(res.error());
  }
  // A stream's events are checked by the tests; its status and type here,
  // and a stream from the start of the log as a log.
  if (out.status != 0 && (out.ended || is_stream))
    check_answer("GET", path, out.status, out.content_type, is_stream ? "" : out.text);
  if (is_stream && !last_event_id && is_event_log_path(path)) {
    std::vector<json> log;
    for (auto& e : out.events)
      log.push_back(e.json_data());
    check_event_log(log, "SSE GET " + path);
  }
  return out;
}

sse_follower::sse_follower(int port, const std::string& token, const std::string& path,
                           std::optional<uint64_t> last_event_id)
  : client_("127.0.0.1", port) {
  client_.set_connection_timeout(5, 0);
  client_.set_read_timeout(60, 0);
  if (!token.empty())
    client_.set_bearer_token_auth(token.c_str());
  thread_ = std::thread{[this, path, last_event_id] {
    sse_stream r;
    std::string failure;
    try {
      r = read_sse(client_, path, last_event_id, [this](const sse_event& e) {
        {
          std::lock_guard<std::mutex> guard{mtx_};
          seen_.push_back(e);
        }
        cv_.notify_all();
        return true;
      });
    } catch (const std::exception& ex) {
      failure = ex.what();
    }
    {
      std::lock_guard<std::mutex> guard{mtx_};
      result_ = std::move(r);
      failure_ = std::move(failure);
      done_ = true;
    }
    cv_.notify_all();
  }};
}

sse_follower::~sse_follower() {
  if (thread_.joinable()) {
    client_.stop();
    thread_.join();
  }
}

bool sse_follower::wait_for(const std::function<bool(const std::vector<sse_event>&)>& pred,
                            std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock{mtx_};
  cv_.wait_for(lock, timeout, [&] { return done_ || pred(seen_); });
  return pred(seen_);
}

bool sse_follower::wait_for_event(const std::string& type, const std::string& step,
                                  std::chrono::milliseconds timeout) {
  return wait_for(
    [&](const std::vector<sse_event>& evs) {
      for (auto& e : evs)
        if (e.event == type && (step.empty() || e.json_data().value("step", "") == step))
          return true;
      return false;
    },
    timeout);
}

sse_stream sse_follower::finish(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock{mtx_};
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      lock.unlock();
      client_.stop();
    }
  }
  if (thread_.joinable())
    thread_.join();
  std::lock_guard<std::mutex> guard{mtx_};
  if (!failure_.empty())
    throw std::runtime_error(failure_);
  return result_;
}

// -- other processes ------------------------------------------------------------------

long rss_kib(pid_t pid, const std::string& field) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  auto key = field + ":";
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, key.size(), key) == 0) {
      std::istringstream fields{line.substr(key.size())};
      long kib = 0;
      fields >> kib;
      return kib;
    }
  return 0;
}

double cpu_ms(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  auto pos = text.rfind(')');
  if (pos == std::string::npos)
    return -1;
  std::istringstream fields{text.substr(pos + 2)};
  std::string field;
  for (int i = 3; i < 14; ++i) // utime is field 14, stime 15
    if (!(fields >> field))
      return -1;
  double utime = 0, stime = 0;
  if (!(fields >> utime >> stime))
    return -1;
  return (utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

size_t line_count(const std::string& path) {
  std::ifstream in{path};
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

} // namespace canopy::core::test
