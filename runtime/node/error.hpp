#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

namespace canopy::core {

/// Errors of the runtime layer (library API, CLI).
enum class runtime_errc : uint8_t {
  /// Inputs do not match the graph's declared inputs; context names them.
  invalid_input = 1,
  /// The execution is in a state that does not allow the operation.
  wrong_state,
  /// The runtime is shutting down.
  shutting_down,
  /// The cluster port could not be opened (address in use, not local).
  cluster_port,
  /// A per-user quota (`quotas` of the node config) is used up; context
  /// names the quota and its limit.
  quota_exceeded,
};

constexpr caf::atom_value runtime_category = caf::atom("runtime");

caf::error make_error(runtime_errc x, std::string message);

const char* to_string(runtime_errc x);

/// True when `err` is `runtime_errc` `x` (whatever its message).
bool is(const caf::error& err, runtime_errc x);

/// Maps any canopy error to the CLI exit code of runtime/docs/reference/cli.md: 2 usage or invalid
/// input, 4 not found, 5 store unavailable, 1 otherwise.
int exit_code_of(const caf::error& err);

} // namespace canopy::core
