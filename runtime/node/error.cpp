#include "runtime/node/error.hpp"

#include <caf/make_message.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

#include "persistence/error.hpp"

namespace canopy::core {

caf::error make_error(runtime_errc x, std::string message) {
  return caf::error{static_cast<uint8_t>(x), runtime_category,
                    caf::make_message(std::move(message))};
}

const char* to_string(runtime_errc x) {
  switch (x) {
    case runtime_errc::invalid_input: return "invalid_input";
    case runtime_errc::wrong_state: return "wrong_state";
    case runtime_errc::shutting_down: return "shutting_down";
    case runtime_errc::cluster_port: return "cluster_port";
    case runtime_errc::quota_exceeded: return "quota_exceeded";
  }
  return "unknown";
}

int exit_code_of(const caf::error& err) {
  if (!err)
    return 0;
  if (err.category() == persistence_category) {
    switch (static_cast<persistence_errc>(err.code())) {
      case persistence_errc::invalid_graph:
      case persistence_errc::bad_reference:
        return 2;
      case persistence_errc::not_found:
        return 4;
      case persistence_errc::io_error:
      case persistence_errc::store_error:
      case persistence_errc::corrupt_record:
      case persistence_errc::store_busy:
        return 5;
      case persistence_errc::fenced:
        return 1;
    }
  }
  if (is(err, runtime_errc::invalid_input) || is(err, runtime_errc::cluster_port))
    return 2;
  return 1;
}

bool is(const caf::error& err, runtime_errc x) {
  return err.category() == runtime_category && err.code() == static_cast<uint8_t>(x);
}

} // namespace canopy::core
