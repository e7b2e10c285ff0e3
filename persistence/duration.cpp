#include "persistence/duration.hpp"

#include <cctype>
#include <ctime>

#include "persistence/error.hpp"

namespace canopy::core {

caf::expected<millis> parse_duration(const std::string& text) {
  auto bad = [&] {
    return make_error(persistence_errc::invalid_graph,
                      "bad duration '" + text
                        + "' (expected a whole number with unit ms, s, m or h, e.g. \"10s\")");
  };
  size_t i = 0;
  uint64_t n = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    n = n * 10 + static_cast<uint64_t>(text[i] - '0');
    if (n > 1'000'000'000'000ull)
      return bad();
    ++i;
  }
  if (i == 0)
    return bad();
  auto unit = text.substr(i);
  if (unit == "ms")
    return millis{n};
  if (unit == "s")
    return millis{n * 1000};
  if (unit == "m")
    return millis{n * 60'000};
  if (unit == "h")
    return millis{n * 3'600'000};
  return bad();
}

std::string to_duration_string(millis d) {
  auto n = d.count();
  if (n != 0 && n % 3'600'000 == 0)
    return std::to_string(n / 3'600'000) + "h";
  if (n != 0 && n % 60'000 == 0)
    return std::to_string(n / 60'000) + "m";
  if (n != 0 && n % 1000 == 0)
    return std::to_string(n / 1000) + "s";
  return std::to_string(n) + "ms";
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string to_rfc3339(int64_t ms) {
  time_t secs = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

caf::expected<millis> duration_from_json(const nlohmann::json& v) {
  if (!v.is_string())
    return make_error(persistence_errc::invalid_graph,
                      std::string{"expected a duration such as \"10s\", got "}
                        + (v.is_number() ? v.dump() : std::string{v.type_name()}));
  return parse_duration(v.get<std::string>());
}

} // namespace canopy::core
