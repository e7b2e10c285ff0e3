#pragma once

// Real `canopy serve` and `canopy worker` subprocesses for tests and
// benchmarks, and small HTTP helpers around httplib::Client: JSON requests,
// polling an execution's status, and a Server-Sent Events reader.
//
// Nothing here uses Catch: failures to start or stop a process throw
// std::runtime_error (with the process's stderr), which a Catch test reports
// as a failure and a benchmark as a fatal error.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "actors/process/subprocess.hpp"
#include "tests/integration/helpers.hpp"

namespace canopy::core::test {

/// Bearer tokens of the two users every test server knows.
inline const std::string alice_token = "ta";
inline const std::string bob_token = "tb";

/// The config every test server starts from: `listen` 127.0.0.1:0 and the
/// users alice (token "ta") and bob ("tb").
json default_server_config();

/// One `canopy --home HOME serve --config FILE [ARGS...]` process in its own
/// process group. The constructor returns once the server printed its
/// `listening on HOST:PORT` line (or throws). A reader thread drains the
/// server's stdout and stderr the whole time, so a chatty log can never
/// block it. The destructor stops a server still running (SIGTERM, then
/// SIGKILL after 10 s), reaps it, and in a ThreadSanitizer run writes the
/// server's reports to stderr (see echo_tsan_reports). Not copyable, not movable; its members
/// may be called from any thread.
class server_process {
public:
  struct options {
    /// Merged over default_server_config() with JSON merge patch (a null
    /// value removes a key).
    json config = json::object();
    /// Arguments after `serve --config FILE`, e.g. `--resume-interrupted`.
    std::vector<std::string> args;
    /// The store folder; empty: a fresh folder owned by this object. Pass the
    /// same folder to a second server to restart "on the same home".
    std::string home;
    /// Environment variables merged over this process's for the server.
    std::map<std::string, std::string> env;
    /// Longest wait for the listening line.
    std::chrono::seconds start_timeout{30};
  };

  server_process();
  explicit server_process(options opts);
  /// A server on `home` with an existing config file, used as it is.
  server_process(const std::string& home, const std::string& config_file,
                 std::vector<std::string> args = {},
                 std::map<std::string, std::string> env = {});
  ~server_process();
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  /// The port the server listens on (from its listening line).
  int port() const { return port_; }
  /// `http://127.0.0.1:PORT`, or `https://...` when the config has `tls_cert`.
  std::string url() const {
    return (tls() ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_);
  }
  /// True when the server speaks HTTPS (its config has `tls_cert`).
  bool tls() const { return config_.contains("tls_cert"); }
  /// The server's pid (also its process group id).
  pid_t pid() const { return pid_; }
  /// The store folder.
  const std::string& home() const { return home_; }
  /// The folder holding the config file (and the home, when owned).
  const std::string& dir() const { return dir_->path; }
  /// The config the server was started with.
  const json& config() const { return config_; }

  /// The port of the `cluster on HOST:PORT` line that `serve --cluster`
  /// prints after its listening line; 0 when it did not come within
  /// `timeout`.
  int cluster_port(std::chrono::milliseconds timeout = std::chrono::seconds{10}) const;

  /// A client for this server; with a non-empty `token` every request
  /// carries `Authorization: Bearer TOKEN`. Read timeout: 60 s. Over HTTPS
  /// it trusts the config's `tls_cert` (a self-signed certificate) and
  /// checks the host name.
  httplib::Client client(const std::string& token = {}) const;

  /// Sends SIGTERM and waits for the exit. @returns the exit code (128 +
  /// signal when it died of a signal). Throws when it does not exit in time.
  int terminate(std::chrono::seconds timeout = std::chrono::seconds{60});

  /// Sends `sig` to the server and waits for the exit. @returns the exit
  /// code. Throws when it does not exit in time.
  int stop(int sig, std::chrono::seconds timeout = std::chrono::seconds{60});

  /// Sends SIGKILL to the server and waits until it is reaped, as in a real
  /// crash (its guardian then kills the steps it ran).
  /// @returns the exit code (137).
  int kill();

  /// True until the process exited.
  bool running() const;

  /// Everything the server wrote to stdout / stderr so far (stderr: the
  /// last MiB).
  std::string out() const;
  std::string log() const;

private:
  /// Starts the server with `config_file` and waits for its listening line.
  void launch(const std::string& config_file, const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env, std::chrono::seconds timeout);
  void read_loop();
  /// Waits until the process exited; false on timeout.
  bool wait_exited(std::chrono::steady_clock::duration timeout);

  std::unique_ptr<temp_dir> dir_;
  std::string home_;
  json config_;
  subprocess proc_;
  pid_t pid_ = -1;
  int port_ = 0;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool exited_ = false;
  std::string out_;
  std::string err_;
  std::atomic<bool> quit_{false};
  std::thread reader_;
};

// -- worker_process -------------------------------------------------------------------

/// One `[PREFIX...] canopy worker ARGS...` process in its own process group,
/// run in a fresh folder of its own. Unlike server_process, the constructor
/// returns at once (a worker may start before its supervisor, or be meant to
/// fail): wait_joined() waits for its `joined HOST:PORT as NAME` line. A
/// reader thread drains the worker's stdout and stderr the whole time. The
/// destructor stops a worker still running (SIGTERM, then SIGKILL, each
/// followed by a wait of up to `options::stop_timeout`), reaps it, and in a
/// ThreadSanitizer run writes the worker's reports to stderr. Not
/// copyable, not movable; its members may be called from any thread.
class worker_process {
public:
  struct options {
    /// Arguments after `worker`, e.g. `--join HOST:PORT --name NAME`.
    std::vector<std::string> args;
    /// Words before the canopy binary, e.g. `ip netns exec NS` to run the
    /// worker in a network namespace (the prefix must exec the binary, so
    /// that pid() stays the worker's).
    std::vector<std::string> prefix;
    /// Environment variables merged over this process's for the worker.
    std::map<std::string, std::string> env;
    /// The destructor's wait after SIGTERM, and again after SIGKILL.
    std::chrono::seconds stop_timeout{10};
  };

  explicit worker_process(options opts);
  /// `canopy worker ARGS...` with `env` merged over this process's
  /// environment.
  explicit worker_process(std::vector<std::string> args,
                          std::map<std::string, std::string> env = {});
  ~worker_process();
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  /// The worker's pid (also its process group id).
  pid_t pid() const { return pid_; }
  /// The folder it runs in.
  const std::string& cwd() const { return cwd_.path; }

  /// Everything the worker wrote to stdout / stderr so far (stderr: the
  /// last MiB).
  std::string out() const;
  std::string err() const;

  /// True until the process exited.
  bool running() const;
  /// The exit code (128 + signal when it died of a signal); -1 while it runs.
  int exit_code() const;

  /// Waits until `pred(stdout, stderr)` holds. @returns false on timeout or
  /// when the process exited without it holding.
  bool wait_for(const std::function<bool(const std::string&, const std::string&)>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds{30});

  /// Waits until stdout holds `n` lines `joined SUPERVISOR as NAME`, where
  /// `supervisor` is the `--join` argument (HOST:PORT).
  bool wait_joined(const std::string& supervisor, const std::string& name, size_t n = 1,
                   std::chrono::milliseconds timeout = std::chrono::seconds{30});
  /// wait_joined() for the supervisor `127.0.0.1:PORT`.
  bool wait_joined(int port, const std::string& name, size_t n = 1,
                   std::chrono::milliseconds timeout = std::chrono::seconds{30});

  /// Waits until the process exited; false on timeout.
  bool wait_exit(std::chrono::milliseconds timeout);

  /// Sends `sig` to the worker and waits for the exit. @returns the exit
  /// code. Throws when it does not exit in time.
  int stop(int sig, std::chrono::seconds timeout = std::chrono::seconds{30});

  /// SIGKILLs the worker's whole process group (the worker alone: the steps
  /// it started have groups of their own) and waits until it is reaped.
  /// @returns false when it did not exit within 30 s.
  bool kill_group();

private:
  void read_loop();

  temp_dir cwd_;
  /// Where a ThreadSanitizer run's worker writes its reports (see
  /// add_tsan_log_path), apart from its folder.
  temp_dir tsan_dir_;
  std::chrono::seconds stop_timeout_;
  subprocess proc_;
  pid_t pid_ = -1;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool exited_ = false;
  std::atomic<bool> quit_{false};
  std::thread reader_;
};

// -- HTTP helpers ----------------------------------------------------------------------

/// One HTTP answer. `status` is 0 when no answer arrived (then `text` holds
/// the client error).
struct http_answer {
  int status = 0;
  std::string text;         ///< the raw body
  json body;                ///< the body parsed as JSON, null when it is not JSON
  std::string content_type;
  std::string www_authenticate; ///< the `WWW-Authenticate` header, "" when none
  std::string allow;            ///< the `Allow` header (of a 405), "" when none
};

/// The `stop.result` of a stop answer's body (runtime/docs/reference/http.md: the execution
/// document with the stop inside); `fallback` when there is none.
std::string stop_result_of(const json& body, const std::string& fallback = "?");

/// Checks an answer against the API document (tests/integration/openapi_check.hpp)
/// in the test binary; throws std::runtime_error naming what does not
/// match. Elsewhere (the benchmarks) it does nothing. Every helper below
/// calls it on every answer.
void check_answer(const std::string& method, const std::string& path, int status,
                  const std::string& content_type, const std::string& body);

/// Any request: `method` GET, POST, PUT, DELETE, PATCH or OPTIONS.
http_answer request(httplib::Client& c, const std::string& method, const std::string& path,
                    const std::string& body = {},
                    const std::string& content_type = "application/json",
                    const httplib::Headers& headers = {});

/// POST `body` as JSON.
http_answer post_json(httplib::Client& c, const std::string& path,
                      const json& body = json::object());

/// GET `path` (JSON answer expected).
http_answer get_json(httplib::Client& c, const std::string& path,
                     const httplib::Headers& headers = {});

/// Polls `GET /v1/executions/{id}` until `pred(doc)` holds or `timeout`
/// passes. @returns the last document read (null when none could be read).
json wait_until(httplib::Client& c, const std::string& id,
                const std::function<bool(const json&)>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds{30});

/// Polls until the execution's status is `status`. @returns the last
/// document read; check its status.
json wait_status(httplib::Client& c, const std::string& id, const std::string& status,
                 std::chrono::milliseconds timeout = std::chrono::seconds{30});

/// The seqs of `GET /v1/executions/{id}/events` (the JSON event log).
std::vector<uint64_t> event_log_seqs(httplib::Client& c, const std::string& id);

// -- Server-Sent Events ----------------------------------------------------------------

/// One dispatched SSE event.
struct sse_event {
  std::optional<uint64_t> id; ///< the `id:` field, when it was a number
  std::string event;          ///< the `event:` field
  std::string data;           ///< the `data:` lines joined with "\n"
  json json_data() const;     ///< data parsed (null when it is not JSON)
};

/// What one SSE connection delivered.
struct sse_stream {
  int status = 0;                  ///< HTTP status; 0 when none arrived
  std::string content_type;
  std::vector<sse_event> events;
  size_t comments = 0;             ///< comment lines (`: ...`)
  bool ended = false;              ///< the server ended the stream
  std::optional<json> end;         ///< the data of the closing `end` event, if one came
  int retry_ms = 0;                ///< the `retry:` field, 0 when none came
  bool stopped = false;            ///< the callback asked to stop
  std::string text;                ///< the raw body (for error answers)
  std::string error;               ///< the client error, if any
  std::vector<uint64_t> seqs() const;
};

/// Reads `GET path` with `Accept: text/event-stream` (and `Last-Event-ID`
/// when given) until the server ends the stream or `keep_going(event)`
/// returns false; the event that made it return false is kept, nothing
/// after it is.
sse_stream read_sse(httplib::Client& c, const std::string& path,
                    std::optional<uint64_t> last_event_id = std::nullopt,
                    const std::function<bool(const sse_event&)>& keep_going = {});

/// Reads an SSE stream on a thread of its own, so a test can wait for an
/// event while it acts on the server. The destructor aborts the connection.
class sse_follower {
public:
  sse_follower(int port, const std::string& token, const std::string& path,
               std::optional<uint64_t> last_event_id = std::nullopt);
  ~sse_follower();
  sse_follower(const sse_follower&) = delete;
  sse_follower& operator=(const sse_follower&) = delete;

  /// Waits until `pred(events so far)` holds; false on timeout or when the
  /// stream ended without it holding.
  bool wait_for(const std::function<bool(const std::vector<sse_event>&)>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds{30});

  /// Waits until an event of type `type` (for step `step`, when given)
  /// arrived.
  bool wait_for_event(const std::string& type, const std::string& step = {},
                      std::chrono::milliseconds timeout = std::chrono::seconds{30});

  /// Waits for the stream to end; aborts it after `timeout`. @returns what
  /// was read (`ended` is false when it had to be aborted). Throws when the
  /// answer did not match the API document (check_answer).
  sse_stream finish(std::chrono::milliseconds timeout = std::chrono::seconds{30});

private:
  httplib::Client client_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<sse_event> seen_;
  bool done_ = false;
  sse_stream result_;
  std::string failure_; ///< read_sse's exception (an answer unlike the API document)
  std::thread thread_;
};

// -- other processes ------------------------------------------------------------------

/// A memory field of /proc/PID/status in KiB (default VmRSS, the resident
/// set; RssAnon is its heap part, without the store's mapped pages); 0 when
/// unknown.
long rss_kib(pid_t pid, const std::string& field = "VmRSS");

/// The CPU time (user + system, ms) process `pid` has used so far, its
/// children not counted; -1 when unreadable.
double cpu_ms(pid_t pid);

/// Number of lines in the file `path` (0 when it does not exist).
size_t line_count(const std::string& path);

} // namespace canopy::core::test
