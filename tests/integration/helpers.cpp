#include "tests/integration/helpers.hpp"
#include "tests/integration/event_log_check.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace canopy::core::test {

namespace fs = std::filesystem;

temp_dir::temp_dir() {
  std::string tmpl = "/tmp/canopy-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  path = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::string temp_dir::write(const std::string& name, const std::string& content) const {
  auto full = path + "/" + name;
  fs::create_directories(fs::path(full).parent_path());
  std::ofstream out{full, std::ios::binary};
  out << content;
  return full;
}

json proc_result::out_json() const {
  return json::parse(out, nullptr, false).is_discarded() ? json(nullptr)
                                                         : json::parse(out, nullptr, false);
}

std::string canopy_binary() {
  return CANOPY_BINARY;
}

std::string source_dir() {
  return CANOPY_SOURCE_DIR;
}

bool wait_exit(subprocess& p, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!p.poll()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  echo_tsan_reports_in_stderr("process " + std::to_string(p.pid()), p.err().data);
  return true;
}

bool wait_for_output(subprocess& p, const std::function<bool(const std::string&)>& pred,
                     std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool done = p.poll();
    if (pred(p.out().data))
      return true;
    if (done || std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

proc_result run_command(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                        const std::string& cwd) {
  subprocess_options opts;
  opts.argv = argv;
  opts.cwd = cwd;
  auto p = subprocess::start(opts);
  if (!p)
    throw std::runtime_error("cannot start " + argv.at(0));
  proc_result r;
  if (!wait_exit(*p, timeout)) {
    p->signal_group(SIGKILL);
    wait_exit(*p, std::chrono::seconds{10});
    r.exit_code = -1;
  } else {
    r.exit_code = p->exit_code();
  }
  r.out = p->out().data;
  r.err = p->err().data;
  return r;
}

namespace {

/// True when `args` (after `--home HOME`) make canopy print a whole event
/// log as JSON Lines: the command `events` with `--json`.
bool prints_event_log(const std::vector<std::string>& args) {
  std::string command;
  for (size_t i = 0; i < args.size() && command.empty(); ++i) {
    if (args[i] == "--home" || args[i] == "--color" || args[i] == "--max-parallel")
      ++i; // a global option's value
    else if (args[i].rfind("-", 0) != 0)
      command = args[i];
  }
  return command == "events" && std::find(args.begin(), args.end(), "--json") != args.end();
}

/// Checks the event log `r` printed, when `args` print one and succeeded.
void check_printed_log(const std::vector<std::string>& args, const proc_result& r) {
  if (r.exit_code != 0 || !prints_event_log(args))
    return;
  std::string source = "canopy";
  for (auto& a : args)
    source += " " + a;
  check_event_log(parse_event_lines(r.out), source);
}

} // namespace

proc_result run_canopy(const std::string& home, const std::vector<std::string>& args,
                   std::chrono::seconds timeout, const std::string& cwd) {
  std::vector<std::string> argv{canopy_binary(), "--home", home};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, timeout, cwd);
  check_printed_log(args, r);
  return r;
}

event_log_read read_event_log(const std::string& home, const std::string& id,
                              std::chrono::seconds timeout) {
  event_log_read out;
  auto r = run_command({canopy_binary(), "--home", home, "events", id, "--json"}, timeout);
  if (r.exit_code != 0) {
    out.error = "events exited " + std::to_string(r.exit_code) + ": " + r.err;
    return out;
  }
  std::istringstream in{r.out};
  for (std::string line; std::getline(in, line);) {
    if (line.empty())
      continue;
    auto e = json::parse(line, nullptr, false);
    if (!e.is_object()) {
      out.error = "not a JSON event: " + line;
      return out;
    }
    out.events.push_back(std::move(e));
  }
  out.ok = true;
  return out;
}

proc_result run_canopy_env(const std::string& home, const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env,
                           std::chrono::seconds timeout) {
  subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  opts.env = env;
  auto p = subprocess::start(opts);
  if (!p)
    throw std::runtime_error("cannot start " + canopy_binary());
  proc_result r;
  if (!wait_exit(*p, timeout)) {
    p->signal_group(SIGKILL);
    wait_exit(*p, std::chrono::seconds{10});
  } else {
    r.exit_code = p->exit_code();
  }
  r.out = p->out().data;
  r.err = p->err().data;
  check_printed_log(args, r);
  return r;
}

void add_tsan_log_path(std::map<std::string, std::string>& env, const std::string& dir) {
  const char* opts = std::getenv("TSAN_OPTIONS");
  if (opts == nullptr || env.count("TSAN_OPTIONS") != 0)
    return;
  env["TSAN_OPTIONS"] = std::string{opts} + " log_path=" + dir + "/tsan";
}

bool echo_tsan_reports(const std::string& who, const std::string& dir) {
  bool any = false;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator{dir, ec}) {
    auto name = entry.path().filename().string();
    if (name.rfind("tsan.", 0) != 0)
      continue;
    std::ifstream in{entry.path()};
    std::stringstream text;
    text << in.rdbuf();
    std::cerr << "---- ThreadSanitizer report of " << who << " (" << name << ") ----\n"
              << text.str() << "---- end of " << name << " ----" << std::endl;
    any = true;
  }
  return any;
}

bool echo_tsan_reports_in_stderr(const std::string& who, const std::string& err) {
  if (std::getenv("TSAN_OPTIONS") == nullptr
      || err.find("WARNING: ThreadSanitizer") == std::string::npos)
    return false;
  std::cerr << "---- stderr of " << who << ", with a ThreadSanitizer report ----\n"
            << err << "\n---- end of the stderr of " << who << " ----" << std::endl;
  return true;
}

int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool process_gone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0)
    return true;
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string text;
  if (!std::getline(in, text))
    return true;
  auto pos = text.rfind(')');
  return pos != std::string::npos && pos + 2 < text.size() && text[pos + 2] == 'Z';
}

namespace {

/// State and process group of the /proc/PID/stat line `stat`; false when it
/// cannot be parsed.
bool stat_fields(const std::string& stat, char& state, long& pgrp) {
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size())
    return false;
  std::istringstream rest{stat.substr(close + 2)};
  long ppid = 0;
  rest >> state >> ppid >> pgrp;
  return static_cast<bool>(rest);
}

} // namespace

long pgid_of(long pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  char state = 0;
  long pgrp = -1;
  if (!in || !std::getline(in, stat) || !stat_fields(stat, state, pgrp))
    return -1;
  return pgrp;
}

bool group_alive(long pgid) {
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in{entry.path().string() + "/stat"};
    std::string stat;
    char state = 0;
    long pgrp = -1;
    if (in && std::getline(in, stat) && stat_fields(stat, state, pgrp) && pgrp == pgid
        && state != 'Z' && state != 'X')
      return true;
  }
  return false;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds every) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred())
      return true;
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(every);
  }
}

long wait_pid_file(const std::string& path, std::chrono::milliseconds timeout) {
  long pid = 0;
  eventually(
    [&] {
      auto text = read_file(path);
      if (text.empty() || text.back() != '\n')
        return false;
      pid = std::stol(text);
      return true;
    },
    timeout);
  return pid;
}

int64_t ms_of(const json& t) {
  if (!t.is_string())
    throw std::runtime_error("not an RFC 3339 time: " + t.dump());
  std::tm tm{};
  int ms = 0;
  auto s = t.get<std::string>();
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms)
      != 7)
    throw std::runtime_error("not an RFC 3339 time: " + s);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

void touch(const std::string& path) {
  std::ofstream{path} << "open\n";
}

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has_store(const std::string& home) {
  return std::ifstream{home + "/data.mdb"}.good();
}

} // namespace canopy::core::test
