#include "runtime/lib/facade.hpp"

#include <caf/sec.hpp>

#include "actors/error.hpp"
#include "persistence/error.hpp"
#include "runtime/node/error.hpp"

namespace canopy {

// -- errc and error ---------------------------------------------------------------

const char* to_string(errc x) {
  switch (x) {
    case errc::invalid: return "invalid";
    case errc::not_found: return "not_found";
    case errc::conflict: return "conflict";
    case errc::stopped: return "stopped";
    case errc::step_failed: return "step_failed";
    case errc::store_unreachable: return "store_unreachable";
    case errc::store_busy: return "store_busy";
    case errc::fenced: return "fenced";
    case errc::busy: return "busy";
    case errc::quota_exceeded: return "quota_exceeded";
    case errc::timeout: return "timeout";
    case errc::shutting_down: return "shutting_down";
    case errc::internal: return "internal";
  }
  return "internal";
}

error::error(errc code, std::string message, std::vector<problem> details)
  : code_(code), message_(std::move(message)), details_(std::move(details)) {
}

const std::string& error::path() const {
  static const std::string none;
  return details_.empty() ? none : details_.front().path;
}

std::string error::to_string() const {
  return path().empty() ? message_ : path() + ": " + message_;
}

error fn_fail(std::string message) {
  return error{errc::step_failed, std::move(message)};
}

const char* version() {
  return CANOPY_VERSION;
}

// -- from the runtime's errors ------------------------------------------------------

namespace facade {

namespace {

errc code_of(const caf::error& err) {
  using core::actors_errc;
  using core::persistence_errc;
  using core::runtime_errc;
  if (err.category() == core::persistence_category) {
    switch (static_cast<persistence_errc>(err.code())) {
      case persistence_errc::invalid_graph: return errc::invalid;
      case persistence_errc::bad_reference: return errc::invalid;
      case persistence_errc::not_found: return errc::not_found;
      case persistence_errc::io_error: return errc::store_unreachable;
      case persistence_errc::store_error: return errc::store_unreachable;
      case persistence_errc::store_busy: return errc::store_busy;
      case persistence_errc::fenced: return errc::fenced;
      case persistence_errc::corrupt_record: return errc::internal;
    }
  } else if (err.category() == core::runtime_category) {
    switch (static_cast<runtime_errc>(err.code())) {
      case runtime_errc::invalid_input: return errc::invalid;
      case runtime_errc::wrong_state: return errc::conflict;
      case runtime_errc::shutting_down: return errc::shutting_down;
      case runtime_errc::cluster_port: return errc::invalid;
      case runtime_errc::quota_exceeded: return errc::quota_exceeded;
    }
  } else if (err.category() == core::actors_category) {
    switch (static_cast<actors_errc>(err.code())) {
      case actors_errc::stop:
      case actors_errc::stop_force:
      case actors_errc::stopped_compactly: return errc::stopped;
      case actors_errc::step_failed: return errc::step_failed;
      case actors_errc::timeout: return errc::timeout;
      case actors_errc::refused: return errc::conflict;
      case actors_errc::spawn_failed: return errc::internal;
    }
  } else if (err == caf::sec::request_timeout) {
    return errc::timeout;
  }
  return errc::internal;
}

} // namespace

error to_error(const caf::error& err) {
  return error{code_of(err), core::message_of(err)};
}

error to_error(const std::vector<core::graph_error>& errs) {
  std::vector<problem> details;
  details.reserve(errs.size());
  for (auto& e : errs)
    details.push_back(problem{e.path, e.message});
  auto message = errs.empty() ? std::string{"invalid graph"} : errs.front().message;
  if (errs.size() > 1)
    message += " (and " + std::to_string(errs.size() - 1) + " more)";
  return error{errc::invalid, std::move(message), std::move(details)};
}

} // namespace facade

} // namespace canopy
