#include "tests/bench/floor_server.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <lmdb.h>

#include "tests/integration/server_process.hpp"

namespace canopy::core::test {

void print_floor_comparison(const load_summary& floor, const load_summary& real, int clients,
                            int seconds) {
  auto row = [](const char* what, int digits, double f, double r) {
    std::printf("| %s | %.*f | %.*f | %.2f |\n", what, digits, f, digits, r, r > 0 ? f / r : 0.0);
  };
  std::printf("\n| %d clients, %d s each | floor | canopy | floor / canopy |\n"
              "|---|---|---|---|\n",
              clients, seconds);
  row("executions started/s", 1, floor.starts, real.starts);
  row("HTTP requests/s", 1, floor.requests, real.requests);
  row("HTTP requests per start", 2, floor.requests / std::max(floor.starts, 1e-9),
      real.requests / std::max(real.starts, 1e-9));
  row("stop p50 (ms)", 2, floor.p50, real.p50);
  row("stop p99 (ms)", 2, floor.p99, real.p99);
  row("stop max (ms)", 2, floor.max, real.max);
}

// -- canned_body ------------------------------------------------------------------

canned_body::canned_body(const std::string& body, const std::string& id) : size_(body.size()) {
  size_t from = 0;
  for (auto at = body.find(id); !id.empty() && at != std::string::npos;
       at = body.find(id, from)) {
    parts_.push_back(body.substr(from, at - from));
    from = at + id.size();
  }
  parts_.push_back(body.substr(from));
}

std::string canned_body::render(const std::string& id) const {
  std::string out;
  out.reserve(size_ + 16);
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (i > 0)
      out += id;
    out += parts_[i];
  }
  return out;
}

// -- capture ----------------------------------------------------------------------

namespace {

/// `doc` with `status` set, as the server writes JSON; the text unchanged
/// when it says `status` already.
std::string with_status(const http_answer& a, const std::string& status) {
  if (a.body.is_object() && a.body.value("status", "") == status)
    return a.text;
  auto doc = a.body;
  doc["status"] = status;
  return doc.dump();
}

bool failed(const char* what, const http_answer& a) {
  std::fprintf(stderr, "floor: cannot capture %s: %d %s\n", what, a.status, a.text.c_str());
  return false;
}

} // namespace

bool capture_floor_bodies(httplib::Client& c, floor_bodies& out) {
  auto held = post_json(c, "/v1/graphs/held/executions", {{"inputs", json::object()}});
  if (held.status != 201 || !held.body.is_object())
    return failed("a start", held);
  auto held_id = held.body["id"].get<std::string>();
  out.id_size = held_id.size();
  out.started = canned_body{held.text, held_id};
  auto stop = post_json(c, "/v1/executions/" + held_id + "/stop",
                        {{"mode", "graceful"}, {"wait", 30}});
  if (stop.status != 200 || stop_result_of(stop.body, "") != "stopped")
    return failed("a stop", stop);
  out.stopped = canned_body{stop.text, held_id};

  auto small = post_json(c, "/v1/graphs/small/executions", {{"inputs", json::object()}});
  if (small.status != 201 || !small.body.is_object())
    return failed("a start", small);
  auto small_id = small.body["id"].get<std::string>();
  auto running = get_json(c, "/v1/executions/" + small_id);
  if (running.status != 200 || !running.body.is_object())
    return failed("a running execution", running);
  out.running = canned_body{with_status(running, "running"), small_id};
  wait_status(c, small_id, "completed");
  auto done = get_json(c, "/v1/executions/" + small_id);
  if (done.status != 200 || done.body.value("status", "") != "completed")
    return failed("a completed execution", done);
  out.completed = canned_body{done.text, small_id};
  return true;
}

// -- floor_log --------------------------------------------------------------------

floor_log::floor_log(const std::string& home) {
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  bool opened = mdb_env_create(&env) == 0 && mdb_env_set_mapsize(env, size_t{8} << 30) == 0
                && mdb_env_open(env, home.c_str(), MDB_NOTLS, 0644) == 0
                && mdb_txn_begin(env, nullptr, 0, &txn) == 0
                && mdb_dbi_open(txn, nullptr, 0, &dbi) == 0 && mdb_txn_commit(txn) == 0;
  if (!opened) {
    std::fprintf(stderr, "floor: cannot open an LMDB environment in %s\n", home.c_str());
    if (env)
      mdb_env_close(env);
    return;
  }
  env_ = env;
  dbi_ = dbi;
  thread_ = std::thread{[this] { run(); }};
}

floor_log::~floor_log() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  if (env_)
    mdb_env_close(env_);
}

bool floor_log::commit(std::string value) {
  std::future<bool> committed;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queue_.push_back(waiting{std::move(value), {}});
    committed = queue_.back().committed.get_future();
  }
  cv_.notify_one();
  return committed.get();
}

void floor_log::complete_after(const std::string& id, clock_type::time_point due,
                               std::function<void(const std::string&)> done) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    finishing_.push_back(finishing{id, due, 2, std::move(done)});
  }
  cv_.notify_one();
}

void floor_log::run() {
  std::unique_lock<std::mutex> lock{mtx_};
  for (;;) {
    // Wake for a waiting record, an execution due for its next commit, or
    // the earliest due time.
    auto now = clock_type::now();
    auto next = now + std::chrono::milliseconds{50};
    bool due = false;
    for (auto& f : finishing_) {
      due = due || f.due <= now;
      next = std::min(next, f.due);
    }
    if (!due && queue_.empty() && !stopping_) {
      cv_.wait_until(lock, next);
      continue;
    }
    if (stopping_) {
      for (auto& w : queue_)
        w.committed.set_value(false);
      return;
    }
    auto group = std::move(queue_);
    queue_.clear();
    std::vector<finishing> staged;
    for (auto i = finishing_.begin(); i != finishing_.end();)
      if (i->due <= now) {
        staged.push_back(std::move(*i));
        i = finishing_.erase(i);
      } else {
        ++i;
      }
    lock.unlock();
    MDB_txn* txn = nullptr;
    bool ok = mdb_txn_begin(env_, nullptr, 0, &txn) == 0;
    auto put = [&](const std::string& value) {
      auto k = ++key_;
      unsigned char key[8];
      for (int b = 7; b >= 0; --b, k >>= 8)
        key[b] = static_cast<unsigned char>(k & 0xff);
      MDB_val mk{sizeof key, key}, mv{value.size(), const_cast<char*>(value.data())};
      ok = ok && mdb_put(txn, dbi_, &mk, &mv, 0) == 0;
    };
    for (auto& w : group)
      put(w.value);
    for (auto& f : staged)
      put(f.id);
    if (ok)
      ok = mdb_txn_commit(txn) == 0;
    else if (txn)
      mdb_txn_abort(txn);
    for (auto& w : group)
      w.committed.set_value(ok);
    lock.lock();
    for (auto& f : staged) {
      if (--f.commits_left > 0) {
        finishing_.push_back(std::move(f)); // due already: the next commit takes it
        continue;
      }
      lock.unlock();
      f.done(f.id);
      lock.lock();
    }
  }
}

// -- floor_server -----------------------------------------------------------------

floor_server::floor_server(floor_bodies bodies, std::chrono::milliseconds run_time,
                           floor_log* log)
  : bodies_(std::move(bodies)), run_time_(run_time), log_(log) {
  // As runtime/server/server.cpp configures the listener of `canopy serve`.
  svr_.set_payload_max_length(size_t{8} << 20);
  svr_.set_read_timeout(30, 0);
  svr_.set_write_timeout(30, 0);
  static constexpr auto json_type = "application/json";

  svr_.Post(R"(/v1/graphs/([^/]+)/executions)",
            [this](const httplib::Request& req, httplib::Response& res) {
              auto id = next_id();
              auto body = bodies_.started.render(id);
              bool finishes = log_ && req.matches[1].str() == "small"; // it completes
              if (log_ && !log_->commit(body)) {
                res.status = 500;
                return;
              }
              {
                std::lock_guard<std::mutex> guard{mtx_};
                live_.emplace(id, clock_type::now());
                if (finishes)
                  unfinished_.insert(id);
              }
              if (finishes)
                log_->complete_after(id, clock_type::now() + run_time_,
                                     [this](const std::string& done) {
                                       std::lock_guard<std::mutex> guard{mtx_};
                                       unfinished_.erase(done);
                                     });
              res.status = 201;
              res.set_content(body, json_type);
            });
  svr_.Get(R"(/v1/executions/([^/]+))", [this](const httplib::Request& req,
                                               httplib::Response& res) {
    auto id = req.matches[1].str();
    bool done = true;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (auto i = live_.find(id); i != live_.end()) {
        done = log_ ? unfinished_.count(id) == 0 : clock_type::now() - i->second >= run_time_;
        if (done)
          live_.erase(i);
      }
    }
    res.status = 200;
    res.set_content((done ? bodies_.completed : bodies_.running).render(id), json_type);
  });
  svr_.Post(R"(/v1/executions/([^/]+)/stop)",
            [this](const httplib::Request& req, httplib::Response& res) {
              auto id = req.matches[1].str();
              auto body = bodies_.stopped.render(id);
              // The request, then the stopped state: two commits in a row.
              if (log_ && !(log_->commit(id) && log_->commit(body))) {
                res.status = 500;
                return;
              }
              {
                std::lock_guard<std::mutex> guard{mtx_};
                live_.erase(id);
              }
              res.status = 200;
              res.set_content(body, json_type);
            });
  port_ = svr_.bind("127.0.0.1", 0);
  if (port_ >= 0)
    thread_ = std::thread{[this] { svr_.listen_after_bind(); }};
}

floor_server::~floor_server() {
  svr_.stop();
  if (thread_.joinable())
    thread_.join();
}

std::string floor_server::next_id() {
  uint64_t n;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    n = ++counter_;
  }
  auto digits = std::to_string(n);
  auto width = std::max(bodies_.id_size, digits.size() + 1);
  return "f" + std::string(width - digits.size() - 1, '0') + digits;
}

} // namespace canopy::core::test
