#include "tests/reliability/race_world.hpp"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>

#include "tests/integration/event_log_check.hpp"
#include "tests/reliability/trial_processes.hpp"

namespace canopy::core::test::race {

using namespace std::chrono_literals;

namespace {

/// How often the monitor polls the processes: the precision of the exit
/// times the live-owner check compares event times with.
constexpr auto monitor_interval = 2ms;

/// What a process's stderr keeps in the observations.
constexpr size_t stderr_tail_bytes = 600;

/// What a fenced `run`/`resume` says on stderr.
constexpr const char* fenced_words = "taken over by another process";

std::string tail_of(const std::string& text) {
  return text.size() <= stderr_tail_bytes ? text : text.substr(text.size() - stderr_tail_bytes);
}

/// `: LINE` for the last line of `err` that starts with `error:`, else "".
std::string last_error_line(const std::string& err) {
  auto at = err.rfind("error: ");
  if (at == std::string::npos || (at > 0 && err[at - 1] != '\n'))
    return {};
  auto end = err.find('\n', at);
  return ": " + err.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

httplib::Client client_for(int port, int read_timeout_s) {
  httplib::Client c{"127.0.0.1", port};
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(read_timeout_s, 0);
  c.set_write_timeout(35, 0);
  c.set_bearer_token_auth(alice_token.c_str());
  return c;
}

} // namespace

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// -- life ---------------------------------------------------------------------------------------

world::world(const race_options& o) : opts(o), rng(o.seed) {
  std::string tmpl = "/tmp/canopy-race-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  dir = tmpl;
  home = dir + "/home";
  // `run --detach` needs the home to exist (it opens its log there first).
  std::filesystem::create_directories(home);
  graph_file = dir + "/race.json";
  side_file = dir + "/side.log";
  mark_base = "race-" + std::to_string(::getpid()) + "-" + std::to_string(o.seed) + "-";
  t0_ms = wall_ms();
  result.seed = o.seed;
  result.t0_ms = t0_ms;
  result.dir = dir;
  monitor_ = std::thread{[this] { monitor_loop(); }};
}

world::~world() {
  for (auto i : live([](const tracked&) { return true; }))
    signal(i, SIGKILL);
  settle_marked(mark_base, 0ms, true);
  join_workers();
  quit_ = true;
  monitor_.join();
  procs_.clear(); // reaps what is left
  settle_marked(mark_base, 1000ms, true);
}

int world::draw(int lo, int hi) {
  return std::uniform_int_distribution<int>{lo, hi}(rng);
}

// -- recording ------------------------------------------------------------------------------

void world::note(const std::string& what) {
  std::lock_guard<std::mutex> guard{mtx_};
  result.actions.push_back("+" + std::to_string(wall_ms() - t0_ms) + " ms " + what);
}

void world::did(const std::string& kind, const std::string& detail) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ++result.action_counts[kind];
  }
  note(kind + (detail.empty() ? "" : " " + detail));
}

void world::fail(const std::string& text) {
  note("FAILURE: " + text);
  std::lock_guard<std::mutex> guard{mtx_};
  obs_.failures.push_back(text);
}

void world::add_read(log_read r) {
  std::lock_guard<std::mutex> guard{mtx_};
  obs_.reads.push_back(std::move(r));
}

// -- processes ------------------------------------------------------------------------------

size_t world::spawn_cli(const std::string& role, const std::vector<std::string>& args,
                        bool owner, bool claim) {
  auto t = std::make_unique<tracked>();
  t->span.role = role;
  t->owner = owner;
  std::lock_guard<std::mutex> guard{mtx_};
  auto index = procs_.size();
  t->mark = mark_base + std::to_string(index);
  t->span.started_ms = wall_ms();
  t->cli = start_marked_canopy(home, args, t->mark);
  t->span.pid = t->cli->pid();
  if (claim)
    obs_.claims.push_back({index, t->span.started_ms});
  result.actions.push_back("+" + std::to_string(wall_ms() - t0_ms) + " ms   " + role
                           + " started: pid " + std::to_string(t->span.pid));
  procs_.push_back(std::move(t));
  return index;
}

std::optional<size_t> world::spawn_serve(bool resume_interrupted) {
  server_process::options so;
  so.config = {{"allow_inline_commands", true}};
  so.home = home;
  if (resume_interrupted)
    so.args = {"--resume-interrupted"};
  auto t = std::make_unique<tracked>();
  t->span.role = resume_interrupted ? "serve --resume-interrupted" : "serve";
  {
    std::lock_guard<std::mutex> guard{mtx_};
    t->mark = mark_base + "s" + std::to_string(procs_.size());
  }
  so.env = {{mark_var, t->mark}};
  t->span.started_ms = wall_ms();
  try {
    t->server = std::make_unique<server_process>(so);
  } catch (const std::exception& e) {
    fail(t->span.role + " did not start: " + e.what());
    return std::nullopt;
  }
  t->span.pid = t->server->pid();
  std::lock_guard<std::mutex> guard{mtx_};
  auto index = procs_.size();
  if (resume_interrupted)
    obs_.claims.push_back({index, t->span.started_ms});
  result.actions.push_back("+" + std::to_string(wall_ms() - t0_ms) + " ms   " + t->span.role
                           + " listening: pid " + std::to_string(t->span.pid) + ", port "
                           + std::to_string(t->server->port()));
  procs_.push_back(std::move(t));
  return index;
}

void world::watch_detached(size_t parent, long pid) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto t = std::make_unique<tracked>();
  t->span.role = "detached run";
  t->span.pid = pid;
  // It started after its parent; the parent's start bounds its own.
  t->span.started_ms = procs_.at(parent)->span.started_ms;
  t->mark = procs_.at(parent)->mark;
  t->watched = true;
  auto index = procs_.size();
  for (auto& c : obs_.claims)
    if (c.process == parent)
      c.process = index;
  procs_.push_back(std::move(t));
}

void world::claim(size_t process, int64_t asked_ms) {
  std::lock_guard<std::mutex> guard{mtx_};
  obs_.claims.push_back({process, asked_ms});
}

void world::signal(size_t process, int sig) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = *procs_.at(process);
  if (t.ended())
    return;
  t.span.signalled = sig;
  if (t.span.signalled_ms == 0)
    t.span.signalled_ms = wall_ms();
  ::kill(static_cast<pid_t>(t.span.pid), sig);
}

std::vector<size_t> world::live(const std::function<bool(const tracked&)>& pred) {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<size_t> out;
  for (size_t i = 0; i < procs_.size(); ++i)
    if (!procs_[i]->ended() && pred(*procs_[i]))
      out.push_back(i);
  return out;
}

bool world::ended(size_t process) {
  std::lock_guard<std::mutex> guard{mtx_};
  return procs_.at(process)->ended();
}

bool world::wait_ended(size_t process, std::chrono::milliseconds timeout) {
  return eventually([&] { return ended(process); }, timeout);
}

std::string world::out_of(size_t process) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = *procs_.at(process);
  return t.cli ? t.cli->out().data : std::string{};
}

int world::port_of(size_t process) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = *procs_.at(process);
  return t.server ? t.server->port() : 0;
}

std::string world::name_of(size_t process) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = *procs_.at(process);
  return t.span.role + " pid " + std::to_string(t.span.pid);
}

race_result world::copy_result() {
  std::lock_guard<std::mutex> guard{mtx_};
  return result;
}

void world::monitor_loop() {
  while (!quit_) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& t : procs_)
        if (!t->ended())
          poll(*t);
    }
    std::this_thread::sleep_for(monitor_interval);
  }
}

void world::poll(tracked& t) {
  std::string err;
  if (t.cli) {
    if (!t.cli->poll())
      return;
    t.span.exit_code = t.cli->exit_code();
    err = t.cli->err().data;
  } else if (t.server) {
    if (t.server->running())
      return;
    t.span.exit_code = t.server->stop(SIGTERM, 1s); // exited: nothing is sent
    err = t.server->log();
  } else if (!process_gone(t.span.pid)) {
    return;
  }
  t.span.ended_ms = wall_ms();
  t.span.stderr_tail = tail_of(err);
  t.span.fenced = t.span.exit_code == 1 && err.find(fenced_words) != std::string::npos;
  if (t.span.fenced)
    ++result.fenced;
  result.actions.push_back("+" + std::to_string(t.span.ended_ms - t0_ms) + " ms   "
                           + t.span.role + " pid " + std::to_string(t.span.pid) + " exited "
                           + std::to_string(t.span.exit_code) + (t.span.fenced ? " (fenced)" : "")
                           + last_error_line(err));
}

// -- HTTP -----------------------------------------------------------------------------------

http_answer world::http(size_t process, const std::string& method, const std::string& path,
                        const std::string& body) {
  auto c = client_for(port_of(process), 35);
  http_call call;
  call.what = method + " " + path;
  call.started_ms = wall_ms();
  http_answer a;
  try {
    a = request(c, method, path, body);
    call.status = a.status;
    if (a.status == 0)
      call.error = a.text;
  } catch (const std::exception& e) { // an answer unlike the API document
    call.status = -1;
    call.error = e.what();
  }
  call.ms = wall_ms() - call.started_ms;
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = *procs_.at(process);
  call.server_signalled = t.span.signalled != 0;
  call.server_running = !t.ended();
  obs_.http.push_back(call);
  return a;
}

void world::sse(size_t process, std::optional<uint64_t> last_event_id) {
  unchecked_event_logs judged_later;
  auto c = client_for(port_of(process), 60);
  auto path = "/v1/executions/" + id() + "/events";
  http_call call;
  call.what = "GET " + path + " (SSE"
              + (last_event_id ? ", Last-Event-ID " + std::to_string(*last_event_id) : "") + ")";
  call.started_ms = wall_ms();
  sse_stream s;
  try {
    s = read_sse(c, path, last_event_id);
    call.status = s.status;
  } catch (const std::exception& e) {
    call.status = -1;
    call.error = e.what();
  }
  log_read r;
  r.source = call.what + " sent at +" + std::to_string(call.started_ms - t0_ms) + " ms";
  r.after = last_event_id.value_or(0);
  for (auto& e : s.events)
    r.events.push_back(e.json_data());
  std::lock_guard<std::mutex> guard{mtx_};
  auto& t = *procs_.at(process);
  call.server_signalled = t.span.signalled != 0;
  call.server_running = !t.ended();
  // A stream lasts while the tree runs: not held to the answer bound. Cut
  // short by anything but a signalled server, it is an unanswered request.
  if (call.status == 200 && !s.error.empty() && !call.server_signalled && call.server_running) {
    call.status = 0;
    call.error = s.error;
  }
  obs_.http.push_back(call);
  if (s.status == 200)
    obs_.reads.push_back(std::move(r));
}

// -- the tree -------------------------------------------------------------------------------

std::string world::id() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return id_;
}

void world::set_id(const std::string& id) {
  std::lock_guard<std::mutex> guard{mtx_};
  id_ = id;
  obs_.root = id;
}

// -- workers --------------------------------------------------------------------------------

void world::spawn_worker(const std::string& what, std::function<void()> f) {
  std::lock_guard<std::mutex> guard{mtx_};
  workers_.emplace_back([this, what, f = std::move(f)] {
    try {
      f();
    } catch (const std::exception& e) {
      fail(what + ": " + e.what());
    }
  });
}

void world::join_workers() {
  for (;;) {
    std::vector<std::thread> batch;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      batch.swap(workers_);
    }
    if (batch.empty())
      return;
    for (auto& w : batch)
      w.join();
  }
}

} // namespace canopy::core::test::race
