#include "persistence/error.hpp"

#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace canopy::core {

caf::error make_error(persistence_errc x, std::string message) {
  return caf::error{static_cast<uint8_t>(x), persistence_category,
                    caf::make_message(std::move(message))};
}

const char* to_string(persistence_errc x) {
  switch (x) {
    case persistence_errc::invalid_graph: return "invalid_graph";
    case persistence_errc::io_error: return "io_error";
    case persistence_errc::store_error: return "store_error";
    case persistence_errc::not_found: return "not_found";
    case persistence_errc::corrupt_record: return "corrupt_record";
    case persistence_errc::bad_reference: return "bad_reference";
    case persistence_errc::store_busy: return "store_busy";
    case persistence_errc::fenced: return "fenced";
  }
  return "unknown";
}

std::string message_of(const caf::error& err) {
  if (!err)
    return {};
  auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return caf::to_string(err);
}

bool is(const caf::error& err, persistence_errc x) {
  return err && err.category() == persistence_category
         && err.code() == static_cast<uint8_t>(x);
}

} // namespace canopy::core
