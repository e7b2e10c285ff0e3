#include "actors/error.hpp"

#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace canopy::core {

caf::error make_error(actors_errc x, std::string context) {
  return caf::error{static_cast<uint8_t>(x), actors_category,
                    caf::make_message(std::move(context))};
}

caf::error make_stop(stop_reason reason, stop_mode mode) {
  return make_error(mode == stop_mode::force ? actors_errc::stop_force : actors_errc::stop,
                    to_string(reason));
}

bool is_stop(const caf::error& err, stop_reason& reason, stop_mode& mode) {
  // Note: category() of an empty error dereferences null in CAF 0.17.
  if (!err || err.category() != actors_category)
    return false;
  auto code = static_cast<actors_errc>(err.code());
  if (code != actors_errc::stop && code != actors_errc::stop_force)
    return false;
  mode = code == actors_errc::stop_force ? stop_mode::force : stop_mode::graceful;
  auto& ctx = err.context();
  reason = ctx.size() == 1 && ctx.match_element<std::string>(0)
             ? stop_reason_of(ctx.get_as<std::string>(0))
             : stop_reason::requested;
  return true;
}

stop_reason stop_reason_of(const std::string& text) {
  auto reason = stop_reason::requested;
  if (!from_string(text, reason))
    reason = stop_reason::requested;
  return reason;
}

caf::error make_compact_stop(uint64_t events) {
  return caf::error{static_cast<uint8_t>(actors_errc::stopped_compactly), actors_category,
                    caf::make_message(events)};
}

bool is_compact_stop(const caf::error& err, uint64_t& events) {
  if (!err || err.category() != actors_category
      || static_cast<actors_errc>(err.code()) != actors_errc::stopped_compactly)
    return false;
  auto& ctx = err.context();
  if (ctx.size() != 1 || !ctx.match_element<uint64_t>(0))
    return false;
  events = ctx.get_as<uint64_t>(0);
  return true;
}

const char* to_string(actors_errc x) {
  switch (x) {
    case actors_errc::stop: return "stop";
    case actors_errc::stop_force: return "stop_force";
    case actors_errc::step_failed: return "step_failed";
    case actors_errc::timeout: return "timeout";
    case actors_errc::spawn_failed: return "spawn_failed";
    case actors_errc::refused: return "refused";
    case actors_errc::stopped_compactly: return "stopped_compactly";
  }
  return "unknown";
}

} // namespace canopy::core
