#include "tests/reliability/trial_processes.hpp"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "tests/integration/helpers.hpp"

namespace canopy::core::test {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// State of the /proc/PID/stat line (0 when unreadable).
char state_of(const std::string& pid) {
  std::ifstream in{"/proc/" + pid + "/stat"};
  std::string stat;
  if (!std::getline(in, stat))
    return 0;
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

} // namespace

// -- marked processes ------------------------------------------------------------------------

std::vector<long> marked_processes(const std::string& mark, bool prefix) {
  std::vector<long> out;
  auto needle = std::string{mark_var} + "=" + mark;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator("/proc", ec)) {
    auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in{entry.path().string() + "/environ", std::ios::binary};
    bool hit = false;
    for (std::string var; !hit && std::getline(in, var, '\0');)
      hit = prefix ? var.compare(0, needle.size(), needle) == 0 : var == needle;
    if (!hit)
      continue;
    auto state = state_of(name);
    if (state != 0 && state != 'Z' && state != 'X')
      out.push_back(std::stol(name));
  }
  return out;
}

size_t settle_marked(const std::string& mark, std::chrono::milliseconds timeout, bool prefix) {
  std::vector<long> left;
  auto deadline = clock_type::now() + timeout;
  while (!(left = marked_processes(mark, prefix)).empty() && clock_type::now() < deadline)
    std::this_thread::sleep_for(5ms);
  for (auto pid : left) {
    ::kill(static_cast<pid_t>(-pid), SIGKILL);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  if (!left.empty())
    eventually([&] { return marked_processes(mark, prefix).empty(); }, 5000ms);
  return left.size();
}

// -- canopy processes ------------------------------------------------------------------------

subprocess start_marked_canopy(const std::string& home, const std::vector<std::string>& args,
                               const std::string& mark) {
  subprocess_options opts;
  opts.argv = {canopy_binary(), "--home", home};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  opts.env = {{mark_var, mark}};
  auto p = subprocess::start(opts);
  if (!p)
    throw std::runtime_error("cannot start " + canopy_binary());
  return std::move(*p);
}

bool exits_by(subprocess& p, clock_type::time_point deadline) {
  for (;;) {
    if (p.poll())
      return true;
    if (clock_type::now() >= deadline)
      return false;
    std::this_thread::sleep_for(2ms);
  }
}

// -- the store seen from the command line -----------------------------------------------

store_view read_store(const std::string& home, std::string id) {
  store_view v;
  // Killed before the store was created: nothing stored, nothing to read
  // (a reading command refuses a home without a store).
  if (!has_store(home))
    return v;
  auto ls = run_canopy(home, {"ls", "--json"}, 60s);
  auto list = ls.out_json();
  if (ls.exit_code != 0 || !list.is_array()) {
    v.ok = false;
    v.error = "ls exited " + std::to_string(ls.exit_code) + ": " + ls.err;
    return v;
  }
  if (id.empty() && !list.empty())
    id = list.back().value("id", "");
  v.root = id;
  if (id.empty())
    return v;
  auto show = run_canopy(home, {"show", id, "--json"}, 60s);
  v.doc = show.out_json();
  if (show.exit_code != 0 || !v.doc.is_object()) {
    v.ok = false;
    v.error = "show exited " + std::to_string(show.exit_code) + ": " + show.err;
  }
  // Read as printed, unjudged: the trial judges the log once it cleaned up.
  auto log = read_event_log(home, id, 60s);
  v.events = std::move(log.events);
  if (!log.ok) {
    v.ok = false;
    v.error += (v.error.empty() ? "" : "; ") + log.error;
  }
  return v;
}

} // namespace canopy::core::test
