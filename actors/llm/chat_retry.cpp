#include "actors/llm/chat_retry.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>

namespace canopy::core {

chat_retry decide_chat_retry(int status, std::optional<int64_t> retry_after_ms, int tries_done,
                             int max_retries, int64_t left_ms, double jitter) {
  bool transient = status == 0 || status == 429 || status >= 500;
  if (!transient || tries_done > max_retries)
    return {};
  int64_t delay = 0;
  if (retry_after_ms) {
    delay = *retry_after_ms;
  } else {
    auto shift = std::min(tries_done - 1, 16);
    auto backoff = std::min(chat_backoff_base_ms << shift, chat_backoff_cap_ms);
    delay = static_cast<int64_t>(static_cast<double>(backoff) * std::clamp(jitter, 0.0, 1.0));
  }
  if (left_ms >= 0 && delay >= left_ms)
    return {}; // the attempt's time would be over before the next try
  return {true, delay};
}

std::optional<int64_t> parse_retry_after(const std::string& value, int64_t now_ms) {
  if (value.empty())
    return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (value.size() > 9)
      return std::nullopt;
    return std::stoll(value) * 1000;
  }
  std::tm tm{};
  auto end = strptime(value.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0')
    return std::nullopt;
  auto at = static_cast<int64_t>(timegm(&tm)) * 1000;
  return std::max<int64_t>(0, at - now_ms);
}

} // namespace canopy::core
