#include "runtime/cli/step_logs.hpp"

#include <deque>

namespace canopy::core {

std::vector<std::string> last_lines(const std::string& text, size_t n) {
  std::deque<std::string> kept;
  if (n == 0)
    return {};
  size_t end = text.size();
  // Drop trailing line ends and empty lines, then walk back line by line.
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r'))
    --end;
  while (end > 0 && kept.size() < n) {
    auto nl = text.rfind('\n', end - 1);
    size_t begin = nl == std::string::npos ? 0 : nl + 1;
    auto line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    kept.push_front(std::move(line));
    if (nl == std::string::npos)
      break;
    end = nl;
  }
  return {kept.begin(), kept.end()};
}

std::vector<std::string> stderr_tail(const nlohmann::json& step, size_t n) {
  if (!step.is_object())
    return {};
  auto result = step.find("result");
  if (result == step.end() || !result->is_object())
    return {};
  auto err = result->find("stderr");
  if (err == result->end() || !err->is_string())
    return {};
  return last_lines(err->get<std::string>(), n);
}

} // namespace canopy::core
